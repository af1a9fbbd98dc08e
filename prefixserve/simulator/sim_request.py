"""SimRequest: one workload request on its way through the simulated cluster.

Built when the request arrives at the router, from its `RequestSpec`: the `RequestInfo` the
router's policies read (text, hash key, and token ids for `kv_events`), and, when a worker
admits it, the `Request` the worker's KV cache manager holds. Answers are synthesized
deterministically from the request id (`max_tokens` words from the benchmark word list), so
multi-turn and tree-of-thought children see the same text in every run. Timestamps are
simulated seconds. It knows nothing of clocks or workers' batching.
"""

from __future__ import annotations

from typing import Any

import xxhash

from prefixserve.bench.text import WORDS
from prefixserve.bench.workloads import RequestSpec
from prefixserve.request import Request
from prefixserve.router.request_info import RequestInfo
from prefixserve.sampling_params import SamplingParams
from prefixserve.simulator.word_tokenizer import WordTokenizer

_MASK64 = (1 << 64) - 1
_SAMPLING = SamplingParams(temperature=0.0)  # shared: the KV cache never reads it


def answer_words(spec: RequestSpec) -> list[str]:
    """The simulated model's answer: exactly as many tokens as `max_tokens` asks for (a chat
    answer ends with an end-of-turn token)."""
    n = max(1, spec.max_tokens) - (1 if spec.is_chat else 0)
    state, words = xxhash.xxh64_intdigest(spec.request_id.encode()), []
    for _ in range(n):  # a 64-bit LCG seeded by the id: cheap and the same on every machine
        state = (state * 6364136223846793005 + 1442695040888963407) & _MASK64
        words.append(WORDS[(state >> 33) % len(WORDS)])
    return words


def synthesize_answer(spec: RequestSpec) -> str:
    return " ".join(answer_words(spec))


def request_info(spec: RequestSpec, with_token_ids: list[int] | None = None) -> RequestInfo:
    """What the HTTP router would extract from the OpenAI body of this request."""
    if spec.is_chat:
        info = RequestInfo.from_chat({"messages": spec.messages})
    else:
        info = RequestInfo.from_completion({"prompt": spec.prompt})
    info.token_ids = with_token_ids
    return info


class SimRequest:
    __slots__ = ("spec", "info", "arrival", "worker", "kv_request", "prompt_len", "cached_tokens",
                 "first_token_at", "finish_step", "seq")

    def __init__(self, spec: RequestSpec, info: RequestInfo, arrival: float, seq: int) -> None:
        self.spec = spec
        self.info = info
        self.arrival = arrival
        self.seq = seq
        self.worker: Any = None
        self.kv_request: Request | None = None
        self.prompt_len = 0
        self.cached_tokens = 0
        self.first_token_at = 0.0
        self.finish_step = 0

    @property
    def max_tokens(self) -> int:
        return max(1, self.spec.max_tokens)

    def make_kv_request(self, tokenizer: WordTokenizer) -> Request:
        """The engine-side request (prompt token ids); built at admission to save memory."""
        spec = self.spec
        ids = (self.info.token_ids if self.info.token_ids is not None
               else prompt_token_ids(spec, tokenizer))
        self.info.token_ids = None  # the policy has routed it; drop the second copy
        if not ids:
            ids = [tokenizer.generation_prompt_id]  # an empty prompt still has one token
        self.kv_request = Request(spec.request_id, ids, _SAMPLING, arrival_time=self.arrival)
        self.prompt_len = len(ids)
        return self.kv_request

    def answer_token_ids(self, tokenizer: WordTokenizer) -> list[int]:
        return tokenizer.encode_answer(answer_words(self.spec), self.spec.is_chat)


def prompt_token_ids(spec: RequestSpec, tokenizer: WordTokenizer) -> list[int]:
    if spec.is_chat:
        return tokenizer.encode_chat(spec.messages or [])
    return tokenizer.encode(spec.prompt or "")
