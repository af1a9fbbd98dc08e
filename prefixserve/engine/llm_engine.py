"""LLMEngine: the one synchronous engine core that the offline LLM and the server share.

add_request() tokenizes and validates a prompt and fans it out into `n` engine requests;
step() runs one scheduler decision, one forward pass, and returns a RequestOutput for every
user request that changed. abort_request() stops a request wherever it is and frees its
blocks. It wires the pieces together and owns no policy of its own: scheduling lives in
the Scheduler, KV memory in the KVCacheManager, the forward pass in the ModelRunner.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from prefixserve.config import EngineConfig
from prefixserve.engine.model_runner import ModelRunner, kv_bytes_per_block
from prefixserve.engine.output_processor import OutputProcessor
from prefixserve.kv_cache import KVCacheManager
from prefixserve.loader import load_checkpoint
from prefixserve.outputs import RequestOutput
from prefixserve.request import Request, RequestStatus
from prefixserve.sampling_params import SamplingParams
from prefixserve.scheduler.scheduler import Scheduler

MAX_DEFAULT_MODEL_LEN = 8192


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        checkpoint = load_checkpoint(config.model)
        self.checkpoint_path = checkpoint.path
        self.model_config = checkpoint.config
        self.tokenizer = checkpoint.tokenizer
        self.max_model_len = self._max_model_len(config)
        cache = config.cache
        num_blocks = cache.num_kv_blocks or max(1, int(
            cache.kv_cache_memory_gb * 2**30 // kv_bytes_per_block(self.model_config, cache.block_size, config.dtype)))
        self.runner = ModelRunner(self.model_config, checkpoint.weights(), num_blocks, cache.block_size,
                                  config.dtype, config.device, config.seed, config.attention_backend)
        self.kv_cache = KVCacheManager(
            num_blocks=num_blocks, block_size=cache.block_size, enable_caching=cache.enable_prefix_caching,
            prefix_cache=cache.prefix_cache, hash_algo=cache.hash_algo, eviction_policy=cache.eviction_policy,
            hash_seed=cache.hash_seed, enable_kv_events=True,
            kv_events_ring_size=cache.kv_events_ring_size)
        self.scheduler = Scheduler(config.scheduler, self.kv_cache, self.max_model_len)
        self.outputs = OutputProcessor(self.tokenizer)
        self._ids = itertools.count()
        self.eos_token_ids = sorted(self.tokenizer.eos_token_ids)
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "steps": 0}

    def _max_model_len(self, config: EngineConfig) -> int:
        native = self.model_config.max_position_embeddings
        wanted = config.scheduler.max_model_len
        if wanted is None:
            return min(native, MAX_DEFAULT_MODEL_LEN)
        if wanted > native:
            raise ValueError(f"max_model_len {wanted} exceeds the model's max_position_embeddings ({native})")
        return wanted

    # ---------------------------------------------------------------- requests
    def next_request_id(self) -> str:
        return str(next(self._ids))

    def encode_prompt(self, prompt: str | dict[str, Any] | list[int]) -> tuple[str | None, list[int]]:
        """A prompt as text, token ids, or {"prompt_token_ids": [...]} -> (text or None, token ids)."""
        if isinstance(prompt, str):
            return prompt, self.tokenizer.encode(prompt)
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return prompt.get("prompt"), self._check_ids(prompt["prompt_token_ids"])
            if "prompt" in prompt:
                return self.encode_prompt(prompt["prompt"])
            raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        if isinstance(prompt, list):
            return None, self._check_ids(prompt)
        raise ValueError(f"a prompt must be a string, a list of token ids or a dict; got {type(prompt).__name__}")

    def _check_ids(self, ids: Any) -> list[int]:
        vocab = self.model_config.vocab_size
        if not isinstance(ids, list) or not ids:
            raise ValueError("prompt_token_ids must be a non-empty list of integers")
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
                raise ValueError(f"invalid token id {t!r}: token ids must be integers in [0, {vocab})")
        return list(ids)

    def add_request(
        self,
        request_id: str,
        prompt: str | dict[str, Any] | list[int],
        params: SamplingParams,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> None:
        if request_id in self.outputs.parents:
            raise ValueError(f"request id {request_id!r} is already in use")
        text, ids = self.encode_prompt(prompt)
        if isinstance(prompt, dict):
            cache_salt = prompt.get("cache_salt", cache_salt)
        children = []
        for i in range(params.n):
            child_params = dataclasses.replace(
                params, n=1, seed=None if params.seed is None else params.seed + i,
                stop_token_ids=params.stop_token_ids + [t for t in self.eos_token_ids[1:] if not params.ignore_eos])
            child_id = request_id if params.n == 1 else f"{request_id}#{i}"
            children.append(Request(child_id, ids, child_params, cache_salt=cache_salt, priority=priority,
                                    eos_token_id=self.eos_token_ids[0] if self.eos_token_ids else None))
        for child in children:
            self.scheduler.check_fits(child)
        self.outputs.add(request_id, text, children)
        for child in children:
            self.scheduler.add_request(child)
        self.stats["prompt_tokens"] += len(ids)

    def abort_request(self, request_id: str) -> None:
        for child in self.outputs.children(request_id):
            self.scheduler.abort_request(child.request_id)
            self.outputs.mark_finished(child)
            self.runner.release(child.request_id)
        self.outputs.remove(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # -------------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        sched_out = self.scheduler.schedule()
        if sched_out.is_empty:
            return []
        tables = {c.request.request_id: self.kv_cache.block_ids(c.request) for c in sched_out.chunks}
        sampled = self.runner.execute(sched_out, tables)
        advanced = self.scheduler.update_from_output(sched_out, {k: v[0] for k, v in sampled.items()})
        self.stats["steps"] += 1
        self.stats["generation_tokens"] += len(advanced)
        for req in self.outputs.process(advanced, {k: v[1] for k, v in sampled.items()}):
            self.scheduler.finish_request(req, RequestStatus.FINISHED_STOPPED)
        changed: dict[str, None] = {}
        for req in advanced:
            if req.is_finished:
                self.runner.release(req.request_id)
            changed[self.outputs.parent_of(req.request_id)] = None
        results = [self.outputs.output(rid) for rid in changed]
        for out in results:
            if out.finished:
                self.outputs.remove(out.request_id)
        return results

    def cache_stats(self) -> dict[str, Any]:
        stats = self.kv_cache.stats.to_dict()
        stats.update(num_running=self.scheduler.num_running, num_waiting=self.scheduler.num_waiting,
                     num_preemptions=self.scheduler.num_preemptions, kv_cache_usage=self.kv_cache.usage())
        return stats

    def reset_prefix_cache(self) -> bool:
        return self.kv_cache.reset_prefix_cache()

