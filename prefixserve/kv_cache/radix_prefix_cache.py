"""RadixPrefixCache: SGLang-style RadixAttention prefix cache over the shared block pool.

A radix tree over token ids whose edges hold runs of whole KV blocks (`block_size` tokens
each; `block_size=1` is token-level). Children are keyed by their first block's token ids,
and at the root also by the request's namespace (cache salt, LoRA id, multimodal hashes), so
different tenants get separate subtrees and never share a block. Example, block_size=2,
blocks named by id, `lock` = running requests whose cached prefix runs through the node:

    root
    ├── (ns=None, (1, 2)) ─ A  tokens [1 2 | 3 4]   blocks [0, 1]  lock 1
    │                       ├── (5, 6) ─ B  [5 6]          blocks [2]     lock 1  <- request R
    │                       └── (7, 8) ─ C  [7 8 | 9 9]    blocks [3, 4]  lock 0  (evictable)
    └── (ns="t1", (1, 2)) ─ D  tokens [1 2]         blocks [5]     lock 0  (other tenant)

R's block table is [0, 1, 2, p...]: the tree's blocks along root->A->B, then its private
blocks (the partial tail, or blocks not full yet). Matching [1 2 3 4 7 8 5 5 ...] walks A,
enters C, and splits C into C' [7 8] -> C'' [9 9] so that the hit [0, 1, 3] ends on a node.

Ownership. The tree holds one ref on each of its blocks (so they stay out of the pool's free
queue: unlike the hash cache, cached blocks are not "free"), and every request table holding
a tree block holds one more: `ref_cnt == 1 + lock_ref` for every tree block. A request's
private blocks have ref 1. Eviction drops the tree's ref, which returns the block to the
free queue. When a request's private blocks fill with tokens the tree already holds (two
requests computing the same content, or a recomputed last block), the tree's copy wins: the
request's table entry is switched to it and the duplicate freed.

Eviction takes whole unlocked leaves, smallest `EvictionPolicy.sort_key` first, from a lazy
min-heap (a leaf is pushed whenever it becomes evictable or its key changes; stale entries
are skipped by version); a parent whose last child goes becomes a candidate itself. Times
are ticks of a logical clock (one per operation), so eviction order is deterministic.

The cache knows nothing about scheduling or models; `KVCacheManager` owns the block tables
and calls `match / acquire / allocate / cache_blocks / release` (see `prefix_cache.py`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefixserve.kv_cache.block_hasher import BlockHasher
from prefixserve.kv_cache.block_pool import BlockPool
from prefixserve.kv_cache.eviction_policy import make_eviction_policy
from prefixserve.kv_cache.prefix_cache import PrefixCache, PrefixCacheConfig, register_prefix_cache
from prefixserve.kv_cache.radix_node import RadixNode

if TYPE_CHECKING:
    from prefixserve.request import Request

_HeapEntry = tuple[tuple[int, ...], int, int, RadixNode]  # (policy key, node id, version, node)


@dataclass(slots=True)
class _RequestPath:
    """The tree part of a running request's table: blocks[:num_blocks] = path to last_node."""

    last_node: RadixNode
    num_blocks: int


def _namespace(request: Request) -> Hashable:
    mm = request.mm_hashes
    mm_key = tuple(tuple(x) if isinstance(x, list) else x for x in mm) if mm else None
    if request.cache_salt is None and request.lora_id is None and mm_key is None:
        return None
    return (request.cache_salt, request.lora_id, mm_key)


class RadixPrefixCache(PrefixCache):
    """Radix tree of cached blocks with lock refs and policy-ordered leaf eviction."""

    def __init__(self, pool: BlockPool, config: PrefixCacheConfig) -> None:
        super().__init__(pool, config)
        self.policy = make_eviction_policy(config.eviction_policy)
        self.hasher = BlockHasher(config.block_size, config.hash_algo, config.hash_seed)
        self.clock = 0
        self._num_evictions = 0
        self._paths: dict[str, _RequestPath] = {}
        self._init_tree()

    def _init_tree(self) -> None:
        self.root = RadixNode()
        self._owner: dict[int, RadixNode] = {}   # tree block id -> node holding it
        self._heap: list[_HeapEntry] = []
        self._num_nodes = 0
        self.evictable_size = 0                  # blocks in unlocked nodes
        self.protected_size = 0                  # blocks in locked nodes

    # ---- PrefixCache interface -------------------------------------------------------------

    def match(self, request: Request) -> list[int]:
        self.clock += 1
        max_blocks = (request.num_tokens - 1) // self.block_size
        if max_blocks <= 0:
            return []
        _, block_ids = self._match_prefix(request.all_token_ids, max_blocks, _namespace(request))
        return block_ids

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks + self.evictable_size

    def num_evictable(self, block_ids: list[int]) -> int:
        node, n = self._node_ending_at(block_ids), 0
        while node is not self.root and node.lock_ref == 0:
            n += node.num_blocks
            node = node.parent
        return n

    def hit_is_valid(self, request: Request, block_ids: list[int]) -> bool:
        node = self._owner.get(block_ids[-1]) if block_ids else self.root
        return (node is not None and (not block_ids or node.block_ids[-1] == block_ids[-1])
                and node.path_blocks() == block_ids)

    def acquire(self, request: Request, block_ids: list[int]) -> None:
        assert request.request_id not in self._paths, f"{request.request_id} acquired twice"
        node = self._node_ending_at(block_ids)
        self._paths[request.request_id] = _RequestPath(node, len(block_ids))
        self._lock(node)
        while node is not self.root:
            self._access(node, request.priority, hit=True)
            node = node.parent
        blocks = self.pool.blocks
        self.pool.touch(blocks[b] for b in block_ids)

    def allocate(self, num_blocks: int) -> list[int]:
        short = num_blocks - self.pool.num_free_blocks
        if short > 0:
            self.evict(short)
        return [b.block_id for b in self.pool.get_new_blocks(num_blocks)]

    def cache_blocks(self, request: Request, block_ids: list[int], start: int, end: int) -> None:
        """Insert the request's newly full blocks below its path. Where the tree already holds
        a block for the same tokens, `block_ids[i]` is replaced in place by the tree's block
        and the request's duplicate is freed."""
        path = self._paths.get(request.request_id)
        if path is None:
            path = self._paths[request.request_id] = _RequestPath(self.root, 0)
        if end <= path.num_blocks:
            return
        self.clock += 1
        node = self._insert(request, block_ids, path.last_node, path.num_blocks, end)
        self._lock(node, stop=path.last_node)  # the path above it is locked already
        path.last_node, path.num_blocks = node, end

    def release(self, request: Request, block_ids: list[int]) -> None:
        path = self._paths.pop(request.request_id, None)
        if path is not None:
            self.clock += 1
            self._unlock(path.last_node)
        blocks = self.pool.blocks
        self.pool.free_blocks(blocks[b] for b in reversed(block_ids))

    def reset(self) -> bool:
        if self._paths or self.protected_size:
            return False
        blocks = self.pool.blocks
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            self.pool.free_blocks(blocks[b] for b in reversed(node.block_ids))
        self._init_tree()
        if self.pool.events is not None:
            self.pool.events.all_cleared()
        return True

    @property
    def num_cached_blocks(self) -> int:
        return len(self._owner)

    @property
    def num_evictions(self) -> int:
        return self._num_evictions

    def free_block_ids(self) -> list[int]:
        """What allocations take next, in order: the pool's free queue, then the evictable
        tree blocks in the order `evict` would free them (whole leaves in policy order, a
        parent once its last child is gone). Read-only: nothing is evicted."""
        order = self.pool.free_block_ids()
        heap = [(self.policy.sort_key(n), n.id, n) for n in self._nodes() if self._evictable_leaf(n)]
        heapq.heapify(heap)
        children_left: dict[int, int] = {}
        while heap:
            node = heapq.heappop(heap)[2]
            order.extend(reversed(node.block_ids))
            parent = node.parent
            if parent is self.root or parent.lock_ref:
                continue
            left = children_left.get(parent.id, len(parent.children)) - 1
            children_left[parent.id] = left
            if left == 0:
                heapq.heappush(heap, (self.policy.sort_key(parent), parent.id, parent))
        return order

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            yield node

    @staticmethod
    def _evictable_leaf(node: RadixNode) -> bool:
        return node.lock_ref == 0 and not node.children and node.parent is not None

    # ---- tree operations -------------------------------------------------------------------

    def evict(self, num_blocks: int) -> int:
        """Evict whole unlocked leaves in policy order until `num_blocks` blocks are freed
        (it may overshoot by part of one leaf); return how many were freed."""
        freed, heap = 0, self._heap
        while freed < num_blocks and heap:
            entry = heapq.heappop(heap)
            if self._is_candidate(entry):
                freed += self._remove_leaf(entry[3])
        return freed

    def _match_prefix(self, tokens: list[int], max_blocks: int,
                      ns: Hashable) -> tuple[RadixNode, list[int]]:
        """Longest cached whole-block prefix of tokens[:max_blocks * block_size]. Refreshes
        access times; hit counts wait for `acquire` (a scheduler may retry a lookup)."""
        bs, limit = self.block_size, max_blocks * self.block_size
        node, pos, block_ids = self.root, 0, []
        while pos + bs <= limit:
            child = node.children.get(self._child_key(node, tokens, pos, ns))
            if child is None:
                break
            n = self._common_blocks(child.key, tokens, pos, limit)
            if n < child.num_blocks:
                child = self._split(child, n)
            self._access(child, 0, hit=False)
            block_ids += child.block_ids
            pos += n * bs
            node = child
        return node, block_ids

    def _insert(self, request: Request, table: list[int], node: RadixNode, lo: int,
                hi: int) -> RadixNode:
        """Put table[lo:hi] under `node` (whose path covers table[:lo]); return the last node."""
        bs, tokens, ns = self.block_size, request.all_token_ids, _namespace(request)
        pos = lo
        while pos < hi:
            child = node.children.get(self._child_key(node, tokens, pos * bs, ns))
            if child is None:
                return self._add_leaf(node, request, table, pos, hi, ns)
            n = self._common_blocks(child.key, tokens, pos * bs, hi * bs)
            if n < child.num_blocks:
                child = self._split(child, n)
            self._adopt(table, pos, child)
            self._access(child, request.priority, hit=False)
            pos += n
            node = child
        return node

    def _add_leaf(self, parent: RadixNode, request: Request, table: list[int], lo: int,
                  hi: int, ns: Hashable) -> RadixNode:
        bs = self.block_size
        key = request.all_token_ids[lo * bs:hi * bs]
        block_ids = table[lo:hi]
        hashes = self._block_hashes(request, parent, lo, hi)
        leaf = RadixNode(key, block_ids, hashes, parent, self._child_key(parent, key, 0, ns),
                         self.clock, request.priority)
        parent.children[leaf.child_key] = leaf
        for b in block_ids:
            self._owner[b] = leaf
        self.pool.touch(self.pool.blocks[b] for b in block_ids)  # the tree's own ref
        self.evictable_size += len(block_ids)  # the caller locks it right away
        self._num_nodes += 1
        if self.pool.events is not None:
            parent_hash = parent.block_hashes[-1] if parent.block_hashes else None
            self.pool.events.block_stored(list(hashes), parent_hash, key, bs,
                                          request.cache_salt, request.lora_id)
        return leaf

    def _adopt(self, table: list[int], pos: int, node: RadixNode) -> None:
        """The request filled blocks the tree already holds: use the tree's, free its own."""
        blocks = self.pool.blocks
        duplicates = table[pos:pos + node.num_blocks]
        assert not set(duplicates) & set(node.block_ids), "a private block is already in the tree"
        table[pos:pos + node.num_blocks] = node.block_ids
        self.pool.touch(blocks[b] for b in node.block_ids)
        self.pool.free_blocks(blocks[b] for b in reversed(duplicates))

    def _split(self, node: RadixNode, num_blocks: int) -> RadixNode:
        bs = self.block_size
        upper = node.split(num_blocks, bs, tuple(node.key[num_blocks * bs:(num_blocks + 1) * bs]))
        for b in upper.block_ids:
            self._owner[b] = upper
        self._num_nodes += 1
        return upper

    def _remove_leaf(self, node: RadixNode) -> int:
        parent = node.parent
        del parent.children[node.child_key]
        node.parent = None
        node.heap_version += 1
        self._num_nodes -= 1
        n = node.num_blocks
        self.evictable_size -= n
        self._num_evictions += n
        for b in node.block_ids:
            del self._owner[b]
        blocks = self.pool.blocks
        self.pool.free_blocks(blocks[b] for b in reversed(node.block_ids))
        if self.pool.events is not None:
            self.pool.events.block_removed(list(node.block_hashes))
        self._push_if_evictable(parent)
        return n

    def _lock(self, node: RadixNode, stop: RadixNode | None = None) -> None:
        """lock_ref +1 from `node` up to the root, or up to (not including) ancestor `stop`."""
        stop = stop or self.root
        while node is not stop:
            if node.lock_ref == 0:
                self.evictable_size -= node.num_blocks
                self.protected_size += node.num_blocks
            node.lock_ref += 1
            node = node.parent

    def _unlock(self, node: RadixNode) -> None:
        while node is not self.root:
            assert node.lock_ref > 0, f"lock_ref of {node} would go negative"
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.evictable_size += node.num_blocks
                self.protected_size -= node.num_blocks
                self._push_if_evictable(node)
            node = node.parent

    def _access(self, node: RadixNode, priority: int, hit: bool) -> None:
        node.last_access_time = self.clock
        node.hit_count += hit
        node.priority = max(node.priority, priority)  # a high-priority user protects the path
        self._push_if_evictable(node)

    def _push_if_evictable(self, node: RadixNode) -> None:
        if node.lock_ref or node.children or node.parent is None:
            return
        node.heap_version += 1
        heapq.heappush(self._heap, (self.policy.sort_key(node), node.id, node.heap_version, node))
        if len(self._heap) > 2 * self._num_nodes + 64:
            self._heap = [e for e in self._heap if self._is_candidate(e)]
            heapq.heapify(self._heap)

    @staticmethod
    def _is_candidate(entry: _HeapEntry) -> bool:
        node = entry[3]
        return (entry[2] == node.heap_version and node.lock_ref == 0 and not node.children
                and node.parent is not None)

    # ---- helpers ---------------------------------------------------------------------------

    def _child_key(self, parent: RadixNode, tokens: list[int], pos: int, ns: Hashable) -> Hashable:
        first = tuple(tokens[pos:pos + self.block_size])
        return (ns, first) if parent is self.root else first

    def _common_blocks(self, key: list[int], tokens: list[int], pos: int, limit: int) -> int:
        """Whole blocks of `key` equal to tokens[pos:limit], from the start."""
        bs = self.block_size
        span = min(len(key), limit - pos)
        span -= span % bs
        if tokens[pos:pos + span] == key[:span]:
            return span // bs
        n = 1  # the child key already matched the first block
        while key[n * bs:(n + 1) * bs] == tokens[pos + n * bs:pos + (n + 1) * bs]:
            n += 1
        return n

    def _node_ending_at(self, block_ids: list[int]) -> RadixNode:
        if not block_ids:
            return self.root
        node = self._owner.get(block_ids[-1])
        assert node is not None and node.block_ids[-1] == block_ids[-1], (
            f"matched block {block_ids[-1]} is no longer the end of a cached node (evicted?)")
        return node

    def _block_hashes(self, request: Request, parent: RadixNode, lo: int, hi: int) -> list[Any]:
        """The hash-cache chain hashes of blocks lo..hi-1 (same format for routers); only
        events use them, so without an event log they are not computed."""
        if self.pool.events is None:
            return [None] * (hi - lo)
        if len(request.block_hashes) >= hi:
            return list(request.block_hashes[lo:hi])
        bs = self.block_size
        parent_hash = parent.block_hashes[-1] if parent.block_hashes else None
        return self.hasher.hash_tokens(request.all_token_ids[lo * bs:hi * bs], parent_hash, lo,
                                       request.cache_salt, request.lora_id, request.mm_hashes)

    def check_invariants(self, table_refs: Counter[int]) -> None:
        super().check_invariants(table_refs)
        expected_lock: Counter[int] = Counter()
        for rid, path in self._paths.items():
            depth, node = 0, path.last_node
            while node is not self.root:
                assert node.parent is not None, f"request {rid} holds an evicted node {node}"
                expected_lock[node.id] += 1
                depth += node.num_blocks
                node = node.parent
            assert depth == path.num_blocks, f"request {rid}: path has {depth} blocks, not {path.num_blocks}"
        bs, blocks = self.block_size, self.pool.blocks
        evictable = protected = num_nodes = 0
        seen: set[int] = set()
        candidates = {id(e[3]) for e in self._heap if self._is_candidate(e)}
        stack = [self.root]
        while stack:
            parent = stack.pop()
            for ck, node in parent.children.items():
                stack.append(node)
                num_nodes += 1
                first = ck[1] if parent is self.root else ck
                assert node.parent is parent and node.child_key == ck, f"{node}: broken parent link"
                assert first == tuple(node.key[:bs]), f"{node}: child key {ck} != its first block"
                assert node.num_blocks >= 1 and len(node.key) == node.num_blocks * bs
                assert len(node.block_hashes) == node.num_blocks, f"{node}: hash count"
                assert node.lock_ref == expected_lock[node.id], (
                    f"{node}: lock_ref {node.lock_ref}, running requests through it "
                    f"{expected_lock[node.id]}")
                if node.lock_ref:
                    protected += node.num_blocks
                else:
                    evictable += node.num_blocks
                    if node.is_leaf:
                        assert id(node) in candidates, f"evictable leaf {node} is not in the heap"
                for b in node.block_ids:
                    assert b not in seen, f"block {b} is held by two tree nodes"
                    seen.add(b)
                    assert self._owner.get(b) is node, f"block {b}: owner map disagrees"
                    assert blocks[b].ref_cnt == 1 + table_refs[b] == 1 + node.lock_ref, (
                        f"tree block {b}: ref_cnt {blocks[b].ref_cnt}, tables {table_refs[b]}, "
                        f"lock_ref {node.lock_ref}")
        assert len(seen) == len(self._owner), "owner map has blocks that are not in the tree"
        assert num_nodes == self._num_nodes, f"node count {self._num_nodes} != {num_nodes}"
        assert (evictable, protected) == (self.evictable_size, self.protected_size), (
            f"sizes: evictable {self.evictable_size} (real {evictable}), "
            f"protected {self.protected_size} (real {protected})")
        for block in blocks:
            if block.block_id not in seen:
                assert table_refs[block.block_id] <= 1, f"private block {block.block_id} is shared"
                assert block.ref_cnt == table_refs[block.block_id], (
                    f"block {block.block_id}: ref_cnt {block.ref_cnt} != tables {table_refs[block.block_id]}")
            assert block.block_hash is None, "the radix cache never hashes pool blocks"


register_prefix_cache("radix", RadixPrefixCache)
