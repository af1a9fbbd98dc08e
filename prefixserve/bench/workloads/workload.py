"""Workload: a seeded generator of OpenAI requests, with the sharing structure it claims.

A workload is a small dependency graph of requests. `start()` returns the requests that can be
sent at once; `next(spec, answer)` returns the requests that the answer to `spec` unlocks (the
next turn of a conversation, the children of a tree node). Static workloads unlock nothing.
The HTTP runner feeds real answers back; a simulator feeds synthesized ones through
`expand(workload, answer_fn)`. Workloads know nothing about HTTP, tokenizers or timing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a completion `prompt` or chat `messages` (exactly one of them)."""

    request_id: str
    max_tokens: int
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    n: int = 1
    temperature: float = 0.0
    group: str = ""  # what it shares with: a conversation, a tree, a prefix group
    turn: int = 0  # conversation turn, or depth in a tree
    parent_id: str | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(f"{self.request_id}: set exactly one of prompt and messages")

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def prompt_text(self) -> str:
        """The prompt as one string (chat messages joined as `role: content` lines)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages or [])


@dataclass(kw_only=True)
class Workload:
    """Base of all workloads. Subclasses are dataclasses whose extra fields are their sizes."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    num_requests: int = 32
    max_tokens: int = 16
    seed: int = 0

    def start(self) -> list[RequestSpec]:
        raise NotImplementedError

    def next(self, spec: RequestSpec, answer: str) -> list[RequestSpec]:
        """Requests unlocked by `answer` to `spec`; static workloads unlock none."""
        return []

    def expected_requests(self) -> int:
        """How many requests a full run sends (if no request fails)."""
        return len(self.start())

    @classmethod
    def options(cls) -> list[tuple[str, Any, str]]:
        """(field, default, help) of the workload's own sizes, for the CLI."""
        common = {f.name for f in fields(Workload)}
        return [
            (f.name, f.default, f.metadata.get("help", ""))
            for f in fields(cls)
            if f.name not in common
        ]


def option(default: Any, help: str) -> Any:
    """A workload size with a help text for the CLI."""
    return field(default=default, metadata={"help": help})


def expand(
    workload: Workload, answer_fn: Callable[[RequestSpec], str] | None = None
) -> list[RequestSpec]:
    """Every request of `workload`, breadth-first, answering each with `answer_fn` (default: "")."""
    answer_fn = answer_fn or (lambda spec: "")
    queue = deque(workload.start())
    out: list[RequestSpec] = []
    while queue:
        spec = queue.popleft()
        out.append(spec)
        queue.extend(workload.next(spec, answer_fn(spec)))
    return out
