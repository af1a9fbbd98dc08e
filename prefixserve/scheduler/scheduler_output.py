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

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def samples(self) -> bool:
        """The chunk reaches the request's last known token, so its logits pick the next one."""
        return self.end == self.request.num_tokens


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
