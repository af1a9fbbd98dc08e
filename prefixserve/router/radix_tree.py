"""An approximate, multi-tenant radix tree over prompt characters (SGLang router's tree).

One tree for all workers ("tenants"). Each node holds a run of characters and the tenants
that were routed a prompt passing through it, with a logical access time per tenant:

    root ── "You are a helpful" {w0: 7, w1: 9}
              ├── " assistant. Hi" {w0: 7}
              └── " pirate. Arr"   {w1: 9}

Tenants of a child are always a subset of its parent's (inserts attach along the whole
path; eviction removes a tenant from leaves first), so a match walks down while the node has
an eligible tenant. `total_chars` counts characters once per tenant holding them and is kept
under a global budget by evicting least recently used (leaf, tenant) pairs; SGLang's
per-tenant budget let memory grow with the fleet (SMG PR #2137). The tree knows nothing of
loads or health; the workers' real caches are only approximated by what was routed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection


class _RadixNode:
    __slots__ = ("children", "parent", "text", "tenants")

    def __init__(self, parent: _RadixNode | None, text: str) -> None:
        self.children: dict[str, _RadixNode] = {}  # first character -> child
        self.parent = parent
        self.text = text
        self.tenants: dict[str, int] = {}  # tenant -> last access tick


def common_prefix_len(edge: str, text: str, start: int) -> int:
    """Length of the common prefix of `edge` and `text[start:]` (C-speed slice compares)."""
    n = min(len(edge), len(text) - start)
    if text.startswith(edge[:n], start):
        return n
    lo, hi = 0, n - 1  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text.startswith(edge[:mid], start):
            lo = mid
        else:
            hi = mid - 1
    return lo


class ApproxRadixTree:
    def __init__(self) -> None:
        self.root = _RadixNode(None, "")
        self.tenant_chars: dict[str, int] = {}
        self.total_chars = 0
        self._ticks = itertools.count(1)

    def insert(self, text: str, tenant: str) -> None:
        tick = next(self._ticks)
        node, i = self.root, 0
        self._attach(node, tenant, tick)
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                child = node.children[text[i]] = _RadixNode(node, text[i:])
                self._attach(child, tenant, tick)
                return
            k = common_prefix_len(child.text, text, i)
            if k < len(child.text):
                child = self._split(child, k)
            self._attach(child, tenant, tick)
            node, i = child, i + k

    def match(self, text: str, eligible: Collection[str] | None = None
              ) -> tuple[int, list[str]]:
        """(characters matched, eligible tenants holding all of them)."""
        node, i, holders = self.root, 0, []
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            tenants = (list(child.tenants) if eligible is None
                       else [t for t in child.tenants if t in eligible])
            if not tenants:
                break
            k = common_prefix_len(child.text, text, i)
            node, i, holders = child, i + k, tenants
            if k < len(child.text):
                break
        return i, holders

    def remove_tenant(self, tenant: str) -> None:
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.tenants.pop(tenant, None) is not None:
                self.total_chars -= len(node.text)
            stack.extend(node.children.values())
            if not node.tenants and node is not self.root:
                self._unlink(node)
        self.tenant_chars.pop(tenant, None)

    def evict(self, max_chars: int) -> None:
        """Remove least recently used (leaf, tenant) pairs until `total_chars <= max_chars`."""
        if self.total_chars <= max_chars:
            return
        heap = [(tick, id(node), tenant, node) for node in self._nodes()
                for tenant, tick in node.tenants.items() if self._is_leaf_for(node, tenant)]
        heapq.heapify(heap)
        while heap and self.total_chars > max_chars:
            _, _, tenant, node = heapq.heappop(heap)
            if tenant not in node.tenants or not self._is_leaf_for(node, tenant):
                continue
            del node.tenants[tenant]
            self.total_chars -= len(node.text)
            self.tenant_chars[tenant] -= len(node.text)
            parent = node.parent
            if not node.tenants:
                self._unlink(node)
            if parent is not None and parent is not self.root and tenant in parent.tenants \
                    and self._is_leaf_for(parent, tenant):
                heapq.heappush(heap, (parent.tenants[tenant], id(parent), tenant, parent))

    def check_invariants(self) -> None:
        total, per_tenant = 0, {}
        for node in self._nodes():
            assert node.tenants, "a node without tenants must be removed"
            assert node.parent is not None and node.parent.children[node.text[0]] is node
            if node.parent is not self.root:
                assert set(node.tenants) <= set(node.parent.tenants), "child tenants ⊆ parent's"
            total += len(node.text) * len(node.tenants)
            for t in node.tenants:
                per_tenant[t] = per_tenant.get(t, 0) + len(node.text)
        assert total == self.total_chars, (total, self.total_chars)
        assert all(self.tenant_chars.get(t, 0) == c for t, c in per_tenant.items())

    def _attach(self, node: _RadixNode, tenant: str, tick: int) -> None:
        if tenant not in node.tenants:
            self.total_chars += len(node.text)
            self.tenant_chars[tenant] = self.tenant_chars.get(tenant, 0) + len(node.text)
        node.tenants[tenant] = tick

    def _split(self, child: _RadixNode, k: int) -> _RadixNode:
        """Cut `child` after k characters; the new upper node copies its tenants."""
        parent = child.parent
        assert parent is not None
        mid = _RadixNode(parent, child.text[:k])
        mid.tenants = dict(child.tenants)
        parent.children[mid.text[0]] = mid
        child.text = child.text[k:]
        child.parent = mid
        mid.children[child.text[0]] = child
        return mid

    def _is_leaf_for(self, node: _RadixNode, tenant: str) -> bool:
        return not any(tenant in c.tenants for c in node.children.values())

    def _unlink(self, node: _RadixNode) -> None:
        parent = node.parent
        if parent is not None and parent.children.get(node.text[0]) is node:
            del parent.children[node.text[0]]

    def _nodes(self) -> list[_RadixNode]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
