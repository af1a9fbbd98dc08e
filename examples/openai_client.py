"""Talk to `prefixserve serve` with the official `openai` client: plain and streamed.

    prefixserve serve --port 8000            # in one terminal (default model)
    python examples/openai_client.py         # in another

The second chat turn repeats the first turn's system prompt, so the server reports the
reused tokens in `usage.prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import argparse

from openai import OpenAI

SYSTEM = ("You are a concise assistant for a small bakery. Opening hours: 7 to 15 on weekdays, "
          "8 to 13 on Saturdays, closed on Sundays. Answer in one sentence.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="EMPTY", help="the server's --api-key, if it has one")
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    model = client.models.list().data[0].id
    print(f"model: {model}")

    completion = client.completions.create(model=model, prompt="The best bread for sandwiches is",
                                           max_tokens=16, temperature=0)
    print(f"\n[completion] {completion.choices[0].text!r}")

    for question in ("When are you open on Saturday?", "Are you open on Sunday?"):
        reply = client.chat.completions.create(
            model=model, max_tokens=32, temperature=0,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
        usage = reply.usage
        print(f"\n[chat] {question}\n  {reply.choices[0].message.content}")
        print(f"  prompt tokens: {usage.prompt_tokens}, cached: {usage.prompt_tokens_details.cached_tokens}")

    print("\n[streamed chat] ", end="", flush=True)
    stream = client.chat.completions.create(
        model=model, max_tokens=48, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Suggest a pastry."}])
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage is not None:
            print(f"\n  usage: {chunk.usage.completion_tokens} completion tokens, "
                  f"{chunk.usage.prompt_tokens_details.cached_tokens} cached prompt tokens")


if __name__ == "__main__":
    main()
