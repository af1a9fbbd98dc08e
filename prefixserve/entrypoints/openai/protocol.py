"""The OpenAI wire format: request bodies as pydantic models, and the error type.

Request models check types only; value checks (ranges, lengths, token ids) happen in the
serving layer and SamplingParams, so every message names the field to fix. Unknown fields
are ignored, as OpenAI's own server does. Responses are plain dicts built by the serving
classes. Knows nothing about the engine.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class OpenAIError(Exception):
    """An error returned as `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(self, message: str, status_code: int = 400, type: str = "invalid_request_error",
                 code: str | None = "invalid_value", param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.type = type
        self.code = code
        self.param = param

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def validation_error(e: ValidationError) -> OpenAIError:
    """A pydantic error as one readable OpenAIError naming the first bad field."""
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    got = first.get("input")
    got_text = "" if first.get("type") == "missing" else f" (got {_short(got)})"
    return OpenAIError(f"{loc}: {first.get('msg', 'invalid value')}{got_text}", param=loc or None,
                       code="missing_required_parameter" if first.get("type") == "missing" else "invalid_type")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingRequest(BaseModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    cache_salt: str | None = None
    priority: int = 0
    user: str | None = None


class CompletionRequest(SamplingRequest):
    prompt: Any = None  # str | list[str] | list[int] | list[list[int]]; checked by the server
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(default_factory=list)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
