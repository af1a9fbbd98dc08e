"""A real server for the server tests: uvicorn in a thread on 127.0.0.1, an ephemeral port.

Each test module starts one (module-scoped fixture) on the default model, with a small
KV pool so leaks and evictions show, and shares it across its tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from prefixserve.engine.async_llm import AsyncLLM
from prefixserve.entrypoints.openai.api_server import ServerOptions, build_app

MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass
class RunningServer:
    url: str
    model: str
    engine: AsyncLLM
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.engine.shutdown()


def start_server(api_key: str | None = None, max_n: int = 4, **engine_kwargs: object) -> RunningServer:
    engine_kwargs.setdefault("num_kv_blocks", 512)
    engine_kwargs.setdefault("max_model_len", 2048)
    engine = AsyncLLM.from_kwargs(**engine_kwargs)
    app = build_app(engine, ServerOptions(model_names=[MODEL_NAME], api_key=api_key, max_n=max_n, log_interval=0))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            engine.shutdown()
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(f"http://127.0.0.1:{port}", MODEL_NAME, engine, server, thread)


@pytest.fixture(scope="module")
def make_server() -> Iterator:
    """start_server for tests that need their own options; stopped at module end."""
    started: list[RunningServer] = []

    def make(**kwargs: object) -> RunningServer:
        started.append(start_server(**kwargs))
        return started[-1]

    yield make
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = start_server()
    yield running
    running.stop()
