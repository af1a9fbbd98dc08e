"""OutputProcessor: from sampled tokens to text, stop strings and RequestOutputs.

One user request (a prompt with `n` completions) fans out into `n` engine requests; this
module keeps the user-level state: one incremental detokenizer per completion, stop-string
detection (the stop string is cut from the text unless asked for), timing, and the
cumulative RequestOutput. While a completion runs, its visible text holds back the last
few characters that could still turn out to start a stop string, so a stream never shows
text that is later cut. Knows nothing about blocks or the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prefixserve.loader import IncrementalDetokenizer, Tokenizer
from prefixserve.outputs import CompletionOutput, RequestOutput
from prefixserve.request import Request, RequestStatus

_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


@dataclass
class _Completion:
    request: Request
    detokenizer: IncrementalDetokenizer
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: list[dict[int, float]] = field(default_factory=list)


@dataclass
class _ParentState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    completions: list[_Completion]
    arrival_time: float
    first_token_time: float | None = None
    finished_time: float | None = None

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.completions)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.parents: dict[str, _ParentState] = {}
        self._child_to_parent: dict[str, tuple[_ParentState, int]] = {}

    def add(self, request_id: str, prompt: str | None, children: list[Request]) -> None:
        comps = [_Completion(r, IncrementalDetokenizer(self.tokenizer)) for r in children]
        state = _ParentState(request_id, prompt, children[0].prompt_token_ids, comps, time.monotonic())
        self.parents[request_id] = state
        for i, r in enumerate(children):
            self._child_to_parent[r.request_id] = (state, i)

    def children(self, request_id: str) -> list[Request]:
        state = self.parents.get(request_id)
        return [c.request for c in state.completions] if state else []

    def process(self, advanced: list[Request], logprobs: dict[str, object]) -> list[Request]:
        """Detokenize the new tokens; returns requests a stop string just finished."""
        stopped: list[Request] = []
        now = time.monotonic()
        for req in advanced:
            state, i = self._child_to_parent[req.request_id]
            comp = state.completions[i]
            state.first_token_time = state.first_token_time or now
            prev_len = len(comp.text)
            comp.text += comp.detokenizer.push(req.output_token_ids[-1:])
            lp = logprobs.get(req.request_id)
            if lp is not None:
                chosen, top = lp
                comp.logprobs.append({req.output_token_ids[-1]: chosen, **dict(top)})
            if self._check_stop_strings(comp, prev_len):
                stopped.append(req)
            elif req.is_finished:
                self._finish_by_token(comp)
        return stopped

    def _check_stop_strings(self, comp: _Completion, prev_len: int) -> bool:
        params = comp.request.sampling_params
        for stop in params.stop_strings:
            at = comp.text.find(stop, max(0, prev_len - len(stop) + 1))
            if at >= 0:
                end = at + len(stop) if params.include_stop_str_in_output else at
                comp.text = comp.text[:end]
                comp.finish_reason, comp.stop_reason = "stop", stop
                return True
        return False

    def _finish_by_token(self, comp: _Completion) -> None:
        req = comp.request
        comp.text += comp.detokenizer.flush()  # a trailing partial character, as decode() shows it
        comp.finish_reason = _FINISH_REASONS[req.status]
        last = req.output_token_ids[-1] if req.output_token_ids else None
        if req.status == RequestStatus.FINISHED_STOPPED and last is not None:
            comp.stop_reason = None if last == req.eos_token_id else last

    def mark_finished(self, req: Request) -> None:
        """Record a finish decided outside token processing (abort, preempt-free stop)."""
        entry = self._child_to_parent.get(req.request_id)
        if entry is not None and entry[0].completions[entry[1]].finish_reason is None:
            entry[0].completions[entry[1]].finish_reason = _FINISH_REASONS.get(req.status, "abort")

    def output(self, request_id: str) -> RequestOutput:
        state = self.parents[request_id]
        finished = state.finished
        if finished and state.finished_time is None:
            state.finished_time = time.monotonic()
        outs = [self._completion_output(i, c) for i, c in enumerate(state.completions)]
        cached = max(0, min(c.request.num_cached_tokens for c in state.completions))
        metrics = {"arrival_time": state.arrival_time}
        if state.first_token_time is not None:
            metrics["first_token_time"] = state.first_token_time
        if state.finished_time is not None:
            metrics["finished_time"] = state.finished_time
        return RequestOutput(state.request_id, state.prompt, state.prompt_token_ids, outs, cached, finished, metrics)

    def _completion_output(self, index: int, comp: _Completion) -> CompletionOutput:
        text = comp.text
        if comp.finish_reason is None:
            hold = max((len(s) - 1 for s in comp.request.sampling_params.stop_strings), default=0)
            text = text[: len(text) - hold] if hold else text
        return CompletionOutput(index, text, list(comp.request.output_token_ids), comp.finish_reason,
                                comp.stop_reason, comp.logprobs or None)

    def parent_of(self, child_id: str) -> str:
        return self._child_to_parent[child_id][0].request_id

    def remove(self, request_id: str) -> None:
        state = self.parents.pop(request_id, None)
        for c in state.completions if state else []:
            self._child_to_parent.pop(c.request.request_id, None)
