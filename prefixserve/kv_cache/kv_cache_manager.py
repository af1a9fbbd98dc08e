"""KVCacheManager: the scheduler's only door to KV memory.

It owns the `BlockPool`, each request's block table and the prefix cache chosen by name
(`prefix_cache="hash"` vLLM-style, `"radix"` SGLang-style, see `PREFIX_CACHES`). The
region of a request's tokens that one `allocate_slots` call covers:

    | computed (hit or earlier steps) | new: n tokens | (not yet scheduled)
    0                         num_computed      num_computed + n

Blocks for the new tokens are allocated all-or-nothing (None: nothing changed), and every
block those tokens fill completely with known token ids becomes cached at once, so a
second request in the same step, or the next chat turn, hits it. The manager never
advances `num_computed_tokens` itself; the scheduler does after the step. It knows nothing
about models, attention or scheduling order.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from prefixserve.kv_cache.block_pool import BlockPool
from prefixserve.kv_cache.cache_stats import CacheCounters, CacheStats
from prefixserve.kv_cache.kv_events import KVEventLog
from prefixserve.kv_cache.prefix_cache import (
    PrefixCacheConfig,
    make_prefix_cache,
    prefix_cache_names,
)
from prefixserve.request import Request


class ComputedBlocks(NamedTuple):
    """A prefix-cache hit: the blocks and how many tokens they cover."""

    block_ids: list[int]
    num_tokens: int


_NO_HIT = ComputedBlocks([], 0)


class KVCacheManager:
    """Paged KV block allocator with automatic prefix caching."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True,
                 prefix_cache: str = "hash", hash_algo: str = "sha256",
                 eviction_policy: str = "lru", hash_seed: int | str = 0,
                 enable_kv_events: bool = False, kv_events_ring_size: int = 10_000,
                 free_unhashed_to_head: bool = False) -> None:
        if prefix_cache not in prefix_cache_names():
            raise ValueError(f"prefix_cache must be one of {prefix_cache_names()}, got {prefix_cache!r}")
        self.config = PrefixCacheConfig(block_size, hash_algo, hash_seed, eviction_policy)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.prefix_cache_name = prefix_cache if enable_caching else "none"
        self.events = KVEventLog(kv_events_ring_size) if enable_kv_events and enable_caching else None
        self.pool = BlockPool(num_blocks, self.events, free_unhashed_to_head and enable_caching)
        self.cache = make_prefix_cache(self.prefix_cache_name, self.pool, self.config)
        self.req_to_blocks: dict[str, list[int]] = {}
        self.num_cached_blocks_of: dict[str, int] = {}  # table prefix already offered to the cache
        self.counters = CacheCounters()

    # -- lookups -------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> ComputedBlocks:
        """The longest cached prefix of a new request; at least its last token stays to
        compute. No side effects: pass the result to `allocate_slots` or drop it."""
        if not self.enable_caching:
            return _NO_HIT
        block_ids = self.cache.match(request)
        return ComputedBlocks(block_ids, len(block_ids) * self.block_size)

    def block_ids(self, request: Request) -> list[int]:
        return list(self.req_to_blocks.get(request.request_id, ()))

    def free_block_ids(self) -> list[int]:
        return self.cache.free_block_ids()

    @property
    def num_free_blocks(self) -> int:
        return self.cache.num_free_blocks

    def usage(self) -> float:
        """Fraction of blocks held by requests (reclaimable cached blocks count as free)."""
        return 1.0 - self.cache.num_free_blocks / self.num_blocks

    @property
    def num_evictions(self) -> int:
        return self.cache.num_evictions

    @property
    def stats(self) -> CacheStats:
        c, free = self.counters, self.cache.num_free_blocks
        return CacheStats(c.requests, c.queries, c.hits, c.preempted_requests,
                          c.preempted_queries, c.preempted_hits, self.cache.num_evictions,
                          self.num_blocks, self.num_blocks - free, self.cache.num_cached_blocks, free)

    # -- allocation ----------------------------------------------------------------------

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       hit: ComputedBlocks | None = None) -> list[int] | None:
        """Room for tokens [num_computed, num_computed + num_new_tokens), num_computed being
        `hit.num_tokens` for a new request and `request.num_computed_tokens` otherwise.
        Returns the newly allocated block ids, or None (out of blocks, or a stale hit)
        with nothing changed."""
        rid, bs = request.request_id, self.block_size
        table = self.req_to_blocks.get(rid)
        is_new = table is None
        hit_ids = hit.block_ids if hit is not None else []
        if is_new:
            num_computed = hit.num_tokens if hit is not None else request.num_computed_tokens
            table = []
        else:
            if hit_ids:
                raise ValueError(f"request {rid} already holds blocks; pass a hit only on its first allocation")
            num_computed = request.num_computed_tokens
        total = num_computed + num_new_tokens
        num_new_blocks = max(0, -(-total // bs) - len(table) - len(hit_ids))
        if hit_ids:
            if not self.cache.hit_is_valid(request, hit_ids):
                return None
            if num_new_blocks + self.cache.num_evictable(hit_ids) > self.cache.num_free_blocks:
                return None
        elif num_new_blocks > self.cache.num_free_blocks:
            return None

        if hit_ids:
            self.cache.acquire(request, hit_ids)
        new_ids = self.cache.allocate(num_new_blocks) if num_new_blocks else []
        table.extend(hit_ids)
        first_new = len(table)
        table.extend(new_ids)
        if is_new:
            self.req_to_blocks[rid] = table
            self.num_cached_blocks_of[rid] = len(hit_ids)
            self._record_new(request, len(hit_ids) * bs)
        if self.enable_caching:
            start = self.num_cached_blocks_of[rid]
            end = min(total, request.num_tokens) // bs
            if end > start:
                self.cache.cache_blocks(request, table, start, end)
                self.num_cached_blocks_of[rid] = end
        return table[first_new:]  # cache_blocks may swap in the tree's copy of a duplicate

    def free(self, request: Request) -> None:
        """Release the request's blocks (finished or preempted); cached ones stay hittable."""
        table = self.req_to_blocks.pop(request.request_id, None)
        self.num_cached_blocks_of.pop(request.request_id, None)
        if table is not None:
            self.cache.release(request, table)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix; refused (False) while any request holds blocks."""
        if any(self.req_to_blocks.values()):
            return False
        return self.cache.reset()

    def check_invariants(self) -> None:
        """Raise AssertionError if any block, table, map or queue is inconsistent."""
        table_refs: Counter[int] = Counter()
        for rid, table in self.req_to_blocks.items():
            assert len(set(table)) == len(table), f"request {rid} holds a block twice: {table}"
            assert all(0 <= b < self.num_blocks for b in table), f"request {rid}: bad block id"
            assert self.num_cached_blocks_of[rid] <= len(table), f"request {rid}: cached past its table"
            table_refs.update(table)
        self.cache.check_invariants(table_refs)
        assert 0 <= self.cache.num_free_blocks <= self.num_blocks

    def _record_new(self, request: Request, num_hit_tokens: int) -> None:
        if request.num_cached_tokens < 0:
            request.num_cached_tokens = num_hit_tokens
        self.counters.record(request.num_tokens, num_hit_tokens, request.num_preemptions > 0)
