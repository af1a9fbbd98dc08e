"""The FastAPI app: OpenAI routes, cache introspection, metrics, errors and the API key.

    POST /v1/completions  POST /v1/chat/completions  GET /v1/models
    GET /health  GET /metrics  POST /reset_prefix_cache  GET /cache/stats  GET /kv_events?since=SEQ

Bodies are read and parsed here (so malformed JSON or a body that is not UTF-8 is a 400
with OpenAI's error body, never FastAPI's 422 format); everything else is delegated to
the serving classes. `build_app` takes a running AsyncLLM, so tests can serve an engine
they built. Knows nothing about CLI flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from prefixserve.engine.async_llm import AsyncLLM
from prefixserve.entrypoints.openai.metrics import ServerMetrics
from prefixserve.entrypoints.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    validation_error,
)
from prefixserve.entrypoints.openai.serving_chat import OpenAIServingChat
from prefixserve.entrypoints.openai.serving_completion import OpenAIServingCompletion

logger = logging.getLogger("prefixserve.server")
_PROTECTED_PREFIXES = ("/v1/", "/reset_prefix_cache")


@dataclass
class ServerOptions:
    model_names: list[str] = field(default_factory=lambda: ["default"])
    model_path: str | None = None
    api_key: str | None = None
    max_n: int = 16
    log_interval: float = 10.0  # seconds between status log lines; 0: off


def build_app(engine: AsyncLLM, options: ServerOptions) -> FastAPI:
    info = {**engine.hash_config()}
    metrics = ServerMetrics(options.model_names[0], lambda: engine.stats, info)
    completions = OpenAIServingCompletion(engine, options.model_names, options.max_n, metrics)
    chat = OpenAIServingChat(engine, options.model_names, options.max_n, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_log_status(engine, options.log_interval)) if options.log_interval > 0 else None
        yield
        if task is not None:
            task.cancel()

    app = FastAPI(title="prefixserve", lifespan=lifespan)
    app.state.engine, app.state.metrics = engine, metrics
    _add_error_handlers(app)
    if options.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=options.api_key)

    @app.post("/v1/completions")
    async def create_completion(raw: Request) -> Response:
        return await completions.create(await _parse(raw, CompletionRequest), raw)

    @app.post("/v1/chat/completions")
    async def create_chat_completion(raw: Request) -> Response:
        return await chat.create(await _parse(raw, ChatCompletionRequest), raw)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "prefixserve",
             "root": options.model_path or options.model_names[0], "max_model_len": engine.max_model_len}
            for name in options.model_names]}

    @app.get("/health")
    async def health() -> Response:
        if engine.dead is not None:
            raise OpenAIError(f"the engine stopped: {engine.dead!r}", 503, "service_unavailable", None)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, Any]:
        return {"success": await engine.reset_prefix_cache()}

    @app.get("/cache/stats")
    async def cache_stats() -> dict[str, Any]:
        return {**await engine.cache_stats(), **engine.hash_config()}

    @app.get("/kv_events")
    async def kv_events(since: str | None = None) -> dict[str, Any]:
        try:
            seq = None if since is None else int(since)
        except ValueError:
            raise OpenAIError(f"since must be an integer sequence number, got {since!r}", param="since") from None
        return await engine.kv_events(seq)

    return app


async def _parse(raw: Request, model: type[BaseModel]) -> Any:
    body = await raw.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OpenAIError(f"the request body is not valid UTF-8: {e}", code="invalid_body") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise OpenAIError(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise OpenAIError(f"the request body must be a JSON object, got {type(data).__name__}",
                          code="invalid_body")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_error(e) from None


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def openai_error(_: Request, e: OpenAIError) -> JSONResponse:
        return JSONResponse(e.to_dict(), status_code=e.status_code)

    @app.exception_handler(RequestValidationError)
    async def request_validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        first = errors[0] if errors else {}
        loc = ".".join(str(p) for p in first.get("loc", ()))
        err = OpenAIError(f"{loc}: {first.get('msg', 'invalid request')}", param=loc or None, code="invalid_type")
        return JSONResponse(err.to_dict(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        err = OpenAIError(str(e.detail), e.status_code, kind, None)
        return JSONResponse(err.to_dict(), status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        err = OpenAIError(f"internal error: {e!r}", 500, "internal_error", None)
        return JSONResponse(err.to_dict(), status_code=500)


class APIKeyMiddleware:
    """401 for /v1/* and /reset_prefix_cache without `Authorization: Bearer <key>`. A pure
    ASGI middleware (not BaseHTTPMiddleware), so streaming and disconnects pass through."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS" and scope["path"].startswith(_PROTECTED_PREFIXES):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                err = OpenAIError("invalid or missing API key (send 'Authorization: Bearer <key>')", 401,
                                  "authentication_error", "invalid_api_key")
                await JSONResponse(err.to_dict(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _log_status(engine: AsyncLLM, interval: float) -> None:
    """One line per `interval` seconds: load, KV usage, prefix hit rate (interval and total)."""
    prev = dict(engine.stats)
    prev_time = time.monotonic()
    while True:
        await asyncio.sleep(interval)
        s, now = dict(engine.stats), time.monotonic()
        queries = s.get("queries", 0) - prev.get("queries", 0)
        hits = s.get("hits", 0) - prev.get("hits", 0)
        gen = s.get("generation_tokens", 0) - prev.get("generation_tokens", 0)
        logger.info(
            "running: %d reqs, waiting: %d reqs, KV usage: %.1f%%, prefix cache hit rate: %.1f%% "
            "(total %.1f%%), cached blocks: %d, generation: %.1f tok/s",
            s.get("num_running", 0), s.get("num_waiting", 0), 100 * s.get("kv_cache_usage", 0.0),
            100 * hits / queries if queries else 0.0, 100 * s.get("hit_rate", 0.0),
            s.get("blocks_cached", 0), gen / max(now - prev_time, 1e-9))
        prev, prev_time = s, now
