"""A small OpenAI-compatible fake worker for router tests, served by uvicorn in a thread.

Canned completions with usage, SSE streaming, `/health`, `/v1/models` and `/kv_events`;
`fail_status` makes it answer errors and `kill()` stops it (its port then refuses).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from prefixserve.kv_cache.kv_events import KVEventLog


class FakeWorker:
    def __init__(self, name: str, delay: float = 0.0, stream_chunks: int = 4) -> None:
        self.name = name
        self.delay = delay
        self.stream_chunks = stream_chunks
        self.fail_status: int | None = None
        self.healthy = True
        self.served = 0
        self.prompts: list[object] = []
        self.events = KVEventLog(ring_size=100)
        self.app = self._build()
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="critical",
                                lifespan="off", timeout_graceful_shutdown=0)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()),
                                       daemon=True)

    def start(self) -> FakeWorker:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "fake worker did not start"
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def kill(self) -> None:
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(timeout=10)

    def _completion(self, body: dict, chat: bool) -> dict:
        text = f"hello from {self.name}"
        choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                   "finish_reason": "stop"} if chat else
                  {"index": 0, "text": text, "finish_reason": "stop"})
        return {"id": f"cmpl-{self.served}", "object": "chat.completion" if chat else
                "text_completion", "model": body.get("model", "fake"), "choices": [choice],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9,
                          "prompt_tokens_details": {"cached_tokens": 0}}}

    def _build(self) -> FastAPI:
        app = FastAPI()

        async def handle(request: Request, chat: bool) -> Response:
            body = await request.json()
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.fail_status is not None:
                return JSONResponse({"error": {"message": "boom", "type": "server_error",
                                               "code": self.fail_status}}, self.fail_status)
            self.served += 1
            self.prompts.append(body.get("prompt", body.get("messages")))
            if not body.get("stream"):
                return JSONResponse(self._completion(body, chat))

            async def sse():
                for i in range(self.stream_chunks):
                    chunk = {"choices": [{"index": 0, "text": f"tok{i} "}], "worker": self.name}
                    yield f"data: {json.dumps(chunk)}\n\n"
                    await asyncio.sleep(0.01)
                yield "data: [DONE]\n\n"
            return StreamingResponse(sse(), media_type="text/event-stream")

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await handle(request, chat=False)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await handle(request, chat=True)

        @app.get("/v1/models")
        async def models() -> Response:
            return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

        @app.get("/health")
        async def health() -> Response:
            return Response(status_code=200 if self.healthy else 503)

        @app.get("/kv_events")
        async def kv_events(since: int = -1) -> Response:
            events = self.events.events_since(since) if since >= 0 else None
            if events is None:
                return JSONResponse({"snapshot": self.events.snapshot().to_dict(),
                                     "seq": self.events.seq})
            return JSONResponse({"events": [e.to_dict() for e in events], "seq": self.events.seq})

        return app
