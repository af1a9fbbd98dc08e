"""HashPrefixCache: vLLM-style automatic prefix caching over chained block hashes.

A request's full blocks carry chained hashes (`BlockHasher`), so a flat `hash -> block` map
in the `BlockPool` is the whole index: a hit walks `request.block_hashes` left to right
and stops at the first miss (a miss means no later block can hit, because every hash
commits to its whole prefix). Eviction is the pool's LRU free queue, applied lazily when
a free-but-cached block is popped for reuse. This module knows nothing about the
scheduler or block tables beyond what the `PrefixCache` interface passes in.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import TYPE_CHECKING

from prefixserve.kv_cache.block_hasher import BlockHasher
from prefixserve.kv_cache.block_pool import BlockPool
from prefixserve.kv_cache.prefix_cache import PREFIX_CACHES, PrefixCache, PrefixCacheConfig

if TYPE_CHECKING:
    from prefixserve.request import Request


class HashPrefixCache(PrefixCache):
    """Block-hash prefix cache with LRU lazy eviction (vLLM V1 APC)."""

    def __init__(self, pool: BlockPool, config: PrefixCacheConfig) -> None:
        super().__init__(pool, config)
        if config.eviction_policy != "lru":
            raise ValueError(f"prefix_cache='hash' evicts in LRU order only; use "
                             f"prefix_cache='radix' for eviction_policy={config.eviction_policy!r}")
        self.hasher = BlockHasher(config.block_size, config.hash_algo, config.hash_seed)

    def match(self, request: Request) -> list[int]:
        self.hasher.update(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        get = self.pool.cached.get
        hit = []
        for h in islice(request.block_hashes, max_blocks):
            block = get(h)
            if block is None:
                break
            hit.append(block.block_id)
        return hit

    def hit_is_valid(self, request: Request, block_ids: list[int]) -> bool:
        blocks = self.pool.blocks
        return [blocks[b].block_hash for b in block_ids] == request.block_hashes[:len(block_ids)]

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def num_evictable(self, block_ids: list[int]) -> int:
        blocks = self.pool.blocks
        return sum(1 for b in block_ids if blocks[b].ref_cnt == 0)

    def acquire(self, request: Request, block_ids: list[int]) -> None:
        blocks = self.pool.blocks
        self.pool.touch(blocks[b] for b in block_ids)

    def allocate(self, num_blocks: int) -> list[int]:
        return [b.block_id for b in self.pool.get_new_blocks(num_blocks)]

    def cache_blocks(self, request: Request, block_ids: list[int], start: int, end: int) -> None:
        self.hasher.update(request)
        blocks = self.pool.blocks
        new_full = [blocks[b] for b in block_ids[start:end]]
        self.pool.cache_full_blocks(request, new_full, start, end, self.block_size)

    def release(self, request: Request, block_ids: list[int]) -> None:
        blocks = self.pool.blocks
        self.pool.free_blocks(blocks[b] for b in reversed(block_ids))

    def reset(self) -> bool:
        return self.pool.reset()

    @property
    def num_cached_blocks(self) -> int:
        return self.pool.num_cached_blocks

    @property
    def num_evictions(self) -> int:
        return self.pool.num_evictions

    def check_invariants(self, table_refs: Counter[int]) -> None:
        super().check_invariants(table_refs)
        for block in self.pool.blocks:
            assert block.ref_cnt == table_refs[block.block_id], (
                f"block {block.block_id}: ref_cnt {block.ref_cnt} but held by "
                f"{table_refs[block.block_id]} block tables")


PREFIX_CACHES["hash"] = HashPrefixCache
