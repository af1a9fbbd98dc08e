"""SchedulerOutput: what one engine step computes, as the scheduler decided it."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixserve.request import Request


@dataclass(frozen=True)
class ScheduledChunk:
    """Tokens [start, start + num_tokens) of `request` get their K/V computed this step."""

    request: Request
    start: int
    num_tokens: int
    # The chunk reaches the request's last known token, so its logits pick the next one.
    samples: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", self.end == self.request.num_tokens)

    @property
    def end(self) -> int:
        return self.start + self.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
