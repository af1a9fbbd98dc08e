"""Paged KV memory: block pool, prefix caches (hash and radix) and the manager in front.

`KVCacheManager` is the only entry point the scheduler needs; `KVEventIndex` and
`hash_token_blocks` are what an external router needs (no torch involved).
"""

from prefixserve.kv_cache.block_hasher import BlockHasher, hash_token_blocks
from prefixserve.kv_cache.block_pool import BlockPool, KVBlock
from prefixserve.kv_cache.cache_stats import CacheStats
from prefixserve.kv_cache.kv_cache_manager import ComputedBlocks, KVCacheManager
from prefixserve.kv_cache.kv_events import (
                                            AllBlocksCleared,
                                            BlockRemoved,
                                            BlockStored,
                                            KVEventIndex,
                                            KVEventLog,
                                            KVSnapshot,
)
from prefixserve.kv_cache.prefix_cache import (
                                            PREFIX_CACHES,
                                            PrefixCache,
                                            PrefixCacheConfig,
                                            register_prefix_cache,
)

__all__ = [
    "AllBlocksCleared", "BlockHasher", "BlockPool", "BlockRemoved", "BlockStored", "CacheStats",
    "ComputedBlocks", "KVBlock", "KVCacheManager", "KVEventIndex", "KVEventLog", "KVSnapshot",
    "PREFIX_CACHES", "PrefixCache", "PrefixCacheConfig", "hash_token_blocks", "register_prefix_cache",
]
