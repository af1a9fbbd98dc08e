"""Many streaming clients at once, and clients that hang up mid-stream."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"
TOPICS = ["rivers", "bread", "trains", "owls", "glass", "chess", "tea", "maps"]


def _prompt(i: int) -> str:
    return f"Request {i}. Write one sentence about {TOPICS[i % len(TOPICS)]}:"


def _wait_idle(http: httpx.Client, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = http.get("/cache/stats").json()
        if (stats["num_running"] == 0 and stats["num_waiting"] == 0) or time.monotonic() > deadline:
            return stats


async def _stream_text(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> str:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    parts, done = [], False
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            parts.extend(c["text"] for c in json.loads(line[6:])["choices"])
    assert done
    return "".join(parts)


def test_32_concurrent_streams_match_sequential_and_leak_nothing(server) -> None:
    prompts = [_prompt(i) for i in range(32)]
    with server.client() as http:
        sequential = []
        for p in prompts:
            body = {"model": MODEL, "prompt": p, "max_tokens": 6, "temperature": 0}
            sequential.append(http.post("/v1/completions", json=body).json()["choices"][0]["text"])

        async def run_all() -> list[str]:
            limits = httpx.Limits(max_connections=64)
            async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as client:
                return await asyncio.gather(*(_stream_text(client, p, 6) for p in prompts))

        concurrent = asyncio.run(run_all())
        assert concurrent == sequential
        stats = _wait_idle(http)
    assert stats["num_running"] == 0 and stats["num_waiting"] == 0
    assert stats["blocks_in_use"] == 0, "a finished request still holds KV blocks"
    assert stats["blocks_free"] == stats["num_blocks"]
    assert server.engine.num_unfinished == 0
    server.engine.engine.kv_cache.check_invariants()


def test_client_disconnect_mid_stream_aborts_and_frees_blocks(server) -> None:
    body = {"model": MODEL, "prompt": "Tell me a very long story about a lighthouse keeper.",
            "max_tokens": 1000, "temperature": 0, "ignore_eos": True, "stream": True}
    with server.client() as http:
        before = http.get("/cache/stats").json()["generation_tokens"]
        with http.stream("POST", "/v1/completions", json=body) as resp:
            seen = 0
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    seen += 1
                if seen == 3:
                    break
        # the connection is closed here, mid-stream
        stats = _wait_idle(http)
        assert stats["num_running"] == 0 and stats["num_waiting"] == 0
        assert stats["blocks_in_use"] == 0
        generated = stats["generation_tokens"] - before
        time.sleep(0.3)
        assert http.get("/cache/stats").json()["generation_tokens"] - before == generated  # nothing runs on
    assert 3 <= generated < 200, f"the aborted request generated {generated} tokens"
    assert server.engine.num_unfinished == 0


def test_client_disconnect_during_non_streaming_request_aborts(server) -> None:
    body = {"model": MODEL, "prompt": "List every prime number you know.", "max_tokens": 1000,
            "temperature": 0, "ignore_eos": True}
    with server.client() as http:
        before = http.get("/cache/stats").json()["generation_tokens"]
        with httpx.Client(base_url=server.url, timeout=0.5) as impatient, pytest.raises(httpx.ReadTimeout):
            impatient.post("/v1/completions", json=body)
        stats = _wait_idle(http)
        assert stats["num_running"] == 0 and stats["blocks_in_use"] == 0
        assert stats["generation_tokens"] - before < 500
