"""AsyncLLM: the one LLMEngine driven by a background thread, for asyncio servers.

    asyncio handlers ── ops (add, abort, call) ──▶ engine thread: apply ops, step(), ...
          ▲                                              │
          └── loop.call_soon_threadsafe(dispatch, outs) ◀┘  per-request asyncio.Queue

Every touch of the engine happens on the engine thread: handlers queue operations (add a
request, abort one, run a function such as `cache_stats`) that the thread applies between
steps, and await their result. The thread sleeps on a condition variable while there is
nothing to run. `generate()` yields the engine's cumulative RequestOutputs for one request
and aborts the request if its consumer goes away (a client disconnect cancels the
consumer). Knows nothing about HTTP, the OpenAI protocol or tokenization.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from prefixserve.config import EngineConfig
from prefixserve.engine.llm_engine import LLMEngine
from prefixserve.kv_cache.kv_events import KVEventLog
from prefixserve.outputs import RequestOutput
from prefixserve.sampling_params import SamplingParams

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class NewRequest:
    request_id: str
    prompt: str | dict[str, Any] | list[int]
    params: SamplingParams
    cache_salt: str | None = None
    priority: int = 0


class EngineDeadError(RuntimeError):
    """The engine thread stopped (a step raised); the server cannot serve any more."""


class AsyncLLM:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.max_model_len
        _enable_kv_events(engine)
        self._cond = threading.Condition()
        self._ops: list[_Op] = []
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopped = False
        self.dead: BaseException | None = None
        self.stats: dict[str, Any] = {}  # refreshed by the engine thread after every step
        self._refresh_stats()
        self._thread = threading.Thread(target=self._run, name="prefixserve-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> AsyncLLM:
        return cls(LLMEngine(EngineConfig.from_kwargs(**kwargs)))

    # ------------------------------------------------------------------ public API
    async def generate(
        self,
        request_id: str,
        prompt: str | dict[str, Any] | list[int],
        params: SamplingParams,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its cumulative outputs until it finishes. add_request's
        ValueError (bad prompt, too long) is raised from the first iteration."""
        queue = await self.add_request(request_id, prompt, params, cache_salt, priority)
        finished = False
        try:
            while not finished:
                out = await queue.get()
                if isinstance(out, BaseException):
                    raise EngineDeadError("the engine stopped") from out
                finished = out.finished
                yield out
        finally:
            self._queues.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    async def add_request(
        self,
        request_id: str,
        prompt: str | dict[str, Any] | list[int],
        params: SamplingParams,
        cache_salt: str | None = None,
        priority: int = 0,
        queue: asyncio.Queue | None = None,
    ) -> asyncio.Queue:
        """Queue the request on the engine thread; returns the queue its outputs arrive on."""
        return await self.add_requests([NewRequest(request_id, prompt, params, cache_salt, priority)], queue)

    async def add_requests(self, requests: list[NewRequest], queue: asyncio.Queue | None = None) -> asyncio.Queue:
        """Add several requests in one engine-thread operation, all or none (a ValueError
        from one aborts those added before it). Their outputs share one queue."""
        queue = queue if queue is not None else asyncio.Queue()
        loop = asyncio.get_running_loop()

        def add() -> None:
            added: list[str] = []
            try:
                for r in requests:
                    self.engine.add_request(r.request_id, r.prompt, r.params, cache_salt=r.cache_salt,
                                            priority=r.priority)
                    added.append(r.request_id)
            except BaseException:
                for rid in added:
                    self._abort_now(rid)
                raise
            for rid in added:
                self._queues[rid] = (loop, queue)

        await self.call(add)
        return queue

    def abort(self, request_id: str) -> None:
        """Stop a request wherever it is and free its blocks (at the next step boundary)."""
        self._queues.pop(request_id, None)
        self._submit(_Op(lambda: self._abort_now(request_id)))

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn()` on the engine thread between two steps and return its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def run() -> None:
            try:
                result = fn()
            except Exception as e:  # handed to the awaiting caller
                _call_soon(loop, _set_exception, future, e)
            else:
                _call_soon(loop, _set_result, future, result)

        self._submit(_Op(run, lambda e: _call_soon(loop, _set_exception, future, e)))
        return await future

    async def cache_stats(self) -> dict[str, Any]:
        """Fresh prefix-cache counters and block gauges (see `snapshot_stats`)."""
        return await self.call(self._snapshot_stats)

    async def reset_prefix_cache(self) -> bool:
        return await self.call(self.engine.reset_prefix_cache)

    async def kv_events(self, since: int | None) -> dict[str, Any]:
        """KV events after `since` as dicts, or a snapshot when `since` is None, negative,
        ahead of the log, or older than the ring reaches. Carries the hash config a router needs."""
        return await self.call(lambda: self._kv_events_now(since))

    def hash_config(self) -> dict[str, Any]:
        cache = self.engine.config.cache
        return {"block_size": cache.block_size, "hash_algo": cache.hash_algo, "hash_seed": cache.hash_seed,
                "prefix_cache": self.engine.kv_cache.prefix_cache_name}

    @property
    def num_unfinished(self) -> int:
        return len(self._queues)

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            ops, self._ops = self._ops, []
            self._cond.notify()
        for op in ops:
            op.fail(EngineDeadError("the engine was shut down"))
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    # ------------------------------------------------------------- engine thread
    def _submit(self, op: _Op) -> None:
        with self._cond:
            if not self._stopped:
                self._ops.append(op)
                self._cond.notify()
                return
        op.fail(EngineDeadError(f"the engine is stopped ({self.dead!r})"))

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._ops and not self._stopped and not self.engine.has_unfinished_requests():
                        self._cond.wait()
                    if self._stopped:
                        return
                    ops, self._ops = self._ops, []
                for op in ops:
                    op.run()
                outputs = self.engine.step() if self.engine.has_unfinished_requests() else []
                self._refresh_stats()  # ~50 us; first, so a client never sees stats older than its output
                if outputs:
                    self._dispatch(outputs)
        except BaseException as e:  # noqa: BLE001 - the server must learn the engine is gone
            logger.exception("engine thread crashed")
            self.dead = e
            self._fail_all(e)

    def _abort_now(self, request_id: str) -> None:
        try:
            self.engine.abort_request(request_id)
        except Exception:  # an abort must never take the engine thread down
            logger.exception("aborting request %s failed", request_id)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Any]]] = {}
        for out in outputs:
            entry = self._queues.get(out.request_id)
            if entry is not None:
                by_loop.setdefault(entry[0], []).append((entry[1], out))
            if out.finished:
                self._queues.pop(out.request_id, None)
        for loop, items in by_loop.items():
            _call_soon(loop, _put_all, items)

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            self._stopped = True
            ops, self._ops = self._ops, []
        entries, self._queues = list(self._queues.values()), {}
        for loop, queue in entries:
            _call_soon(loop, _put_all, [(queue, error)])
        for op in ops:
            op.fail(EngineDeadError(f"the engine stopped: {error!r}"))

    def _kv_events_now(self, since: int | None) -> dict[str, Any]:
        log: KVEventLog | None = self.engine.kv_cache.events
        body: dict[str, Any] = {**self.hash_config(), "kv_cache_usage": self.engine.kv_cache.usage()}
        if log is None:
            return {**body, "events": [], "seq": 0, "enabled": False}
        # since > seq: the subscriber saw another life of this log (a restart); resync it
        events = log.events_since(since) if since is not None and 0 <= since <= log.seq else None
        if events is None:
            snap = log.snapshot()
            return {**body, "snapshot": snap.to_dict(), "seq": snap.seq}
        return {**body, "events": [e.to_dict() for e in events], "seq": log.seq}

    def _refresh_stats(self) -> None:
        self.stats = self._snapshot_stats()

    def _snapshot_stats(self) -> dict[str, Any]:
        """The engine's cache stats (counters in tokens, block gauges, load) plus token
        totals and the KV event sequence number, as plain JSON-able values."""
        engine, kv = self.engine, self.engine.kv_cache
        stats = engine.cache_stats()
        stats.update(
            prefix_cache=kv.prefix_cache_name,
            prompt_tokens=engine.stats.get("prompt_tokens", 0),
            generation_tokens=engine.stats.get("generation_tokens", 0),
            steps=engine.stats.get("steps", 0),
            kv_events_seq=kv.events.seq if kv.events is not None else 0,
            time=time.time())
        return stats


class _Op:
    """One operation for the engine thread, and how to tell its caller it never ran."""

    __slots__ = ("run", "fail")

    def __init__(self, run: Callable[[], None],
                 fail: Callable[[BaseException], None] = lambda e: None) -> None:
        self.run = run
        self.fail = fail


def _enable_kv_events(engine: LLMEngine) -> None:
    """Give the KV cache an event log if the engine built it without one (older engines
    did). Done before any request runs, so the log sees every block the cache stores."""
    kv = engine.kv_cache
    if kv.events is None and kv.enable_caching:
        kv.events = KVEventLog()
        kv.pool.events = kv.events
        cache_pool = getattr(kv.cache, "pool", None)
        if cache_pool is not None and cache_pool is not kv.pool:
            cache_pool.events = kv.events


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the consumer's loop is closed: nobody is listening any more
        pass


def _put_all(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for queue, item in items:
        queue.put_nowait(item)


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
