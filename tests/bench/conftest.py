"""Servers for the bench tests: a small fake OpenAI-compatible server with a real prefix match.

`FakeOpenAIServer` is a real HTTP server (FastAPI + uvicorn in a thread on 127.0.0.1, an
ephemeral port). It streams SSE for /v1/completions and /v1/chat/completions, reports usage
with `cached_tokens` = the longest prefix (in whitespace tokens, whole blocks, never the
whole prompt) that the prompt shares with a prompt it has seen, and can fail every k-th
request with a given status. Tests that only need *some* compatible server use the
`bench_base_url` fixture: set PREFIXSERVE_BENCH_BASE_URL to run them against a real server
instead (it must support POST /reset_prefix_cache, as prefixserve's does).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


class FakeOpenAIServer:
    def __init__(
        self,
        fail_every: int = 0,
        fail_status: int = 500,
        send_usage: bool = True,
        block_size: int = 4,
        token_delay_s: float = 0.001,
        error_mid_stream: bool = False,
    ) -> None:
        self.fail_every = fail_every
        self.fail_status = fail_status
        self.send_usage = send_usage
        self.block_size = block_size
        self.token_delay_s = token_delay_s
        self.error_mid_stream = error_mid_stream
        self.seen: list[list[str]] = []
        self.prompts: list[str] = []  # every prompt received, in arrival order
        self.bodies: list[dict[str, Any]] = []
        self.num_requests = 0
        self.lock = threading.Lock()
        self.app = self.build_app()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.base_url = ""

    def cached_tokens(self, tokens: list[str]) -> int:
        best = 0
        for old in self.seen:
            n = 0
            for a, b in zip(old, tokens, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        best = min(best, len(tokens) - 1)
        return max(0, best - best % self.block_size)

    def build_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

        @app.post("/reset_prefix_cache")
        async def reset() -> dict[str, bool]:
            with self.lock:
                self.seen.clear()
            return {"success": True}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            body = await request.json()
            return self.respond(body, body["prompt"], chat=False)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            prompt = "\n".join(f"{m['role']}: {m['content']}" for m in body["messages"])
            return self.respond(body, prompt, chat=True)

        return app

    def respond(self, body: dict[str, Any], prompt: str, chat: bool) -> Any:
        with self.lock:
            self.num_requests += 1
            self.bodies.append(body)
            if self.fail_every and self.num_requests % self.fail_every == 0:
                err = {"message": f"injected failure #{self.num_requests}", "type": "server_error",
                       "code": self.fail_status}  # fmt: skip
                return JSONResponse({"error": err}, status_code=self.fail_status)
            tokens = prompt.split()
            cached = self.cached_tokens(tokens)
            self.seen.append(tokens)
            self.prompts.append(prompt)
        usage = {
            "prompt_tokens": len(tokens),
            "completion_tokens": body.get("max_tokens", 16) * body.get("n", 1),
            "total_tokens": len(tokens) + body.get("max_tokens", 16) * body.get("n", 1),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        include_usage = self.send_usage and (body.get("stream_options") or {}).get("include_usage")
        return StreamingResponse(
            self.stream(body, chat, usage if include_usage else None),
            media_type="text/event-stream",
        )

    async def stream(
        self, body: dict[str, Any], chat: bool, usage: dict[str, Any] | None
    ) -> AsyncIterator[str]:
        kind = "chat.completion.chunk" if chat else "text_completion"
        for step in range(body.get("max_tokens", 16)):
            await asyncio.sleep(self.token_delay_s)
            for i in range(body.get("n", 1)):
                text = f" tok{i}_{step}"
                choice = (
                    {"index": i, "delta": {"content": text}} if chat else {"index": i, "text": text}
                )
                choice["finish_reason"] = None
                yield f"data: {json.dumps({'object': kind, 'choices': [choice], 'usage': None})}\n\n"
            if self.error_mid_stream:
                err = {"message": "engine died mid-stream", "type": "server_error", "code": 500}
                yield f"data: {json.dumps({'error': err})}\n\n"
                return
        if usage is not None:
            yield f"data: {json.dumps({'object': kind, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"

    def start(self) -> FakeOpenAIServer:
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=10)


@pytest.fixture
def make_fake_server() -> Iterator[Callable[..., FakeOpenAIServer]]:
    """`make_fake_server(fail_every=3, fail_status=500)` -> a started FakeOpenAIServer."""
    servers: list[FakeOpenAIServer] = []

    def make(**kwargs: Any) -> FakeOpenAIServer:
        servers.append(FakeOpenAIServer(**kwargs).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def openai_server_url() -> Iterator[str]:
    """A compatible server for the whole session: $PREFIXSERVE_BENCH_BASE_URL, else the fake."""
    if url := os.environ.get("PREFIXSERVE_BENCH_BASE_URL"):
        yield url
        return
    server = FakeOpenAIServer().start()
    yield server.base_url
    server.stop()


@pytest.fixture
def bench_base_url(openai_server_url: str) -> str:
    """The session server with an empty prefix cache, so each test starts cold."""
    httpx.post(f"{openai_server_url.rstrip('/')}/reset_prefix_cache", timeout=30).raise_for_status()
    return openai_server_url
