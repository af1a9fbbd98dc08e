"""RadixNode: one edge of the radix prefix cache, a run of whole KV blocks.

A node holds `len(block_ids)` blocks and the `len(block_ids) * block_size` token ids they
cover (`key`), the chained block hashes of those blocks (for KV events), its children keyed
by their first block's token ids, and what the eviction policy reads: logical access and
creation times, hit count and request priority. `lock_ref` counts the running requests whose
cached prefix runs through this node.

The node knows nothing about the block pool, requests or eviction order; the cache owns
those. `split(n)` is the one structural operation that lives here because it only moves
fields between two nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any

_node_ids = itertools.count()


class RadixNode:
    __slots__ = ("key", "block_ids", "block_hashes", "children", "parent", "child_key",
                 "lock_ref", "last_access_time", "creation_time", "hit_count", "priority",
                 "heap_version", "id")

    def __init__(self, key: list[int] | None = None, block_ids: list[int] | None = None,
                 block_hashes: list[Any] | None = None, parent: RadixNode | None = None,
                 child_key: Hashable = None, now: int = 0, priority: int = 0) -> None:
        self.key: list[int] = key if key is not None else []
        self.block_ids: list[int] = block_ids if block_ids is not None else []
        self.block_hashes: list[Any] = block_hashes if block_hashes is not None else []
        self.children: dict[Hashable, RadixNode] = {}
        self.parent = parent
        self.child_key = child_key          # this node's key in parent.children
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = priority
        self.heap_version = 0               # bumped on every heap push; older entries are stale
        self.id = next(_node_ids)

    @property
    def num_blocks(self) -> int:
        return len(self.block_ids)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def split(self, num_blocks: int, block_size: int, child_key_of_rest: Hashable) -> RadixNode:
        """Cut this edge after `num_blocks` blocks; return the new upper node.

        The new node takes the first `num_blocks` blocks and this node's place in its parent;
        this node keeps the rest and becomes the new node's only child. Both share the lock
        count (every request through the lower part runs through the upper part) and the
        policy fields (the upper part's blocks were created and used with the lower part's).
        """
        assert 0 < num_blocks < self.num_blocks, (num_blocks, self.num_blocks)
        cut = num_blocks * block_size
        upper = RadixNode(self.key[:cut], self.block_ids[:num_blocks],
                          self.block_hashes[:num_blocks], self.parent, self.child_key,
                          self.creation_time, self.priority)
        upper.last_access_time = self.last_access_time
        upper.hit_count = self.hit_count
        upper.lock_ref = self.lock_ref
        self.parent.children[self.child_key] = upper
        self.key = self.key[cut:]
        self.block_ids = self.block_ids[num_blocks:]
        self.block_hashes = self.block_hashes[num_blocks:]
        self.parent = upper
        self.child_key = child_key_of_rest
        upper.children[child_key_of_rest] = self
        return upper

    def path_blocks(self) -> list[int]:
        """All block ids from the root down to and including this node."""
        parts = []
        node: RadixNode | None = self
        while node is not None:
            parts.append(node.block_ids)
            node = node.parent
        return [b for part in reversed(parts) for b in part]

    def __repr__(self) -> str:
        head = list(self.key[:8])
        return (f"RadixNode(id={self.id}, blocks={self.block_ids}, key={head}"
                f"{'...' if len(self.key) > 8 else ''}, lock_ref={self.lock_ref})")
