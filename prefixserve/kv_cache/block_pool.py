"""BlockPool: every KV block, its ref count, the free queue and the hash -> block map.

Blocks are numbered 0 .. num_blocks-1 and all usable. A block is in exactly one state:

    in use        ref_cnt > 0, not in the free queue (hashed or not)
    free-cached   ref_cnt == 0, in the free queue, hashed: still hittable (lazy eviction)
    free-uncached ref_cnt == 0, in the free queue, no hash

`get_new_blocks` pops from the queue head; popping a hashed block evicts it from the map
(and emits `BlockRemoved`). `touch` revives hit blocks (ref +1, out of the queue in O(1)).
`free_blocks` appends blocks reaching ref 0 to the tail in the order given (the manager
passes a block table reversed, so a chain's tail is reused first); with
`free_unhashed_to_head`, blocks without a hash go to the head instead (vLLM PR #42656). When two requests
compute the same content at once, the first block stays in the map and the duplicate stays
unhashed, so it is freed as a plain block.

The pool does not compute hashes (they come precomputed in `request.block_hashes`) and does
not know about block tables; the radix cache uses it only as a ref-counted allocator.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixserve.kv_cache.free_block_queue import FreeBlockQueue
from prefixserve.kv_cache.kv_events import KVEventLog

if TYPE_CHECKING:
    from prefixserve.request import Request


@dataclass(slots=True, eq=False)
class KVBlock:
    """One physical KV block: `block_size` token slots in every layer's cache."""

    block_id: int
    ref_cnt: int = 0
    block_hash: Any = None  # set only while the block is full and in the hash map
    prev_free: KVBlock | None = None
    next_free: KVBlock | None = None

    def __repr__(self) -> str:
        return f"KVBlock(id={self.block_id}, ref={self.ref_cnt}, hashed={self.block_hash is not None})"


class BlockPool:
    """Ref-counted block allocator with an LRU free queue and a hash map of cached blocks."""

    def __init__(self, num_blocks: int, events: KVEventLog | None = None,
                 free_unhashed_to_head: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks, lambda: KVBlock(-1))
        self.cached: dict[Any, KVBlock] = {}
        self.events = events
        # vLLM PR #42656: a freed block with no hash is worthless to keep, so reuse it
        # first instead of letting it push cached blocks out of the LRU order.
        self.free_unhashed_to_head = free_unhashed_to_head
        self.num_evictions = 0

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached)

    def usage(self) -> float:
        """Fraction of blocks held by a request (free-cached blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def free_block_ids(self) -> list[int]:
        return [b.block_id for b in self.free_queue]

    def get_cached_block(self, block_hash: Any) -> KVBlock | None:
        return self.cached.get(block_hash)

    def get_new_blocks(self, n: int) -> list[KVBlock]:
        """Pop n blocks from the queue head with ref 1, evicting any that were cached."""
        blocks = self.free_queue.popleft_n(n)
        evicted = []
        for block in blocks:
            if block.block_hash is not None:
                evicted.append(self._evict(block))
            block.ref_cnt = 1
        if evicted:
            self.num_evictions += len(evicted)
            if self.events is not None:
                self.events.block_removed(evicted)
        return blocks

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """A hit: ref +1, and out of the free queue if the block was free."""
        revived = []
        for block in blocks:
            if block.ref_cnt == 0:
                revived.append(block)
            block.ref_cnt += 1
        if revived:
            self.free_queue.remove_n(revived)

    def free_blocks(self, ordered_blocks: Iterable[KVBlock]) -> None:
        """Ref -1; blocks reaching 0 go to the queue tail in the given order, hash kept."""
        freed = []
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                freed.append(block)
        if self.free_unhashed_to_head:
            self.free_queue.prepend_n([b for b in freed if b.block_hash is None])
            freed = [b for b in freed if b.block_hash is not None]
        self.free_queue.append_n(freed)

    def cache_full_blocks(self, request: Request, blocks: list[KVBlock], start: int, end: int,
                          block_size: int) -> None:
        """Put the request's blocks number start..end-1 (given as `blocks`, full, hashes in
        request.block_hashes) into the hash map."""
        hashes = request.block_hashes
        cached = self.cached
        run_start = -1  # first block index of the current run of newly stored blocks
        for i in range(start, end):
            block, h = blocks[i - start], hashes[i]
            stored = block.block_hash is None and h not in cached
            if stored:
                block.block_hash = h
                cached[h] = block
                if run_start < 0:
                    run_start = i
            if (not stored or i == end - 1) and run_start >= 0 and self.events is not None:
                self._emit_stored(request, run_start, i + 1 if stored else i, block_size)
            if not stored:
                run_start = -1

    def reset(self) -> bool:
        """Forget every cached hash; refused (False) while any block is in use."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.cached.values():
            block.block_hash = None
        self.cached = {}
        if self.events is not None:
            self.events.all_cleared()
        return True

    def check_invariants(self) -> None:
        self.free_queue.check_links()
        in_queue = {id(b) for b in self.free_queue}
        for block in self.blocks:
            assert block.ref_cnt >= 0, f"block {block.block_id} has ref_cnt {block.ref_cnt}"
            assert (block.ref_cnt == 0) == (id(block) in in_queue), (
                f"block {block.block_id}: ref_cnt {block.ref_cnt} but in_queue={id(block) in in_queue}")
            if block.block_hash is not None:
                assert self.cached.get(block.block_hash) is block, (
                    f"block {block.block_id} is hashed but the map does not point to it")
        for h, block in self.cached.items():
            assert block.block_hash == h, f"map entry for block {block.block_id} has a stale hash"

    def _evict(self, block: KVBlock) -> Any:
        h = block.block_hash
        del self.cached[h]
        block.block_hash = None
        return h

    def _emit_stored(self, request: Request, lo: int, hi: int, block_size: int) -> None:
        parent = request.block_hashes[lo - 1] if lo > 0 else None
        self.events.block_stored(list(request.block_hashes[lo:hi]), parent,
                                 request.all_token_ids[lo * block_size:hi * block_size],
                                 block_size, request.cache_salt, request.lora_id)
