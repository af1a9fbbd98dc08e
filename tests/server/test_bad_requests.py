"""Bad input gets a 4xx with OpenAI's error body, and the server keeps serving."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"
OK_COMPLETION = {"model": MODEL, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
OK_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}


def _with(base: dict, **changes: object) -> dict:
    body = {**base, **changes}
    return {k: v for k, v in body.items() if v is not ...}


BAD_COMPLETIONS = {
    "missing prompt": (_with(OK_COMPLETION, prompt=...), "prompt"),
    "empty prompt": (_with(OK_COMPLETION, prompt=""), "empty"),
    "empty prompt list": (_with(OK_COMPLETION, prompt=[]), "prompt"),
    "prompt of wrong type": (_with(OK_COMPLETION, prompt=42), "prompt"),
    "mixed prompt list": (_with(OK_COMPLETION, prompt=["a", [1, 2]]), "prompt"),
    "negative token id": (_with(OK_COMPLETION, prompt=[1, -5]), "token id"),
    "token id beyond vocab": (_with(OK_COMPLETION, prompt=[[1, 10**9]]), "token id"),
    "float token id": (_with(OK_COMPLETION, prompt=[1, 2.5]), "token id"),
    "max_tokens zero": (_with(OK_COMPLETION, max_tokens=0), "max_tokens"),
    "max_tokens negative": (_with(OK_COMPLETION, max_tokens=-3), "max_tokens"),
    "max_tokens beyond context": (_with(OK_COMPLETION, max_tokens=10**6), "context length"),
    "max_tokens wrong type": (_with(OK_COMPLETION, max_tokens="many"), "max_tokens"),
    "negative temperature": (_with(OK_COMPLETION, temperature=-0.5), "temperature"),
    "top_p zero": (_with(OK_COMPLETION, top_p=0), "top_p"),
    "top_p above one": (_with(OK_COMPLETION, top_p=1.5), "top_p"),
    "n above max_n": (_with(OK_COMPLETION, n=99), "n must be"),
    "n zero": (_with(OK_COMPLETION, n=0), "n must be"),
    "prompt longer than the context": (_with(OK_COMPLETION, prompt=[1] * 3000), "context length"),
    "stop of wrong type": (_with(OK_COMPLETION, stop=[1, 2]), "stop"),
    "logprobs too large": (_with(OK_COMPLETION, logprobs=50), "logprobs"),
    "stream of wrong type": (_with(OK_COMPLETION, stream="yes please"), "stream"),
}

BAD_CHATS = {
    "missing messages": (_with(OK_CHAT, messages=...), "messages"),
    "empty messages": (_with(OK_CHAT, messages=[]), "messages"),
    "unknown role": (_with(OK_CHAT, messages=[{"role": "wizard", "content": "hi"}]), "role"),
    "message without role": (_with(OK_CHAT, messages=[{"content": "hi"}]), "role"),
    "messages of wrong type": (_with(OK_CHAT, messages="hello"), "messages"),
    "image content part": (_with(OK_CHAT, messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
                           "text"),
    "negative temperature": (_with(OK_CHAT, temperature=-1), "temperature"),
    "max_tokens beyond context": (_with(OK_CHAT, max_tokens=10**6), "context length"),
}


def _assert_openai_error(resp, status: int, words: str) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    assert words.lower() in err["message"].lower(), err["message"]


@pytest.mark.parametrize("case", list(BAD_COMPLETIONS))
def test_bad_completion_gets_400(server, case: str) -> None:
    body, words = BAD_COMPLETIONS[case]
    with server.client() as http:
        _assert_openai_error(http.post("/v1/completions", json=body), 400, words)


@pytest.mark.parametrize("case", list(BAD_CHATS))
def test_bad_chat_gets_400(server, case: str) -> None:
    body, words = BAD_CHATS[case]
    with server.client() as http:
        _assert_openai_error(http.post("/v1/chat/completions", json=body), 400, words)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_unparseable_bodies_get_400(server, path: str) -> None:
    with server.client() as http:
        _assert_openai_error(http.post(path, content=b"{not json"), 400, "not valid JSON")
        _assert_openai_error(http.post(path, content=b'{"prompt": "\xff\xfe"}'), 400, "UTF-8")
        _assert_openai_error(http.post(path, content=b"[1, 2]"), 400, "JSON object")
        _assert_openai_error(http.post(path, content=b""), 400, "not valid JSON")


def test_unknown_model_gets_404(server) -> None:
    with server.client() as http:
        _assert_openai_error(http.post("/v1/completions", json=_with(OK_COMPLETION, model="gpt-9")), 404, "gpt-9")
        _assert_openai_error(http.post("/v1/chat/completions", json=_with(OK_CHAT, model="gpt-9")), 404, "gpt-9")


def test_unknown_route_and_bad_since_get_openai_errors(server) -> None:
    with server.client() as http:
        _assert_openai_error(http.get("/v1/nothing"), 404, "not found")
        _assert_openai_error(http.get("/kv_events", params={"since": "abc"}), 400, "since")


def test_a_bad_stream_request_fails_before_streaming(server) -> None:
    with server.client() as http:
        resp = http.post("/v1/completions", json=_with(OK_COMPLETION, stream=True, max_tokens=0))
        assert resp.status_code == 400 and resp.headers["content-type"].startswith("application/json")


def test_server_still_serves_after_bad_requests(server) -> None:
    with server.client() as http:
        for _ in range(3):
            http.post("/v1/completions", content=b"\x00garbage")
            http.post("/v1/chat/completions", json={"messages": [{"role": "x"}]})
        ok = http.post("/v1/completions", json=OK_COMPLETION)
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"]
        chat = http.post("/v1/chat/completions", json=OK_CHAT)
        assert chat.status_code == 200 and chat.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
        stats = http.get("/cache/stats").json()
        assert stats["num_running"] == 0 and stats["blocks_in_use"] == 0


def test_api_key_is_required_when_set(make_server) -> None:
    keyed = make_server(api_key="sekrit")
    with keyed.client() as http:
        _assert_openai_error(http.post("/v1/completions", json=OK_COMPLETION), 401, "API key")
        _assert_openai_error(http.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401, "API key")
        _assert_openai_error(http.post("/reset_prefix_cache"), 401, "API key")
        assert http.get("/health").status_code == 200
        ok = http.post("/v1/completions", json=OK_COMPLETION, headers={"Authorization": "Bearer sekrit"})
        assert ok.status_code == 200
