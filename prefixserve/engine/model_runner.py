"""ModelRunner: turns one SchedulerOutput into one forward pass and sampled tokens.

It owns the model weights, the paged KV tensors (per layer, key and value of shape
[num_blocks, block_size, num_kv_heads, head_dim]) and the sampler with its per-request
generators. It packs the scheduled chunks into flat input ids, positions and attention
metadata, runs the model, computes logits only for the rows that sample, and samples.
It knows nothing about the scheduler's queues or about prefix caching: block tables
arrive from the caller.
"""

from __future__ import annotations

import torch

from prefixserve.layers.attention_metadata import AttentionMetadata
from prefixserve.layers.sampler import Sampler, SampleResult
from prefixserve.model_config import ModelConfig
from prefixserve.models import build_model
from prefixserve.scheduler.scheduler_output import SchedulerOutput

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def kv_bytes_per_block(config: ModelConfig, block_size: int, dtype: str) -> int:
    elem = torch.empty((), dtype=_DTYPES[dtype]).element_size()
    return 2 * config.num_hidden_layers * block_size * config.num_key_value_heads * config.head_dim * elem


class ModelRunner:
    def __init__(
        self,
        model_config: ModelConfig,
        weights,
        num_blocks: int,
        block_size: int,
        dtype: str = "float32",
        device: str = "cpu",
        seed: int = 0,
        attention_backend: str | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.dtype = _DTYPES[dtype]
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.model = build_model(model_config, self.dtype, self.device, attention_backend=attention_backend)
        self.model.load_weights(weights)
        self.model.eval()
        shape = (num_blocks, block_size, model_config.num_key_value_heads, model_config.head_dim)
        # torch.empty: untouched pages cost no memory until a block is first written.
        self.kv_caches = [
            (torch.empty(shape, dtype=self.dtype, device=self.device),
             torch.empty(shape, dtype=self.dtype, device=self.device))
            for _ in range(model_config.num_hidden_layers)
        ]
        self.sampler = Sampler(seed, self.device)
        self._generators: dict[str, torch.Generator] = {}

    def release(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, block_tables: dict[str, list[int]]) -> dict[str, tuple[int, object]]:
        """Run one step. Returns {request_id: (token, logprobs or None)} for the chunks that sample."""
        ids: list[int] = []
        query_lens, seq_lens, tables = [], [], []
        rows, sampling = [], []  # the last query row of each chunk that samples
        for chunk in out.chunks:
            req = chunk.request
            ids.extend(req.all_token_ids[chunk.start:chunk.end])
            query_lens.append(chunk.num_tokens)
            seq_lens.append(chunk.end)
            tables.append(block_tables[req.request_id])
            if chunk.samples:
                rows.append(len(ids) - 1)
                sampling.append(req)
        meta = AttentionMetadata.build(query_lens, seq_lens, tables, self.block_size, self.device)
        input_ids = torch.tensor(ids, dtype=torch.int64, device=self.device)
        hidden = self.model(input_ids, meta.positions(self.device), meta, self.kv_caches)
        if not rows:
            return {}
        logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
        result = self.sampler(logits, [r.sampling_params for r in sampling],
                              [self._generator(r) for r in sampling])
        return {r.request_id: (result.token_ids[j], result.logprobs[j]) for j, r in enumerate(sampling)}

    def _generator(self, req) -> torch.Generator | None:
        seed = req.sampling_params.seed
        if seed is None or req.sampling_params.greedy:
            return None
        gen = self._generators.get(req.request_id)
        if gen is None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
            self._generators[req.request_id] = gen
        return gen


__all__ = ["ModelRunner", "SampleResult", "kv_bytes_per_block"]
