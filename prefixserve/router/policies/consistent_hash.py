"""Consistent hashing with bounded loads (CHWBL), as KubeAI's PrefixHash balancer.

Each worker sits on a hash ring `replicas` times (xxhash64 of `url + i`). A request's key is
model + cache salt + the first `prefix_chars` characters of its first user message (chat) or
prompt (completions); the lookup binary-searches the ring for the first point at or after
the key's hash and walks clockwise, accepting the first eligible worker whose in-flight load
satisfies `load <= (total + 1) / n * (1 + epsilon)`. Keys therefore stick to one worker
until it is overloaded, then spill to the next worker on the ring (still deterministic, so
several routers agree). After the pick every worker holds at most `(1 + epsilon) * mean + 1`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import xxhash

from prefixserve.router.policies.base import (
    PolicyConfig,
    RoutingPolicy,
    Worker,
    WorkerView,
    register_policy,
)
from prefixserve.router.request_info import RequestInfo


@dataclass(frozen=True)
class ConsistentHashConfig(PolicyConfig):
    replicas: int = field(default=256, metadata={"help": "virtual nodes per worker on the ring"})
    load_epsilon: float = field(
        default=0.25, metadata={"help": "bounded load: accept a worker if load <= (1+eps)*mean"})
    prefix_chars: int = field(
        default=100, metadata={"help": "characters of the prompt used as the hash key"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replicas < 1:
            raise ValueError(f"--replicas must be >= 1, got {self.replicas}")


@register_policy
class ConsistentHashPolicy(RoutingPolicy):
    name = "consistent_hash"
    config_cls = ConsistentHashConfig
    config: ConsistentHashConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._points: list[int] = []  # sorted ring hashes
        self._owners: list[str] = []  # url at each ring point
        self._dirty = False  # membership changed: rebuild lazily, once, at the next select

    def add_worker(self, worker: Worker) -> None:
        super().add_worker(worker)
        self._dirty = True

    def remove_worker(self, worker: Worker) -> None:
        super().remove_worker(worker)
        self._dirty = True

    def _rebuild(self) -> None:
        self._dirty = False
        ring = sorted((xxhash.xxh64_intdigest(f"{url}{i}".encode()), url)
                      for url in self.members for i in range(self.config.replicas))
        self._points = [h for h, _ in ring]
        self._owners = [u for _, u in ring]

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        if self._dirty:
            self._rebuild()
        key = (f"{request_info.model or ''}\x00{request_info.cache_salt or ''}\x00"
               f"{request_info.hash_key[:self.config.prefix_chars]}")
        start = bisect.bisect_left(self._points, xxhash.xxh64_intdigest(key.encode()))
        n_eligible = len(view.by_url)
        bound = (self._total_load(view) + 1) / n_eligible * (1.0 + self.config.load_epsilon)
        seen: set[str] = set()
        first: str | None = None
        n_points = len(self._points)
        for step in range(n_points):
            url = self._owners[(start + step) % n_points]
            if url in seen or url not in view.by_url:
                continue
            if first is None:
                first = url
            if self.loads.get(url) <= bound:
                self.last_decision = "ring_hit" if url == first else "ring_spill"
                return view.by_url[url]
            seen.add(url)
            if len(seen) == n_eligible:
                break
        self.last_decision = "fallback"
        return view.by_url[first] if first is not None else self._least_loaded(view)
