"""LLM: the offline, vLLM-compatible API (`LLM(...).generate(prompts, SamplingParams)`).

A thin loop over LLMEngine: add every prompt, step until all finish, return outputs in
input order. chat() renders conversations with the model's chat template first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from prefixserve.config import EngineConfig
from prefixserve.engine.llm_engine import LLMEngine
from prefixserve.loader import Tokenizer
from prefixserve.outputs import RequestOutput
from prefixserve.sampling_params import SamplingParams

Prompt = str | dict[str, Any] | list[int]
Message = dict[str, str]


class LLM:
    def __init__(self, model: str | None = None, **kwargs: Any) -> None:
        self.engine = LLMEngine(EngineConfig.from_kwargs(model=model, **kwargs))

    def get_tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        cache_salt: str | Sequence[str | None] | None = None,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """One RequestOutput per prompt, in input order."""
        batch = _as_list(prompts)
        params = _broadcast(sampling_params or SamplingParams(), len(batch), "sampling_params")
        salts = _broadcast(cache_salt, len(batch), "cache_salt")
        prios = _broadcast(list(priority) if priority is not None else 0, len(batch), "priority")
        ids = []
        try:
            for prompt, p, salt, prio in zip(batch, params, salts, prios, strict=True):
                rid = self.engine.next_request_id()
                self.engine.add_request(rid, prompt, p, cache_salt=salt, priority=prio)
                ids.append(rid)
            return self._run(ids, use_tqdm)
        except BaseException:
            for rid in ids:
                self.engine.abort_request(rid)
            raise

    def chat(
        self,
        messages: list[Message] | list[list[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        cache_salt: str | Sequence[str | None] | None = None,
    ) -> list[RequestOutput]:
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        tok = self.engine.tokenizer
        prompts = [tok.encode_chat(conv, add_generation_prompt) for conv in conversations]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm, cache_salt=cache_salt)

    def _run(self, ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="Processed prompts", disable=not use_tqdm or len(ids) < 2)
        pending = set(ids)
        while pending:
            for out in self.engine.step():
                if out.finished and out.request_id in pending:
                    results[out.request_id] = out
                    pending.discard(out.request_id)
                    bar.update(1)
        bar.close()
        return [results[i] for i in ids]

    def reset_prefix_cache(self) -> bool:
        return self.engine.reset_prefix_cache()

    def cache_stats(self) -> dict[str, Any]:
        return self.engine.cache_stats()


def _as_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        raise ValueError("pass token ids as {'prompt_token_ids': [...]}, not a bare list of ints")
    return items


def _broadcast(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries but there are {n} prompts")
        return list(value)
    return [value] * n
