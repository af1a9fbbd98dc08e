"""The router's HTTP surface (FastAPI) and a helper that runs it in a background thread.

OpenAI routes are forwarded (`/v1/completions`, `/v1/chat/completions`, `/v1/models`); the
router answers `/health`, `/metrics` and worker management (`GET/POST/DELETE /workers`)
itself. The app knows nothing about policies beyond handing the `Router` its requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import JSONResponse, Response

from prefixserve.router.request_info import RequestInfo
from prefixserve.router.router import FORWARDED_HEADERS, Router, error_response, parse_json_body


def build_app(router: Router) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await router.start()
        yield
        await router.stop()

    app = FastAPI(title="prefixserve router", lifespan=lifespan)
    app.state.router = router

    async def proxy(request: Request, path: str, chat: bool) -> Response:
        raw = await request.body()
        body = parse_json_body(raw)
        if body is None:
            return error_response(400, "request body must be a JSON object", "invalid_request_error")
        info = RequestInfo.from_chat(body) if chat else RequestInfo.from_completion(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        headers.setdefault("content-type", "application/json")
        return await router.forward(path, raw, info, headers)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await proxy(request, "/v1/completions", chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await proxy(request, "/v1/chat/completions", chat=True)

    @app.get("/v1/models")
    async def models() -> Response:
        return await router.forward_get("/v1/models")

    @app.get("/health")
    async def health() -> Response:
        n = len(router.eligible())
        return JSONResponse({"status": "ok" if n else "unavailable", "available_workers": n},
                            200 if n else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(router.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/workers")
    async def list_workers() -> Response:
        return JSONResponse({"policy": router.policy.name, "workers": router.describe_workers()})

    @app.post("/workers")
    async def add_worker(request: Request) -> Response:
        url = await _worker_url(request)
        if not url:
            return error_response(400, 'body must be {"url": "http://host:port"}',
                                  "invalid_request_error")
        router.add_worker(url)
        return JSONResponse({"added": url.rstrip("/"), "workers": list(router.workers)})

    @app.delete("/workers")
    async def remove_worker(request: Request) -> Response:
        url = await _worker_url(request)
        if not url or not router.remove_worker(url):
            return error_response(404, f"no worker {url!r}", "not_found")
        return JSONResponse({"removed": url.rstrip("/"), "workers": list(router.workers)})

    return app


async def _worker_url(request: Request) -> str | None:
    url = request.query_params.get("url")
    if url:
        return url
    body = parse_json_body(await request.body())
    value = body.get("url") if body else None
    return value if isinstance(value, str) and value else None


class RouterServer:
    """Runs a router app with uvicorn in a daemon thread: `start()` returns once it listens."""

    def __init__(self, router: Router, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning") -> None:
        self.router = router
        config = uvicorn.Config(build_app(router), host=host, port=port, log_level=log_level,
                                lifespan="on", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True, name="prefixserve-router")
        self.host = host

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def start(self, timeout: float = 10.0) -> RouterServer:
        if self.thread.is_alive():
            return self
        self.thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout / 0.01)):
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            deadline.wait(0.01)
        raise RuntimeError("router server did not start")

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> RouterServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
