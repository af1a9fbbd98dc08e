"""What a routing policy may know about a request, extracted once from the OpenAI body.

The router never tokenizes here: `text` is the prompt as characters (chat messages rendered
as `<|role|>content` lines, append-only across turns so a conversation's next turn extends
the previous prompt), `token_ids` is set only when the client sent token ids. A `cache_salt`
is folded into the front of `text` (and policies add it to hash keys), so tenants never share routing affinity,
just as they never share KV blocks in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class RequestInfo:
    text: str = ""
    token_ids: list[int] | None = None
    hash_key: str = ""  # consistent hashing key: first user message or the prompt
    model: str | None = None
    cache_salt: str | None = None
    messages: list[dict[str, Any]] | None = None
    stream: bool = False

    @classmethod
    def from_completion(cls, body: dict[str, Any]) -> RequestInfo:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # batched prompts: route on the first
        token_ids = None
        if isinstance(prompt, list):
            token_ids = [int(t) for t in prompt]
            text = " ".join(map(str, token_ids))
        else:
            text = str(prompt)
        return cls._build(body, text, text, token_ids, None)

    @classmethod
    def from_chat(cls, body: dict[str, Any]) -> RequestInfo:
        messages = body.get("messages") or []
        text = "".join(f"<|{m.get('role', '')}|>{content_text(m.get('content'))}\n"
                       for m in messages if isinstance(m, dict))
        first_user = next((content_text(m.get("content")) for m in messages
                           if isinstance(m, dict) and m.get("role") == "user"), text)
        return cls._build(body, text, first_user, None, messages)

    @classmethod
    def _build(cls, body: dict[str, Any], text: str, key: str, token_ids: list[int] | None,
               messages: list[dict[str, Any]] | None) -> RequestInfo:
        salt = body.get("cache_salt")
        model = body.get("model")
        prefix = f"\x00salt={salt}\x00" if salt else ""
        return cls(text=prefix + text, token_ids=token_ids, hash_key=key, model=model,
                   cache_salt=salt,
                   messages=messages, stream=bool(body.get("stream")))


def content_text(content: Any) -> str:
    """The text of a chat message content: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content)
