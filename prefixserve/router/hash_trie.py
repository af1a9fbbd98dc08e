"""A trie over fixed-size character chunks of prompts, each node naming the workers sent them.

production-stack's `HashTrie`: the prompt is cut into `chunk_chars`-character chunks, each
chunk hashed with xxhash64; the trie path gives the prefix semantics (a chunk's node is only
reached through the chunks before it). A node records every worker that was routed a prompt
passing through it. There is no eviction feedback from workers: the trie is an
approximation of their caches. `max_nodes` caps memory by dropping least recently used
leaves (production-stack PR #711 asks for such a cap).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection

import xxhash


class _TrieNode:
    __slots__ = ("children", "parent", "key", "workers", "tick")

    def __init__(self, parent: _TrieNode | None, key: int, tick: int) -> None:
        self.children: dict[int, _TrieNode] = {}
        self.parent = parent
        self.key = key
        self.workers: set[str] = set()
        self.tick = tick


class HashTrie:
    def __init__(self, chunk_chars: int = 128, max_nodes: int = 0) -> None:
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be >= 1, got {chunk_chars}")
        self.chunk_chars = chunk_chars
        self.max_nodes = max_nodes  # 0 = unbounded
        self.root = _TrieNode(None, 0, 0)
        self.num_nodes = 0
        self._ticks = itertools.count(1)

    def chunk_hashes(self, text: str) -> list[int]:
        n = self.chunk_chars
        return [xxhash.xxh64_intdigest(text[i:i + n].encode()) for i in range(0, len(text), n)]

    def match(self, hashes: list[int], eligible: Collection[str] | None = None
              ) -> tuple[int, set[str]]:
        """(chunks matched, workers holding all of them); `eligible=None` means everyone."""
        node, depth, holders = self.root, 0, set()
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                break
            workers = child.workers if eligible is None else child.workers.intersection(eligible)
            if not workers:
                break
            node, depth, holders = child, depth + 1, workers
        return depth, holders

    def insert(self, hashes: list[int], worker: str) -> None:
        tick = next(self._ticks)
        node = self.root
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                child = node.children[h] = _TrieNode(node, h, tick)
                self.num_nodes += 1
            child.workers.add(worker)
            child.tick = tick
            node = child
        if self.max_nodes and self.num_nodes > self.max_nodes:
            self.evict(int(self.max_nodes * 0.9))

    def remove_worker(self, worker: str) -> None:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            node.workers.discard(worker)
            stack.extend(node.children.values())
            if not node.workers and not node.children:
                self._unlink(node)

    def evict(self, target_nodes: int) -> None:
        """Drop least recently used leaves until at most `target_nodes` remain."""
        heap = [(n.tick, id(n), n) for n in self._leaves()]
        heapq.heapify(heap)
        while heap and self.num_nodes > target_nodes:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            self._unlink(node)
            if parent is not None and parent is not self.root and not parent.children:
                heapq.heappush(heap, (parent.tick, id(parent), parent))

    def _leaves(self) -> list[_TrieNode]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out

    def _unlink(self, node: _TrieNode) -> None:
        if node.parent is not None and node.parent.children.get(node.key) is node:
            del node.parent.children[node.key]
            self.num_nodes -= 1 + self._count(node)

    def _count(self, node: _TrieNode) -> int:
        total, stack = 0, list(node.children.values())
        while stack:
            n = stack.pop()
            total += 1
            stack.extend(n.children.values())
        return total
