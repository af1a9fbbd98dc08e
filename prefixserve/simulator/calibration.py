"""Calibration: measure the cost model's three constants on the real engine.

Times `prefixserve.LLM` (the default model unless told otherwise, prefix caching off so
every prompt token is computed) on three shapes and solves the cost model for them:

    prefill_ms_per_token = (t(one prompt of L2) - t(one prompt of L1)) / (L2 - L1)
    step(B)              = (t(B prompts, 1 + K tokens) - t(B prompts, 1 token)) / K
    decode_ms_per_token  = (step(B) - step(1)) / (B - 1)
    step_overhead_ms     = step(1) - decode_ms_per_token

Each figure is the median of `repeats` runs. The engine is imported lazily: the simulator
itself never needs torch. This module knows nothing about routing.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from prefixserve.simulator.cost_model import CostModel


def _timed(llm: Any, prompts: list[list[int]], max_tokens: int) -> float:
    from prefixserve.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    batch = [{"prompt_token_ids": p} for p in prompts]
    start = time.perf_counter()
    llm.generate(batch, params, use_tqdm=False)
    return (time.perf_counter() - start) * 1000.0


def calibrate(model: str | None = None, short_len: int = 32, long_len: int = 256,
              batch: int = 8, decode_tokens: int = 16, repeats: int = 3,
              seed: int = 0) -> dict[str, Any]:
    """Measure the constants; returns the CostModel fields plus the raw timings."""
    from prefixserve.entrypoints.llm import LLM

    rng = random.Random(seed)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(1000, 20000) for _ in range(n)]

    llm = LLM(model=model, enable_prefix_caching=False, max_num_seqs=max(batch, 8),
              max_num_batched_tokens=max(2048, long_len * 2))
    _timed(llm, [prompt(short_len)], 4)  # warm up
    t_short = statistics.median(_timed(llm, [prompt(short_len)], 1) for _ in range(repeats))
    t_long = statistics.median(_timed(llm, [prompt(long_len)], 1) for _ in range(repeats))
    prefill = max(0.0, (t_long - t_short) / (long_len - short_len))

    def step(b: int) -> float:
        one = statistics.median(_timed(llm, [prompt(short_len) for _ in range(b)], 1)
                                for _ in range(repeats))
        many = statistics.median(_timed(llm, [prompt(short_len) for _ in range(b)],
                                        1 + decode_tokens) for _ in range(repeats))
        return max(0.0, (many - one) / decode_tokens)

    step_1, step_b = step(1), step(batch)
    decode = max(0.0, (step_b - step_1) / (batch - 1))
    overhead = max(0.0, step_1 - decode)
    cost = CostModel(round(prefill, 4), round(decode, 4), round(overhead, 4))
    return {**cost.to_dict(), "model": model or "default",
            "timings_ms": {"prefill_short": t_short, "prefill_long": t_long,
                           "short_len": short_len, "long_len": long_len,
                           "decode_step_batch_1": step_1, f"decode_step_batch_{batch}": step_b}}
