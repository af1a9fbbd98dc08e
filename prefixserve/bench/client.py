"""OpenAIClient: sends one RequestSpec to any OpenAI-compatible server and times it.

Streams Server-Sent Events so that time to first token is taken at the first chunk that
carries text, and asks for `stream_options.include_usage` to learn the token counts. Only
official OpenAI fields are needed: a server that sends no usage still works (output tokens
are then counted as text chunks, prompt and cached tokens are unknown), and cached tokens
are read from `usage.prompt_tokens_details.cached_tokens` where a server reports them.
It knows nothing about workloads or statistics: it returns one `RequestResult` per request.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from prefixserve.bench.workloads import RequestSpec


@dataclass
class RequestResult:
    """What happened to one request; times in seconds from its own start."""

    request_id: str
    index: int  # dispatch order within the run
    group: str = ""
    turn: int = 0
    ok: bool = False
    error: str = ""
    start_s: float = 0.0  # since the start of the run
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    cached_tokens: int | None = None
    usage_reported: bool = False
    texts: list[str] = field(default_factory=list)  # one per choice (`n`)

    @property
    def answer(self) -> str:
        return self.texts[0] if self.texts else ""

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready record without the generated text."""
        record = asdict(self)
        record.pop("texts")
        return record


def normalize_base_url(url: str) -> str:
    """`http://h:8000`, `http://h:8000/` and `http://h:8000/v1` all mean the same server."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class OpenAIClient:
    """Async streaming client for `/v1/completions` and `/v1/chat/completions`."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        include_usage: bool = True,
        extra_body: dict[str, Any] | None = None,
        force_chat: bool = False,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.include_usage = include_usage
        self.extra_body = extra_body or {}
        self.force_chat = force_chat
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self.http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, limits=limits
        )

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def resolve_model(self) -> str:
        """The `--model` given, else the first model that `GET /v1/models` lists."""
        if self.model is None:
            resp = await self.http.get("/v1/models")
            resp.raise_for_status()
            models = resp.json().get("data") or []
            if not models:
                raise RuntimeError(f"{self.base_url}/v1/models lists no model; pass --model")
            self.model = str(models[0]["id"])
        return self.model

    def payload(self, spec: RequestSpec) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": spec.max_tokens,
            "temperature": spec.temperature,
            "stream": True,
        }
        if spec.n != 1:
            body["n"] = spec.n
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        if spec.is_chat or self.force_chat:
            messages = spec.messages or [{"role": "user", "content": spec.prompt or ""}]
            return "/v1/chat/completions", {**body, "messages": messages}
        return "/v1/completions", {**body, "prompt": spec.prompt}

    async def send(self, spec: RequestSpec, index: int, run_start: float) -> RequestResult:
        """Send `spec`, stream the answer; never raises for server or network errors."""
        result = RequestResult(
            request_id=spec.request_id, index=index, group=spec.group, turn=spec.turn
        )
        path, body = self.payload(spec)
        start = time.perf_counter()
        result.start_s = start - run_start
        chunks: dict[int, list[str]] = {}
        num_chunks = 0
        try:
            async with self.http.stream("POST", path, json=body) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    result.error = f"HTTP {resp.status_code}: {error_message(resp.text)}"
                    return result
                async for line in resp.aiter_lines():
                    event = parse_sse_line(line)
                    if event is None:
                        continue
                    if "error" in event:
                        result.error = f"stream error: {error_message(json.dumps(event))}"
                        return result
                    for choice in event.get("choices") or []:
                        text = choice_text(choice)
                        if text:
                            if result.ttft_s is None:
                                result.ttft_s = time.perf_counter() - start
                            chunks.setdefault(int(choice.get("index", 0)), []).append(text)
                            num_chunks += 1
                    if event.get("usage"):
                        read_usage(result, event["usage"])
        except (httpx.HTTPError, ValueError, TypeError, AttributeError, KeyError) as exc:
            # Network failures and malformed streams are results, never crashes of the run.
            result.error = f"{type(exc).__name__}: {exc}"
            return result
        result.e2e_s = time.perf_counter() - start
        result.texts = ["".join(chunks[i]) for i in sorted(chunks)]
        if not result.usage_reported:
            result.completion_tokens = num_chunks  # servers stream about one token per chunk
        result.ok = True
        return result


def parse_sse_line(line: str) -> dict[str, Any] | None:
    """The JSON of a `data: {...}` line; None for blank lines, comments and `[DONE]`."""
    line = line.strip()
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    if not data or data == "[DONE]":
        return None
    return json.loads(data)


def choice_text(choice: dict[str, Any]) -> str:
    """Text of a completions chunk (`text`) or a chat chunk (`delta.content`)."""
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return delta.get("content") or delta.get("reasoning_content") or ""


def read_usage(result: RequestResult, usage: dict[str, Any]) -> None:
    result.usage_reported = True
    result.prompt_tokens = usage.get("prompt_tokens")
    result.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    result.cached_tokens = int(cached) if cached is not None else None


def error_message(body: str) -> str:
    """The `error.message` of an OpenAI error body, else the body itself (shortened)."""
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)
        else:
            msg = str(err)
    except (json.JSONDecodeError, TypeError):
        msg = body
    return str(msg).strip()[:300]
