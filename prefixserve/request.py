"""Request: one sequence's token ids and progress, as the scheduler and KV cache see it.

A request has a prompt, the tokens generated so far, and `num_computed_tokens`: how many of
its tokens already have K/V in the cache. Each step the scheduler hands out tokens so that
`num_computed_tokens` catches up with `num_tokens`; prefill, chunked prefill, prefix hits and
decode all follow from that rule. This module knows nothing about models or tokenizers.
"""

from __future__ import annotations

import enum
import time
from typing import Any

from prefixserve.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH,
                        RequestStatus.FINISHED_ABORTED)


class Request:
    """A sequence of token ids: prompt then output, with its compute progress."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams | None = None,
        cache_salt: str | None = None,
        lora_id: int | None = None,
        priority: int = 0,
        eos_token_id: int | None = None,
        arrival_time: float | None = None,
        mm_hashes: list[Any] | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params or SamplingParams()
        self.cache_salt = cache_salt
        self.lora_id = lora_id
        self.priority = priority
        self.eos_token_id = eos_token_id
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.mm_hashes = mm_hashes
        self.output_token_ids: list[int] = []
        self.all_token_ids: list[int] = list(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = -1  # prompt tokens served from the prefix cache; set when first scheduled
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        # Block hashes of this request's full blocks, appended by the KV cache as blocks fill.
        self.block_hashes: list[Any] = []

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        self.output_token_ids.extend(ids)
        self.all_token_ids.extend(ids)

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id!r}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, status={self.status.value})")
