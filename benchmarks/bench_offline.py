"""Offline throughput: nano-vllm's workload scaled to this machine, against transformers.

Workload (seed 0): `--num-requests` prompts of random token ids with lengths uniform in
[100, 512] and output lengths uniform in [32, 128], EOS ignored. prefixserve runs them all
through one `LLM.generate` (continuous batching, prefix caching off: random prompts share
nothing). The baseline is transformers' `generate` one request at a time on the same
weights, on the first `--hf-requests` of them (it is slow; tokens/s is what compares).
Also: single-request prefill latency at 1024 and 2048 tokens, ours vs transformers'
forward. Prints one JSON line per result.

    python benchmarks/bench_offline.py [--num-requests 64] [--hf-requests 8]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch


def workload(n: int, vocab: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(100, 512))], rng.randint(32, 128))
            for _ in range(n)]


def bench_prefixserve(llm, reqs) -> dict:
    from prefixserve import SamplingParams

    prompts = [{"prompt_token_ids": ids} for ids, _ in reqs]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for _, m in reqs]
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"engine": "prefixserve", "requests": len(reqs), "output_tokens": out_tokens, "seconds": round(dt, 2),
            "output_tok_s": round(out_tokens / dt, 1),
            "total_tok_s": round((out_tokens + sum(len(i) for i, _ in reqs)) / dt, 1)}


def bench_transformers(model, reqs) -> dict:
    out_tokens, dt = 0, 0.0
    model.generate(torch.tensor([reqs[0][0][:50]]), max_new_tokens=2, do_sample=False)  # warm-up
    for ids, m in reqs:
        t = time.perf_counter()
        gen = model.generate(torch.tensor([ids]), max_new_tokens=m, min_new_tokens=m, do_sample=False)
        dt += time.perf_counter() - t
        out_tokens += gen.shape[1] - len(ids)
    return {"engine": "transformers", "requests": len(reqs), "output_tokens": out_tokens, "seconds": round(dt, 2),
            "output_tok_s": round(out_tokens / dt, 1),
            "total_tok_s": round((out_tokens + sum(len(i) for i, _ in reqs)) / dt, 1)}


def bench_prefill(llm, model, n: int, vocab: int, reps: int = 3) -> dict:
    from prefixserve import SamplingParams

    rng = random.Random(n)
    ids = [rng.randrange(1000, vocab - 1000) for _ in range(n)]
    ours, theirs = [], []
    for _ in range(reps):
        t = time.perf_counter()
        llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)
        ours.append(time.perf_counter() - t)
        with torch.inference_mode():
            t = time.perf_counter()
            model(torch.tensor([ids]))
            theirs.append(time.perf_counter() - t)
    o, h = sorted(ours)[reps // 2], sorted(theirs)[reps // 2]
    return {"bench": "prefill", "tokens": n, "prefixserve_s": round(o, 3), "transformers_s": round(h, 3),
            "speedup": round(h / o, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--hf-requests", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-hf", action="store_true")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM

    from prefixserve import LLM

    llm = LLM(enable_prefix_caching=False, max_num_seqs=64, max_num_batched_tokens=2048)
    vocab = llm.engine.model_config.vocab_size
    reqs = workload(args.num_requests, vocab, args.seed)
    ours = bench_prefixserve(llm, reqs)
    print(json.dumps({"bench": "offline_throughput", **ours}), flush=True)
    if args.skip_hf:
        return
    model = AutoModelForCausalLM.from_pretrained(str(llm.engine.checkpoint_path), dtype=torch.float32).eval()
    hf = bench_transformers(model, reqs[: args.hf_requests])
    print(json.dumps({"bench": "offline_throughput", **hf}), flush=True)
    print(json.dumps({"bench": "offline_throughput_ratio",
                      "prefixserve_over_transformers": round(ours["output_tok_s"] / hf["output_tok_s"], 2)}), flush=True)
    for n in (1024, 2048):
        print(json.dumps(bench_prefill(llm, model, n, vocab)), flush=True)


if __name__ == "__main__":
    main()
