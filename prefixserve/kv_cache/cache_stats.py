"""CacheStats: prefix-cache counters (in tokens, as vLLM counts them) and block gauges.

`queries` are the tokens of requests admitted for the first time and `hits` the tokens
they got from the cache; requests coming back after preemption are counted apart
(`preempted_*`) so they do not inflate the hit rate. A request is counted once, when its
first `allocate_slots` succeeds, not on every lookup. This module knows nothing about blocks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class CacheCounters:
    """Monotonic counters; they survive `reset_prefix_cache` (Prometheus counters must)."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the manager: counters plus block gauges."""

    requests: int
    queries: int
    hits: int
    preempted_requests: int
    preempted_queries: int
    preempted_hits: int
    evictions: int       # cached blocks evicted so far
    num_blocks: int
    blocks_in_use: int   # held by running requests (not reclaimable)
    blocks_cached: int   # holding a hittable prefix (in use or free)
    blocks_free: int     # allocatable now (includes free-but-cached blocks)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def usage(self) -> float:
        return self.blocks_in_use / self.num_blocks

    def to_dict(self) -> dict[str, int | float]:
        return {**asdict(self), "hit_rate": self.hit_rate, "usage": self.usage}
