"""The official `openai` client (sync and async) against a real server on the default model."""

from __future__ import annotations

import asyncio

import openai
import pytest

pytestmark = pytest.mark.slow

MODEL_NAME = "SmolLM2-135M-Instruct"

LONG_PREFIX = ("You are a careful assistant for a hardware store. Answer in one short sentence. "
               "Store hours are nine to five on weekdays and ten to four on weekends. ") * 3


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def aclient_url(server) -> str:
    return server.url + "/v1"


def test_models_lists_the_served_name(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]


def test_completion_reports_usage_with_cached_tokens(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=6,
                                     temperature=0)
    assert resp.object == "text_completion"
    assert len(resp.choices) == 1 and resp.choices[0].text
    assert resp.choices[0].finish_reason in ("stop", "length")
    u = resp.usage
    assert u.completion_tokens >= 1 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0


def test_chat_completion_plain(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}])
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant" and resp.choices[0].message.content
    assert resp.usage.prompt_tokens_details.cached_tokens >= 0
    assert resp.usage.completion_tokens == 8 or resp.choices[0].finish_reason == "stop"


def test_streamed_completion_equals_plain(client: openai.OpenAI) -> None:
    kwargs = dict(model=MODEL_NAME, prompt="One, two, three,", max_tokens=10, temperature=0)
    plain = client.completions.create(**kwargs)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 0
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]


def test_streamed_chat_starts_with_role_and_ends_with_usage(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Name a color."}]
    plain = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=8, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=8,
                                                  temperature=0, stream=True,
                                                  stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].usage.total_tokens == plain.usage.total_tokens


def test_repeated_long_prefix_reports_cached_tokens(client: openai.OpenAI) -> None:
    first = client.completions.create(model=MODEL_NAME, prompt=LONG_PREFIX + "Question: when do you open?",
                                      max_tokens=4, temperature=0)
    second = client.completions.create(model=MODEL_NAME, prompt=LONG_PREFIX + "Question: do you sell nails?",
                                       max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens > 48
    assert second.usage.prompt_tokens_details.cached_tokens >= 32
    chat = [{"role": "system", "content": LONG_PREFIX}, {"role": "user", "content": "Hi"}]
    client.chat.completions.create(model=MODEL_NAME, messages=chat, max_tokens=2, temperature=0)
    again = client.chat.completions.create(model=MODEL_NAME, messages=chat, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 32


def test_cache_salt_isolates_tenants(server) -> None:
    prompt = "Tenant isolation check. " * 8
    with server.client() as http:
        def cached(salt: str) -> int:
            body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 1, "temperature": 0, "cache_salt": salt}
            return http.post("/v1/completions", json=body).json()["usage"]["prompt_tokens_details"]["cached_tokens"]

        assert cached("tenant-a") == 0
        assert cached("tenant-a") > 0
        assert cached("tenant-b") == 0


def test_batch_prompts_and_n_number_choices_like_openai(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL_NAME, prompt=["Apples are", "Pears are"], n=2,
                                     max_tokens=3, temperature=0)
    assert [c.index for c in resp.choices] == [0, 1, 2, 3]
    assert resp.choices[0].text == resp.choices[1].text  # greedy: both completions agree
    assert resp.choices[2].text == resp.choices[3].text
    assert 4 <= resp.usage.completion_tokens <= 12
    ids = client.completions.create(model=MODEL_NAME, prompt=[[504, 3458, 314], [504, 3458]], max_tokens=2,
                                    temperature=0)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_stop_seed_logprobs_and_echo(client: openai.OpenAI) -> None:
    resp = client.completions.create(model=MODEL_NAME, prompt="Count: 1, 2, 3,", max_tokens=12, temperature=0,
                                     stop=[" 6"], logprobs=2)
    choice = resp.choices[0]
    assert " 6" not in choice.text
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) >= 1
    assert all(v <= 0 for v in lp.token_logprobs)
    echoed = client.completions.create(model=MODEL_NAME, prompt="Echo me", max_tokens=2, temperature=0, echo=True)
    assert echoed.choices[0].text.startswith("Echo me")
    a = client.completions.create(model=MODEL_NAME, prompt="Random:", max_tokens=6, temperature=1.0, seed=7)
    b = client.completions.create(model=MODEL_NAME, prompt="Random:", max_tokens=6, temperature=1.0, seed=7)
    assert a.choices[0].text == b.choices[0].text


def test_chat_logprobs(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
    content = resp.choices[0].logprobs.content
    assert len(content) == resp.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_async_client_plain_and_streamed(aclient_url: str) -> None:
    async def run() -> tuple[str, str, str]:
        async with openai.AsyncOpenAI(base_url=aclient_url, api_key="unused", max_retries=0) as client:
            plain = await client.chat.completions.create(
                model=MODEL_NAME, messages=[{"role": "user", "content": "Pick a number."}], max_tokens=6,
                temperature=0)
            stream = await client.chat.completions.create(
                model=MODEL_NAME, messages=[{"role": "user", "content": "Pick a number."}], max_tokens=6,
                temperature=0, stream=True)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            comp = await client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=4, temperature=0)
            return plain.choices[0].message.content, streamed, comp.choices[0].text

    plain, streamed, comp = asyncio.run(run())
    assert plain == streamed and comp
