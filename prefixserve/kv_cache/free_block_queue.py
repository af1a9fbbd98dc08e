"""FreeBlockQueue: the pool's free list, an intrusive doubly linked list of blocks.

The links live on the blocks themselves (`prev_free`, `next_free`), so removing a block from
the middle (a cache hit reviving a free-but-cached block) is O(1). Two sentinel nodes mean
every real node always has both neighbours, so no operation needs a branch for the ends.

    head sentinel <-> b3 <-> b7 <-> b1 <-> tail sentinel
                      ^ next reused (LRU)      ^ last freed (MRU)

The queue knows nothing about hashes, ref counts or requests: it only orders blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefixserve.kv_cache.block_pool import KVBlock


class FreeBlockQueue:
    """Blocks with ref count 0, head = next to reuse, tail = most recently freed."""

    def __init__(self, blocks: Iterable[KVBlock], sentinel_factory) -> None:
        self._head: KVBlock = sentinel_factory()
        self._tail: KVBlock = sentinel_factory()
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        self.append_n(blocks)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVBlock:
        block = self._head.next_free
        if block is self._tail:
            raise ValueError("No free blocks available")
        self._unlink(block)
        return block

    def popleft_n(self, n: int) -> list[KVBlock]:
        if n > self.num_free_blocks:
            raise ValueError(f"asked for {n} free blocks, only {self.num_free_blocks} available")
        out = []
        block = self._head.next_free
        for _ in range(n):
            out.append(block)
            nxt = block.next_free
            block.prev_free = block.next_free = None
            block = nxt
        self._head.next_free = block
        block.prev_free = self._head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVBlock) -> None:
        if block.prev_free is None or block.next_free is None:
            raise RuntimeError(f"block {block.block_id} is not in the free queue")
        self._unlink(block)

    def append(self, block: KVBlock) -> None:
        last = self._tail.prev_free
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_free_blocks += 1

    def append_n(self, blocks: Iterable[KVBlock]) -> None:
        last, n = self._tail.prev_free, 0
        for block in blocks:
            last.next_free = block
            block.prev_free = last
            last = block
            n += 1
        last.next_free = self._tail
        self._tail.prev_free = last
        self.num_free_blocks += n

    def prepend_n(self, blocks: list[KVBlock]) -> None:
        """Put blocks at the head, keeping their order (blocks[0] becomes the head)."""
        for block in reversed(blocks):
            self.appendleft(block)

    def remove_n(self, blocks: Iterable[KVBlock]) -> None:
        n = 0
        for block in blocks:
            prev, nxt = block.prev_free, block.next_free
            if prev is None or nxt is None:
                raise RuntimeError(f"block {block.block_id} is not in the free queue")
            prev.next_free = nxt
            nxt.prev_free = prev
            block.prev_free = block.next_free = None
            n += 1
        self.num_free_blocks -= n

    def appendleft(self, block: KVBlock) -> None:
        first = self._head.next_free
        first.prev_free = block
        block.next_free = first
        block.prev_free = self._head
        self._head.next_free = block
        self.num_free_blocks += 1

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head.next_free
        while block is not self._tail:
            yield block
            block = block.next_free

    def contains(self, block: KVBlock) -> bool:
        return block.prev_free is not None

    def check_links(self) -> None:
        """Walk both directions; raise AssertionError if links or the count disagree."""
        forward = []
        prev, block = self._head, self._head.next_free
        while block is not None and block is not self._tail:
            assert block.prev_free is prev, f"block {block.block_id}: prev link broken"
            forward.append(block)
            assert len(forward) <= self.num_free_blocks, "free queue longer than its count (cycle?)"
            prev, block = block, block.next_free
        assert block is self._tail, "free queue does not end at the tail sentinel"
        assert self._tail.prev_free is prev, "tail sentinel's prev link broken"
        assert len(forward) == self.num_free_blocks, (
            f"free queue holds {len(forward)} blocks, count says {self.num_free_blocks}")

    def _unlink(self, block: KVBlock) -> None:
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1
