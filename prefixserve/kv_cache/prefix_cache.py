"""PrefixCache: the interface every prefix cache implements, and the registry of them.

`KVCacheManager` owns the `BlockPool` and the request block tables and does all the
bookkeeping the caches share (token ranges, all-or-nothing allocation, stats). It asks the
prefix cache only the questions that differ between vLLM-style hashing and an SGLang-style
radix tree. One allocation, as the manager runs it:

    hit = cache.match(req)                                   # get_computed_blocks
    if need_new + cache.num_evictable(hit) > cache.num_free_blocks: return None
    cache.acquire(req, hit)                                  # pin the hit
    new = cache.allocate(need_new)                           # may evict
    cache.cache_blocks(req, table, start, end)               # blocks just made full
    ...
    cache.release(req, table)                                # free(req)

Ref counts live on the pool's blocks. A cache may hold its own ref on blocks it keeps
alive (the radix tree does); `check_invariants(table_refs)` receives, per block id, how
many request tables hold it, so each cache can check `ref_cnt == table refs + its own`.

Register a cache with `PREFIX_CACHES["name"] = Class` (or `register_prefix_cache`); the
manager looks up `prefix_cache=` there. "none" is the plain paged allocator used when
caching is disabled. This module knows nothing about hashing or trees.
"""

from __future__ import annotations

import importlib
import importlib.util
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefixserve.kv_cache.block_pool import BlockPool

if TYPE_CHECKING:
    from prefixserve.request import Request

HASH_ALGOS = ("sha256", "xxhash")
EVICTION_POLICIES = ("lru", "lfu", "slru", "fifo", "mru", "filo", "priority")


@dataclass(frozen=True)
class PrefixCacheConfig:
    """Options every prefix cache is built with; each cache uses the ones it needs."""

    block_size: int
    hash_algo: str = "sha256"
    hash_seed: int | str = 0
    eviction_policy: str = "lru"

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {self.block_size!r}")
        if self.hash_algo not in HASH_ALGOS:
            raise ValueError(f"hash_algo must be one of {HASH_ALGOS}, got {self.hash_algo!r}")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {EVICTION_POLICIES}, "
                             f"got {self.eviction_policy!r}")


class PrefixCache(ABC):
    """What the manager asks of a prefix cache. All block arguments are block ids."""

    def __init__(self, pool: BlockPool, config: PrefixCacheConfig) -> None:
        self.pool = pool
        self.config = config
        self.block_size = config.block_size

    @abstractmethod
    def match(self, request: Request) -> list[int]:
        """Block ids of the longest cached prefix of `request`, covering at most
        `(request.num_tokens - 1) // block_size` whole blocks. Must not change ref counts
        (the scheduler may walk away); restructuring (a radix split) is allowed."""

    def hit_is_valid(self, request: Request, block_ids: list[int]) -> bool:
        """Whether a `match` result still holds (nothing evicted it since). The manager
        refuses (returns None from allocate_slots) a stale hit instead of using it."""
        return True

    @property
    @abstractmethod
    def num_free_blocks(self) -> int:
        """How many blocks `allocate` could hand out right now, evicting as needed."""

    @abstractmethod
    def num_evictable(self, block_ids: list[int]) -> int:
        """How many of these matched blocks currently count in `num_free_blocks`
        (acquiring them takes them out of it)."""

    @abstractmethod
    def acquire(self, request: Request, block_ids: list[int]) -> None:
        """Pin matched blocks for `request` (ref +1; lock tree nodes). They now belong to
        its block table and are released with it."""

    @abstractmethod
    def allocate(self, num_blocks: int) -> list[int]:
        """Take `num_blocks` fresh blocks (ref 1), evicting cached ones as needed. The
        caller has checked `num_blocks <= num_free_blocks`."""

    @abstractmethod
    def cache_blocks(self, request: Request, block_ids: list[int], start: int, end: int) -> None:
        """Blocks `block_ids[start:end]` of the request's table are now full of known
        tokens (`request.all_token_ids[:end * block_size]`): make them hittable.
        `block_ids` is the manager's live table: a cache may replace a duplicate block in
        place with its own copy (the radix tree does)."""

    @abstractmethod
    def release(self, request: Request, block_ids: list[int]) -> None:
        """The request is finished or preempted: drop its hold on its block table."""

    @abstractmethod
    def reset(self) -> bool:
        """Forget every cached prefix. Called only when no request holds blocks; return
        False if it still cannot be done."""

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose content can currently be hit."""
        return 0

    @property
    def num_evictions(self) -> int:
        """Cached blocks evicted so far."""
        return 0

    def free_block_ids(self) -> list[int]:
        """The pool's free queue, head (next reused) first."""
        return self.pool.free_block_ids()

    def check_invariants(self, table_refs: Counter[int]) -> None:
        """Raise AssertionError if the cache or pool is inconsistent. `table_refs[b]` is
        the number of request block tables holding block b."""
        self.pool.check_invariants()


class NoPrefixCache(PrefixCache):
    """Caching disabled: a plain paged allocator. Never hits, never caches."""

    def match(self, request: Request) -> list[int]:
        return []

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def num_evictable(self, block_ids: list[int]) -> int:
        return 0

    def acquire(self, request: Request, block_ids: list[int]) -> None:
        assert not block_ids, "NoPrefixCache never matches"

    def allocate(self, num_blocks: int) -> list[int]:
        return [b.block_id for b in self.pool.get_new_blocks(num_blocks)]

    def cache_blocks(self, request: Request, block_ids: list[int], start: int, end: int) -> None:
        pass

    def release(self, request: Request, block_ids: list[int]) -> None:
        blocks = self.pool.blocks
        self.pool.free_blocks(blocks[i] for i in reversed(block_ids))

    def reset(self) -> bool:
        return True

    def check_invariants(self, table_refs: Counter[int]) -> None:
        super().check_invariants(table_refs)
        assert not self.pool.cached, "caching is disabled but the hash map is not empty"
        for block in self.pool.blocks:
            assert block.ref_cnt == table_refs[block.block_id], (
                f"block {block.block_id}: ref_cnt {block.ref_cnt} != {table_refs[block.block_id]} tables")


PREFIX_CACHES: dict[str, type[PrefixCache]] = {"none": NoPrefixCache}


def register_prefix_cache(name: str, cls: type[PrefixCache]) -> None:
    PREFIX_CACHES[name] = cls


def prefix_cache_names() -> list[str]:
    # Import the built-in caches lazily so each module can register itself without cycles.
    for module in ("hash_prefix_cache", "radix_prefix_cache"):
        if importlib.util.find_spec(f"prefixserve.kv_cache.{module}") is not None:
            importlib.import_module(f"prefixserve.kv_cache.{module}")
    return sorted(PREFIX_CACHES)


def make_prefix_cache(name: str, pool: BlockPool, config: PrefixCacheConfig) -> PrefixCache:
    if name not in prefix_cache_names():
        raise ValueError(f"prefix_cache must be one of {sorted(PREFIX_CACHES)}, got {name!r}")
    return PREFIX_CACHES[name](pool, config)
