"""Eviction policies for the radix prefix cache: which unlocked leaf goes first.

A policy maps a tree node to a sort key; the radix cache keeps its evictable leaves in a
min-heap on that key and evicts the smallest first. Times are ticks of the cache's logical
clock (one tick per operation), never wall time, so the order is deterministic.

    lru       oldest last access first
    lfu       fewest hits first, then oldest access
    slru      probationary segment (< 2 hits) before the protected one, oldest access first
    fifo      oldest creation first
    mru       newest access first
    filo      newest creation first
    priority  lowest request priority first, then oldest access

Hit counts grow when a request admits a cached path (not on every lookup); a node's priority
is the highest `Request.priority` of the requests that inserted or used it (as in SGLang: a
higher number is more important and is kept longer).

This module knows nothing about blocks, requests or the tree's shape: it only orders nodes.
"""

from __future__ import annotations

from typing import ClassVar, Protocol


class EvictionCandidate(Protocol):
    """What a policy may read from a node."""

    last_access_time: int
    creation_time: int
    hit_count: int
    priority: int


class EvictionPolicy:
    """Base class: `sort_key(node)`, smallest evicted first. Subclasses register by `name`."""

    name: ClassVar[str] = ""

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {}


def register_eviction_policy(cls: type[EvictionPolicy]) -> type[EvictionPolicy]:
    EVICTION_POLICIES[cls.name] = cls
    return cls


def make_eviction_policy(name: str) -> EvictionPolicy:
    """The policy registered under `name` (lru | lfu | slru | fifo | mru | filo | priority)."""
    try:
        return EVICTION_POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown eviction_policy {name!r}; choose one of "
                         f"{sorted(EVICTION_POLICIES)}") from None


@register_eviction_policy
class LRUPolicy(EvictionPolicy):
    """Least recently used first."""

    name = "lru"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (node.last_access_time,)


@register_eviction_policy
class LFUPolicy(EvictionPolicy):
    """Fewest hits first; ties go to the least recently used."""

    name = "lfu"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (node.hit_count, node.last_access_time)


@register_eviction_policy
class FIFOPolicy(EvictionPolicy):
    """Oldest creation first."""

    name = "fifo"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (node.creation_time,)


@register_eviction_policy
class MRUPolicy(EvictionPolicy):
    """Most recently used first."""

    name = "mru"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (-node.last_access_time,)


@register_eviction_policy
class FILOPolicy(EvictionPolicy):
    """Newest creation first."""

    name = "filo"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (-node.creation_time,)


@register_eviction_policy
class PriorityPolicy(EvictionPolicy):
    """Lowest request priority first, then least recently used."""

    name = "priority"

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        return (node.priority, node.last_access_time)


@register_eviction_policy
class SLRUPolicy(EvictionPolicy):
    """Segmented LRU: nodes hit `protected_threshold` times or more are evicted last."""

    name = "slru"

    def __init__(self, protected_threshold: int = 2) -> None:
        if protected_threshold < 1:
            raise ValueError(f"slru protected_threshold must be >= 1, got {protected_threshold}")
        self.protected_threshold = protected_threshold

    def sort_key(self, node: EvictionCandidate) -> tuple[int, ...]:
        protected = 1 if node.hit_count >= self.protected_threshold else 0
        return (protected, node.last_access_time)
