"""Small httpx helpers for the router end-to-end tests: send completions, read which worker
answered (`x-prefixserve-worker`) and `usage.prompt_tokens_details.cached_tokens`, reset the
workers' prefix caches.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Answer:
    status: int
    worker: str
    text: str
    prompt_tokens: int
    cached_tokens: int


def complete(url: str, prompt: str, max_tokens: int = 2, timeout: float = 180.0) -> Answer:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    resp = httpx.post(url + "/v1/completions", json=body, timeout=timeout)
    if resp.status_code != 200:
        return Answer(
            resp.status_code, resp.headers.get("x-prefixserve-worker", ""), resp.text, 0, 0
        )
    data = resp.json()
    usage = data["usage"]
    return Answer(
        200,
        resp.headers["x-prefixserve-worker"],
        data["choices"][0]["text"],
        usage["prompt_tokens"],
        usage["prompt_tokens_details"]["cached_tokens"],
    )


def complete_all(url: str, prompts: list[str], concurrency: int) -> list[Answer]:
    """Send `prompts` with at most `concurrency` in flight; answers in prompt order."""
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda p: complete(url, p), prompts))


def reset_caches(worker_urls: list[str]) -> None:
    for url in worker_urls:
        resp = httpx.post(url + "/reset_prefix_cache", timeout=30)
        assert resp.status_code == 200 and resp.json().get("success") is True, resp.text
