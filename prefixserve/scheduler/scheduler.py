"""Scheduler: decides, every step, which tokens of which requests get computed.

The one rule: there is no prefill phase and no decode phase. Each request has
`num_computed_tokens` and `num_tokens` (prompt + generated so far); each step hands out
tokens from a budget of `max_num_batched_tokens` so that the first catches up with the
second. A fresh prompt, a chunk of a long prompt (chunked prefill), a prompt that starts
after a prefix-cache hit, and a decode (one token) are all the same thing: a chunk
[num_computed_tokens, num_computed_tokens + n).

Running requests are served first, in arrival order; when the KV cache cannot give a
running request room, the last running request is preempted (its blocks freed, its
progress reset to 0; it is recomputed later, mostly from the prefix cache). Waiting requests
are admitted only in steps without preemption, up to `max_num_seqs`.

The scheduler talks to KV memory only through KVCacheManager; it knows nothing about the
model, tensors or tokenizers. Stop strings are the engine's business; token-level stops
(EOS, stop token ids, max_tokens, max_model_len) are checked here.
"""

from __future__ import annotations

from prefixserve.config import SchedulerConfig
from prefixserve.kv_cache import KVCacheManager
from prefixserve.request import Request, RequestStatus
from prefixserve.scheduler.scheduler_output import ScheduledChunk, SchedulerOutput
from prefixserve.scheduler.waiting_queue import WaitingQueue


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager, max_model_len: int) -> None:
        self.config = config
        self.kv_cache = kv_cache
        self.max_model_len = max_model_len
        self.waiting = WaitingQueue(config.scheduling_policy, config.lpm_max_queue, config.lpm_max_skips)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    # ----------------------------------------------------------------- queue
    def add_request(self, req: Request) -> None:
        self.check_fits(req)
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def check_fits(self, req: Request) -> None:
        """Reject a request that could never run, rather than let it wait forever."""
        n = req.num_prompt_tokens
        if n == 0:
            raise ValueError("the prompt is empty: give at least one token")
        if n >= self.max_model_len:
            raise ValueError(
                f"the prompt has {n} tokens, but max_model_len is {self.max_model_len}: it needs room for "
                f"at least one generated token; shorten the prompt or raise max_model_len")
        max_tokens = req.sampling_params.max_tokens
        if max_tokens is not None and n + max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({n} tokens) + max_tokens ({max_tokens}) = {n + max_tokens} exceeds max_model_len "
                f"({self.max_model_len}); lower max_tokens or shorten the prompt")
        longest = min(n + (max_tokens or self.max_model_len), self.max_model_len)
        blocks = -(-longest // self.kv_cache.block_size)
        if blocks > self.kv_cache.num_blocks:
            raise ValueError(
                f"the request needs up to {blocks} KV blocks ({longest} tokens) but the KV pool has only "
                f"{self.kv_cache.num_blocks}; raise num_kv_blocks or lower max_tokens")

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    # -------------------------------------------------------------- schedule
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted:
            self._schedule_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk_size(req.num_tokens - req.num_computed_tokens, budget)
            if n == 0:
                i += 1
                continue
            while self.kv_cache.allocate_slots(req, n) is None:
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    break
            else:
                out.chunks.append(ScheduledChunk(req, req.num_computed_tokens, n))
                budget -= n
                i += 1
        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        admitted: list[Request] = []
        for req in self.waiting.ordered(self._cached_prefix_len):
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                break
            hit = self.kv_cache.get_computed_blocks(req)
            n = self._chunk_size(req.num_tokens - hit.num_tokens, budget)
            if n == 0 or self.kv_cache.allocate_slots(req, n, hit) is None:
                break
            self.waiting.remove(req)
            req.num_computed_tokens = hit.num_tokens
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = hit.num_tokens
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            admitted.append(req)
            out.chunks.append(ScheduledChunk(req, hit.num_tokens, n))
            budget -= n
        self.waiting.note_scheduled(admitted)

    def _chunk_size(self, need: int, budget: int) -> int:
        """How many of `need` tokens to compute now; 0 means wait for a later step."""
        if need <= budget:
            return need
        full = self.config.max_num_batched_tokens
        if self.config.enable_chunked_prefill or budget == full:
            return budget  # without chunking, a prompt larger than the whole budget still runs in pieces
        return 0

    def _cached_prefix_len(self, req: Request) -> int:
        return self.kv_cache.get_computed_blocks(req).num_tokens

    def _preempt(self, req: Request) -> None:
        self.kv_cache.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.status = RequestStatus.PREEMPTED
        self.num_preemptions += 1
        self.waiting.push_front(req)

    # ----------------------------------------------------------------- update
    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Advance each scheduled request; append its sampled token; finish token-level stops.

        Returns the requests that got a new token (finished ones included).
        """
        advanced: list[Request] = []
        for chunk in out.chunks:
            req = chunk.request
            req.num_computed_tokens = chunk.end
            if not chunk.samples or req.is_finished:
                continue
            token = sampled[req.request_id]
            req.append_output_token_ids(token)
            advanced.append(req)
            status = self._token_stop(req, token)
            if status is not None:
                self.finish_request(req, status)
        return advanced

    def _token_stop(self, req: Request, token: int) -> RequestStatus | None:
        params = req.sampling_params
        if not params.ignore_eos and req.eos_token_id is not None and token == req.eos_token_id:
            return RequestStatus.FINISHED_STOPPED
        if token in params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if params.max_tokens is not None and req.num_output_tokens >= params.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        if req.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None

    def finish_request(self, req: Request, status: RequestStatus) -> None:
        """Finish (or abort) a request wherever it is, and give its blocks back."""
        if req.request_id not in self.requests:
            return
        del self.requests[req.request_id]
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
            self.kv_cache.free(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = status

    def abort_request(self, request_id: str) -> Request | None:
        req = self.requests.get(request_id)
        if req is not None:
            self.finish_request(req, RequestStatus.FINISHED_ABORTED)
        return req
