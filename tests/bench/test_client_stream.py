"""OpenAIClient's reading of SSE streams, usage and error bodies from different servers."""

from __future__ import annotations

import json
from typing import Any

from prefixserve.bench.cli import main
from prefixserve.bench.client import (
    RequestResult,
    choice_text,
    error_message,
    normalize_base_url,
    parse_sse_line,
    read_usage,
)


def test_sse_lines_other_than_data_json_are_skipped() -> None:
    assert parse_sse_line("") is None
    assert parse_sse_line(": keep-alive") is None
    assert parse_sse_line("event: message") is None
    assert parse_sse_line("data: [DONE]") is None
    assert parse_sse_line('data: {"choices": []}') == {"choices": []}
    assert parse_sse_line('data:{"x": 1}') == {"x": 1}


def test_choice_text_reads_completion_and_chat_chunks() -> None:
    assert choice_text({"index": 0, "text": " hi"}) == " hi"
    assert choice_text({"index": 0, "delta": {"content": " hi"}}) == " hi"
    assert choice_text({"index": 0, "delta": {"role": "assistant"}}) == ""
    assert choice_text({"index": 0, "delta": {"content": None}, "finish_reason": "stop"}) == ""


def test_usage_without_prompt_tokens_details_leaves_cached_unknown() -> None:
    result = RequestResult(request_id="a", index=0)
    read_usage(result, {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    assert result.usage_reported and result.prompt_tokens == 10 and result.completion_tokens == 3
    assert result.cached_tokens is None
    read_usage(result, {"prompt_tokens": 10, "completion_tokens": 3,
                        "prompt_tokens_details": {"cached_tokens": 8}})  # fmt: skip
    assert result.cached_tokens == 8


def test_error_message_prefers_the_openai_error_body() -> None:
    body = json.dumps({"error": {"message": "prompt too long", "type": "invalid_request_error"}})
    assert error_message(body) == "prompt too long"
    assert error_message(json.dumps({"detail": "Not Found"})) == "Not Found"
    assert error_message("<html>bad gateway</html>") == "<html>bad gateway</html>"


def test_base_url_with_or_without_v1_means_the_same_server() -> None:
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000"
    assert normalize_base_url("http://h:8000") == "http://h:8000"


def test_error_event_inside_a_stream_fails_that_request(
    make_fake_server: Any, tmp_path: Any
) -> None:
    server = make_fake_server(error_mid_stream=True)
    out = tmp_path / "r.json"
    argv = ["--base-url", server.base_url, "--workload", "random", "--num-requests", "3",
            "--max-tokens", "4", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 1
    report = json.loads(out.read_text())
    assert report["errors"]["count"] == 3
    assert report["errors"]["messages"] == ["stream error: engine died mid-stream"]
