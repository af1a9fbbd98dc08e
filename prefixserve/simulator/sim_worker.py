"""SimWorker: one engine replica as the simulator sees it: a real KV cache, a batch, a clock.

The worker holds a real `KVCacheManager` (no model) and runs continuous batching in steps.
At each step boundary it frees the requests that produced their last token, then admits
waiting requests first come first served while there is room (`max_num_seqs`, the step's
token budget `max_num_batched_tokens` minus one token per decoding request, and KV blocks
for the prompt plus `max_tokens - 1` output tokens, reserved up front so nothing is ever
preempted). A step that admits requests costs the cost model's overhead, their uncached
prompt tokens and one decode token per running request; the admitted requests get their
first token at its end.

Steps with nothing to admit are all alike, so the worker jumps over them: one event at the
end of a run of identical decode steps (the earliest finish), cut short at the next step
boundary if a request arrives that could be admitted. Work per request is therefore
O(prompt blocks), whatever the number of steps. The worker knows nothing of policies or of
the event heap: `enqueue` and `wake` return when it wants to be woken next.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable

from prefixserve.kv_cache import KVCacheManager
from prefixserve.simulator.cost_model import CostModel
from prefixserve.simulator.sim_request import SimRequest
from prefixserve.simulator.word_tokenizer import WordTokenizer

Finished = Callable[["SimWorker", SimRequest, float, bool], None]  # (worker, req, now, ok)


class SimWorker:
    def __init__(self, index: int, kv: KVCacheManager, cost: CostModel, tokenizer: WordTokenizer,
                 max_num_seqs: int, max_num_batched_tokens: int, on_finished: Finished) -> None:
        self.url = f"sim://worker-{index}"
        self.kv = kv
        self.cost = cost
        self.tokenizer = tokenizer
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.on_finished = on_finished
        self.waiting: deque[SimRequest] = deque()
        self.running: list[tuple[int, int, SimRequest]] = []  # heap of (finish_step, seq, request)
        self.steps_done = 0
        self.busy = False  # a wake-up is pending
        self.version = 0  # bumped whenever the pending wake-up moves; stale ones are ignored
        self.seg_start = 0.0  # the current run of identical steps: start, step length, steps
        self.seg_len = 0.0
        self.seg_steps = 0
        self.budget_blocked = False  # the last admission stopped at the token budget
        self.num_routed = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.num_steps = 0

    def __repr__(self) -> str:
        return f"SimWorker({self.url}, running={len(self.running)}, waiting={len(self.waiting)})"

    # -- events ----------------------------------------------------------------------------

    def enqueue(self, req: SimRequest, now: float) -> float | None:
        """Queue a routed request; returns a new wake-up time if the worker needs one."""
        req.worker = self
        self.num_routed += 1
        blocked = bool(self.waiting)  # the queue head already waits for a finish
        self.waiting.append(req)
        if not self.busy:
            self.busy = True
            self.seg_start, self.seg_len, self.seg_steps = now, 0.0, 0
            return self._schedule(now)
        if self.seg_steps > 1 and not blocked:  # cut the decode run at the next boundary
            n = max(1, math.ceil((now - self.seg_start) / self.seg_len - 1e-9))
            if n < self.seg_steps:
                self.seg_steps = n
                return self._schedule(self.seg_start + n * self.seg_len)
        return None

    def wake(self, now: float) -> float | None:
        """A step boundary: finish, admit, start the next run of steps (None: now idle)."""
        self.steps_done += self.seg_steps
        self.num_steps += self.seg_steps
        running = self.running
        while running and running[0][0] <= self.steps_done:
            self._finish(heapq.heappop(running)[2], now)
        num_decoding = len(running)
        admitted, prefill_tokens = self._admit(now)
        if not running and not admitted:
            self.busy = False
            self.seg_steps = 0
            return None
        if admitted:
            step = self.cost.step_ms(prefill_tokens, num_decoding) / 1000.0
            for req in admitted:
                req.first_token_at = now + step
                req.finish_step = self.steps_done + req.max_tokens
                heapq.heappush(running, (req.finish_step, req.seq, req))
            steps = 1
        else:
            step = self.cost.step_ms(0, num_decoding) / 1000.0
            steps = 1 if self.budget_blocked else running[0][0] - self.steps_done
        self.seg_start, self.seg_len, self.seg_steps = now, step, steps
        return self._schedule(now + steps * step)

    # -- helpers ---------------------------------------------------------------------------

    def _schedule(self, at: float) -> float:
        self.version += 1
        return at

    def _admit(self, now: float) -> tuple[list[SimRequest], int]:
        admitted: list[SimRequest] = []
        budget = self.max_num_batched_tokens - len(self.running)
        tokens = 0
        self.budget_blocked = False
        kv, waiting = self.kv, self.waiting
        while waiting and len(self.running) + len(admitted) < self.max_num_seqs:
            req = waiting[0]
            kv_req = req.kv_request or req.make_kv_request(self.tokenizer)
            hit = kv.get_computed_blocks(kv_req)
            uncached = req.prompt_len - hit.num_tokens
            if admitted and tokens + uncached > budget:
                self.budget_blocked = True
                break
            n = uncached + req.max_tokens - 1
            if kv.allocate_slots(kv_req, n, hit) is None:
                if self.running or admitted:
                    break  # wait for blocks to be freed
                waiting.popleft()  # could never fit, even in an empty cache
                self.on_finished(self, req, now, False)
                continue
            waiting.popleft()
            kv_req.num_computed_tokens = hit.num_tokens + n
            req.cached_tokens = hit.num_tokens
            self.prompt_tokens += req.prompt_len
            self.cached_tokens += hit.num_tokens
            tokens += uncached
            admitted.append(req)
        return admitted, tokens

    def _finish(self, req: SimRequest, now: float) -> None:
        kv_req = req.kv_request
        assert kv_req is not None
        kv_req.append_output_token_ids(req.answer_token_ids(self.tokenizer))
        self.kv.allocate_slots(kv_req, 0)  # the answer's full blocks become cached, as in the engine
        self.kv.free(kv_req)
        req.kv_request = None
        self.on_finished(self, req, now, True)
