"""OpenAIServing: what /v1/completions and /v1/chat/completions share.

Turns a validated request body into SamplingParams (with the context-length checks the
engine would otherwise fail later), starts its engine requests as one `RequestStream`,
builds usage blocks, frames SSE, and cancels a non-streaming request whose client went
away. Every problem becomes an `OpenAIError` (4xx) before any engine work starts.
Knows nothing about routes, API keys or metrics exposition.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from prefixserve.engine.async_llm import AsyncLLM, EngineDeadError, NewRequest
from prefixserve.entrypoints.openai.metrics import ServerMetrics
from prefixserve.entrypoints.openai.protocol import OpenAIError, SamplingRequest
from prefixserve.outputs import RequestOutput
from prefixserve.sampling_params import SamplingParams


@dataclass(frozen=True)
class EnginePrompt:
    text: str | None
    token_ids: list[int]


class RequestStream:
    """The engine requests behind one HTTP request: outputs merged in arrival order, timed
    for the latency histograms, and aborted if the consumer stops early."""

    def __init__(self, engine: AsyncLLM, request_ids: list[str], queue: asyncio.Queue,
                 metrics: ServerMetrics | None, arrival: float) -> None:
        self.engine = engine
        self.index = {rid: i for i, rid in enumerate(request_ids)}
        self.pending = set(request_ids)
        self.queue = queue
        self.metrics = metrics
        self.arrival = arrival
        self._last_time: dict[str, float] = {}
        self._num_tokens: dict[str, int] = {}

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """(prompt index, cumulative RequestOutput) until every request finished."""
        try:
            while self.pending:
                out = await self.queue.get()
                if isinstance(out, BaseException):
                    raise OpenAIError(f"the engine stopped: {out!r}", 500, "internal_error", None)
                if out.request_id not in self.pending:
                    continue
                self._observe(out)
                if out.finished:
                    self.pending.discard(out.request_id)
                yield self.index[out.request_id], out
        finally:
            self.abort()

    def abort(self) -> None:
        """Abort every request that has not finished (idempotent)."""
        for rid in self.pending:
            self.engine.abort(rid)
        self.pending.clear()

    def _observe(self, out: RequestOutput) -> None:
        if self.metrics is None:
            return
        now = time.monotonic()
        rid = out.request_id
        num_tokens = sum(len(o.token_ids) for o in out.outputs)
        if num_tokens > self._num_tokens.get(rid, 0):
            last = self._last_time.get(rid)
            if last is None:
                self.metrics.ttft.observe(now - self.arrival)
            else:
                self.metrics.itl.observe(now - last)
            self._last_time[rid] = now
            self._num_tokens[rid] = num_tokens
        if out.finished:
            self.metrics.e2e.observe(now - self.arrival)
            for o in out.outputs:
                self.metrics.request_finished(o.finish_reason)


class OpenAIServing:
    def __init__(self, engine: AsyncLLM, model_names: list[str], max_n: int = 16,
                 metrics: ServerMetrics | None = None) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.model_names = model_names
        self.max_n = max_n
        self.metrics = metrics
        self.vocab_size = engine.engine.model_config.vocab_size
        self._token_text: dict[int, str] = {}

    # ------------------------------------------------------------ validation
    def check_model(self, name: str | None) -> None:
        if name and name not in self.model_names:
            raise OpenAIError(f"The model `{name}` does not exist; this server serves "
                              f"{', '.join(self.model_names)}", 404, "not_found_error", "model_not_found", "model")

    def check_token_ids(self, ids: list[Any], param: str) -> list[int]:
        if not ids:
            raise OpenAIError(f"{param} must not be empty", param=param)
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self.vocab_size:
                raise OpenAIError(f"{param}: invalid token id {t!r}; token ids must be integers in "
                                  f"[0, {self.vocab_size})", param=param)
        return list(ids)

    def sampling_params(self, req: SamplingRequest, prompts: list[EnginePrompt],
                        max_tokens: int | None, default_max_tokens: int | None,
                        logprobs: int | None = None) -> SamplingParams:
        """Checks n, lengths and penalties, then builds SamplingParams (whose ValueError
        messages name the bad field). `max_tokens=None` means as many as fit."""
        if not isinstance(req.n, int) or not 1 <= req.n <= self.max_n:
            raise OpenAIError(f"n must be between 1 and {self.max_n} (--max-n), got {req.n}", param="n")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(req, name):
                raise OpenAIError(f"{name} is not supported by this server; leave it at 0", param=name)
        if max_tokens is not None and max_tokens < 1:
            raise OpenAIError(f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens")
        limit = self.engine.max_model_len
        longest = max(len(p.token_ids) for p in prompts)
        if longest >= limit:
            raise OpenAIError(f"This model's maximum context length is {limit} tokens, but the prompt has "
                              f"{longest} tokens; shorten the prompt.", code="context_length_exceeded",
                              param="messages" if hasattr(req, "messages") else "prompt")
        room = limit - longest
        if max_tokens is not None and max_tokens > room:
            raise OpenAIError(f"This model's maximum context length is {limit} tokens. However, you "
                              f"requested {longest + max_tokens} tokens ({longest} in the prompt, "
                              f"{max_tokens} in the completion). Reduce max_tokens or the prompt.",
                              code="context_length_exceeded", param="max_tokens")
        if max_tokens is None:
            max_tokens = room if default_max_tokens is None else min(default_max_tokens, room)
        try:
            return SamplingParams(
                n=req.n, max_tokens=max_tokens, seed=req.seed, stop=req.stop,
                temperature=1.0 if req.temperature is None else req.temperature,
                top_p=1.0 if req.top_p is None else req.top_p,
                top_k=0 if req.top_k is None else req.top_k,
                min_p=0.0 if req.min_p is None else req.min_p,
                stop_token_ids=req.stop_token_ids, ignore_eos=req.ignore_eos, logprobs=logprobs,
                include_stop_str_in_output=req.include_stop_str_in_output)
        except ValueError as e:
            raise OpenAIError(str(e), param=str(e).split(" ", 1)[0]) from e

    # ----------------------------------------------------------------- engine
    async def start(self, request_id: str, prompts: list[EnginePrompt], params: SamplingParams,
                    req: SamplingRequest, arrival: float) -> RequestStream:
        """Add one engine request per prompt, all or none; ValueError -> 400."""
        ids = [request_id if len(prompts) == 1 else f"{request_id}-{i}" for i in range(len(prompts))]
        news = [NewRequest(rid, {"prompt": p.text, "prompt_token_ids": p.token_ids}, params,
                           req.cache_salt, req.priority) for rid, p in zip(ids, prompts, strict=True)]
        try:
            queue = await self.engine.add_requests(news)
        except ValueError as e:
            raise OpenAIError(str(e)) from e
        except EngineDeadError as e:
            raise OpenAIError(str(e), 503, "service_unavailable", None) from e
        return RequestStream(self.engine, ids, queue, self.metrics, arrival)

    # ---------------------------------------------------------------- helpers
    def token_text(self, token_id: int) -> str:
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def sse(obj: dict[str, Any] | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, separators=(',', ':'))}\n\n"


async def sse_stream(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    """Frames chunks as SSE; an error mid-stream becomes an error event; ends with [DONE]."""
    try:
        async for chunk in chunks:
            yield sse(chunk)
    except OpenAIError as e:
        yield sse(e.to_dict())
    except Exception as e:  # the status line is already sent: report in-band
        yield sse(OpenAIError(f"internal error: {e!r}", 500, "internal_error", None).to_dict())
    yield sse("[DONE]")


async def until_disconnected(raw: Request, work: Awaitable[dict[str, Any]]) -> Response:
    """Run `work`; if the client disconnects first, cancel it (its requests abort)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(raw))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task not in done:
        task.cancel()
        return Response(status_code=499)
    return JSONResponse(task.result())


async def _wait_disconnect(raw: Request) -> None:
    while True:
        message = await raw.receive()
        if message["type"] == "http.disconnect":
            return
