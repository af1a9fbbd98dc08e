"""The router core: worker registry, request dispatch with retries, background loops.

A request's life: the policy selects an available worker (counting it in flight), the body is
forwarded unchanged; a connect error, a dropped connection or a retryable status (408, 429,
5xx) before any byte reached the client counts against the worker's circuit breaker and the
request is retried on another worker. Streams are relayed chunk by chunk once their first
chunk arrived, so a stream that already sent bytes is never retried. Every `select()` is
paired with one `on_request_done()`. If no worker is available (all unhealthy or open), the
known workers are tried anyway: no request is dropped while one of them lives.

The router knows the OpenAI API only as far as routing needs (`RequestInfo`); it does not
parse responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.responses import JSONResponse, Response, StreamingResponse

from prefixserve.router.circuit_breaker import CircuitBreaker
from prefixserve.router.kv_event_poller import KVEventPoller
from prefixserve.router.metrics import RouterMetrics
from prefixserve.router.policies import NoWorkerAvailable, RoutingPolicy
from prefixserve.router.request_info import RequestInfo
from prefixserve.router.worker import RouterWorker

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
FORWARDED_HEADERS = ("authorization", "content-type", "accept", "x-request-id")
WORKER_HEADER = "x-prefixserve-worker"


@dataclass(frozen=True)
class RouterConfig:
    health_check_interval_secs: float = 10.0
    health_check_timeout_secs: float = 5.0
    health_failure_threshold: int = 3
    health_success_threshold: int = 2
    max_retries: int = 3
    retry_backoff_secs: float = 0.05
    cb_failure_threshold: int = 5
    cb_success_threshold: int = 2
    cb_open_secs: float = 30.0
    disable_circuit_breaker: bool = False
    request_timeout_secs: float = 600.0
    maintain_interval_secs: float = 1.0

    def __post_init__(self) -> None:
        for name in ("health_failure_threshold", "health_success_threshold",
                     "cb_failure_threshold", "cb_success_threshold"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.max_retries < 0:
            raise ValueError("--max-retries must be >= 0")


def error_response(status: int, message: str, kind: str = "service_unavailable") -> Response:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


class Router:
    def __init__(self, policy: RoutingPolicy, worker_urls: list[str] = (),
                 config: RouterConfig | None = None) -> None:
        self.policy = policy
        self.config = config or RouterConfig()
        self.metrics = RouterMetrics(policy.name)
        self.workers: dict[str, RouterWorker] = {}
        self.client: httpx.AsyncClient | None = None
        self.kv_poller = KVEventPoller(self) if getattr(policy, "uses_kv_events", False) else None
        self._eligible: tuple[RouterWorker, ...] = ()
        self._tasks: list[asyncio.Task] = []
        for url in worker_urls:
            self.add_worker(url)

    # membership -------------------------------------------------------------------------
    def add_worker(self, url: str) -> RouterWorker:
        url = url.rstrip("/")
        if url in self.workers:
            return self.workers[url]
        cfg = self.config
        breaker = CircuitBreaker(cfg.cb_failure_threshold, cfg.cb_success_threshold,
                                 cfg.cb_open_secs, enabled=not cfg.disable_circuit_breaker)
        worker = self.workers[url] = RouterWorker(url, breaker)
        self.policy.add_worker(worker)
        self.metrics.healthy.labels(url).set(1)
        logger.info("router: added worker %s", url)
        return worker

    def remove_worker(self, url: str) -> bool:
        worker = self.workers.pop(url.rstrip("/"), None)
        if worker is None:
            return False
        self.policy.remove_worker(worker)
        self.metrics.forget_worker(worker.url)
        if self.kv_poller is not None:
            self.kv_poller.forget(worker.url)
        logger.info("router: removed worker %s", url)
        return True

    def eligible(self) -> tuple[RouterWorker, ...]:
        """Available workers; the same tuple object while the set is unchanged."""
        now = time.monotonic()
        avail = [w for w in self.workers.values() if w.available(now)]
        cached = self._eligible
        if len(avail) != len(cached) or any(a is not b for a, b in zip(avail, cached, strict=False)):
            self._eligible = tuple(avail)
        return self._eligible

    # lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        timeout = httpx.Timeout(self.config.request_timeout_secs, connect=5.0)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=1000)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)
        self._tasks = [asyncio.create_task(self._health_loop()),
                       asyncio.create_task(self._maintain_loop())]
        if self.kv_poller is not None:
            self._tasks.append(asyncio.create_task(self.kv_poller.run()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.client is not None:
            await self.client.aclose()

    # dispatch ---------------------------------------------------------------------------
    async def forward(self, path: str, raw: bytes, info: RequestInfo,
                      headers: dict[str, str]) -> Response:
        tried: set[str] = set()
        last: Response | None = None
        for attempt in range(self.config.max_retries + 1):
            candidates = self._candidates(tried)
            if not candidates:
                break
            if attempt:
                self.metrics.retries.inc()
                if all(w.url in tried for w in self.workers.values()):
                    await asyncio.sleep(self.config.retry_backoff_secs * 1.5 ** (attempt - 1))
            try:
                worker = self.policy.select(info, candidates)
            except NoWorkerAvailable:
                break
            tried.add(worker.url)
            self.metrics.record_decision(worker.url, self.policy.last_decision,
                                         self.policy.last_match)
            self._update_inflight(worker)
            response, retry = await self._attempt(worker, path, raw, info, headers)
            if not retry:
                return response
            last = response
        self.metrics.unrouted.inc()
        return last or error_response(503, "no worker could serve the request")

    async def forward_get(self, path: str) -> Response:
        """A GET answered by any live worker (`/v1/models`)."""
        assert self.client is not None
        for worker in list(self.eligible()) or list(self.workers.values()):
            try:
                resp = await self.client.get(worker.url + path, timeout=10.0)
            except httpx.TransportError:
                continue
            if resp.status_code < 500:
                return Response(resp.content, resp.status_code,
                                media_type=resp.headers.get("content-type"))
        return error_response(503, "no worker answered")

    def _candidates(self, tried: set[str]) -> tuple[RouterWorker, ...]:
        eligible = self.eligible() or tuple(self.workers.values())
        if not tried:
            return eligible
        fresh = tuple(w for w in eligible if w.url not in tried)
        return fresh or eligible

    async def _attempt(self, worker: RouterWorker, path: str, raw: bytes, info: RequestInfo,
                       headers: dict[str, str]) -> tuple[Response, bool]:
        """(response, retry?) for one try on `worker`; settles the policy's load unless the
        response is a stream, whose relay settles it when the stream ends."""
        assert self.client is not None
        request = self.client.build_request("POST", worker.url + path, content=raw,
                                            headers=headers)
        resp: httpx.Response | None = None
        handed_off = False
        ok: bool | None = None  # None: cancelled (client went away), no verdict on the worker
        try:
            resp = await self.client.send(request, stream=True)
            if resp.status_code in RETRYABLE_STATUS:
                ok = False
                body = await resp.aread()
                return self._relay_plain(worker, resp, body), True
            if not info.stream:
                body = await resp.aread()
                ok = True
                return self._relay_plain(worker, resp, body), False
            chunks = resp.aiter_raw()
            first = await anext(chunks, b"")
            ok = handed_off = True
            return StreamingResponse(self._relay_stream(worker, info, resp, chunks, first),
                                     resp.status_code, headers=self._response_headers(worker, resp)
                                     ), False
        except httpx.TransportError as exc:
            ok = False
            logger.warning("router: %s failed: %r", worker.url, exc)
            return error_response(502, f"worker {worker.url} failed: {exc!r}", "bad_gateway"), True
        finally:
            if not handed_off:
                if resp is not None:
                    await resp.aclose()
                self._settle(worker, info, ok)

    async def _relay_stream(self, worker: RouterWorker, info: RequestInfo, resp: httpx.Response,
                            chunks: Any, first: bytes):
        ok: bool | None = None
        try:
            if first:
                yield first
            async for chunk in chunks:
                yield chunk
            ok = True
        except httpx.TransportError as exc:  # the stream already sent bytes: not retryable
            ok = False
            logger.warning("router: stream from %s broke: %r", worker.url, exc)
        finally:
            await resp.aclose()
            self._settle(worker, info, ok)

    def _relay_plain(self, worker: RouterWorker, resp: httpx.Response, body: bytes) -> Response:
        return Response(body, resp.status_code, headers=self._response_headers(worker, resp))

    @staticmethod
    def _response_headers(worker: RouterWorker, resp: httpx.Response) -> dict[str, str]:
        headers = {WORKER_HEADER: worker.url}
        if "content-type" in resp.headers:
            headers["content-type"] = resp.headers["content-type"]
        return headers

    def _settle(self, worker: RouterWorker, info: RequestInfo, ok: bool | None) -> None:
        self.policy.on_request_done(worker, info, success=bool(ok))
        if ok:
            worker.breaker.record_success()
        elif ok is False:
            worker.breaker.record_failure(time.monotonic())
            self.metrics.errors.labels(worker.url).inc()
        self._update_inflight(worker)

    def _update_inflight(self, worker: RouterWorker) -> None:
        if worker.url in self.workers:
            self.metrics.inflight.labels(worker.url).set(self.policy.load(worker.url))

    # background loops -------------------------------------------------------------------
    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_check_interval_secs)
            await self.check_health()

    async def check_health(self) -> None:
        workers = list(self.workers.values())
        results = await asyncio.gather(*(self._probe(w) for w in workers))
        cfg = self.config
        for worker, ok in zip(workers, results, strict=True):
            if worker.record_probe(ok, cfg.health_failure_threshold, cfg.health_success_threshold):
                logger.warning("router: worker %s is now %s", worker.url,
                               "healthy" if worker.healthy else "unhealthy")
            if worker.url in self.workers:
                self.metrics.healthy.labels(worker.url).set(int(worker.available(time.monotonic())))

    async def _probe(self, worker: RouterWorker) -> bool:
        assert self.client is not None
        try:
            resp = await self.client.get(worker.url + "/health",
                                         timeout=self.config.health_check_timeout_secs)
            return resp.status_code == 200
        except httpx.TransportError:
            return False

    async def _maintain_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.maintain_interval_secs)
            self.policy.maintain()

    def describe_workers(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [{"url": w.url, "healthy": w.healthy, "circuit": w.breaker.state,
                 "available": w.available(now), "in_flight": self.policy.load(w.url)}
                for w in self.workers.values()]


def parse_json_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None
