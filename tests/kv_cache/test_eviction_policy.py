"""Eviction policies: their sort keys, and which leaf each one evicts in the radix cache."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.eviction_policy import EVICTION_POLICIES, SLRUPolicy, make_eviction_policy
from prefixserve.kv_cache.prefix_cache import EVICTION_POLICIES as CONFIG_POLICIES
from prefixserve.request import Request


@dataclass
class Node:
    last_access_time: int = 0
    creation_time: int = 0
    hit_count: int = 0
    priority: int = 0


def test_every_configurable_policy_is_registered_once():
    assert sorted(EVICTION_POLICIES) == sorted(CONFIG_POLICIES)
    with pytest.raises(ValueError, match="unknown eviction_policy"):
        make_eviction_policy("clock")


@pytest.mark.parametrize("name, nodes, first", [
    ("lru", [Node(last_access_time=5), Node(last_access_time=3)], 1),
    ("mru", [Node(last_access_time=5), Node(last_access_time=3)], 0),
    ("fifo", [Node(creation_time=2), Node(creation_time=1)], 1),
    ("filo", [Node(creation_time=2), Node(creation_time=1)], 0),
    ("lfu", [Node(hit_count=1, last_access_time=1), Node(hit_count=0, last_access_time=9)], 1),
    ("lfu", [Node(hit_count=1, last_access_time=4), Node(hit_count=1, last_access_time=2)], 1),
    ("priority", [Node(priority=1, last_access_time=1), Node(priority=0, last_access_time=9)], 1),
    ("priority", [Node(priority=1, last_access_time=4), Node(priority=1, last_access_time=2)], 1),
    ("slru", [Node(hit_count=2, last_access_time=1), Node(hit_count=1, last_access_time=9)], 1),
])
def test_sort_key_puts_the_victim_first(name: str, nodes: list[Node], first: int):
    policy = make_eviction_policy(name)
    assert min(range(len(nodes)), key=lambda i: policy.sort_key(nodes[i])) == first


def test_slru_orders_probationary_old_new_then_protected_old_new():
    policy = SLRUPolicy()
    nodes = [Node(hit_count=3, last_access_time=8), Node(hit_count=0, last_access_time=5),
             Node(hit_count=2, last_access_time=1), Node(hit_count=1, last_access_time=2)]
    assert sorted(range(4), key=lambda i: policy.sort_key(nodes[i])) == [3, 1, 2, 0]
    assert SLRUPolicy(protected_threshold=5).sort_key(nodes[0])[0] == 0


# -- scenarios through KVCacheManager(prefix_cache="radix") ----------------------------------
# Each name is a 2-block leaf of its own (tokens [t t t t 0], block_size 2; the partial block
# is freed). "make" caches a leaf, "hit" runs the same prompt again (a hit of both blocks).
# The pool has room for every leaf plus 2 free blocks, so a final 3-block request evicts
# exactly one leaf; the test checks which.

LEAF = {"x": 1, "y": 2, "z": 3}


def _run(mgr: KVCacheManager, rid: str, tokens: list[int], priority: int = 0) -> None:
    r = Request(rid, tokens, priority=priority)
    hit = mgr.get_computed_blocks(r)
    assert mgr.allocate_slots(r, r.num_tokens - hit.num_tokens, hit) is not None
    r.num_computed_tokens = r.num_tokens
    mgr.check_invariants()
    mgr.free(r)
    mgr.check_invariants()


def _victim(policy: str, ops: list[tuple[str, str, int]]) -> str:
    names = {name for _, name, _ in ops}
    mgr = KVCacheManager(num_blocks=2 * len(names) + 2, block_size=2, prefix_cache="radix",
                         eviction_policy=policy)
    for i, (_, name, priority) in enumerate(ops):
        _run(mgr, f"op{i}", [LEAF[name]] * 4 + [0], priority)
    _run(mgr, "pressure", [9] * 6)
    assert mgr.stats.evictions == 2
    gone = [n for n in sorted(names)
            if mgr.get_computed_blocks(Request("probe", [LEAF[n]] * 4 + [0])).num_tokens == 0]
    assert len(gone) == 1, gone
    return gone[0]


def make(name: str, priority: int = 0) -> tuple[str, str, int]:
    return ("make", name, priority)


def hit(name: str, priority: int = 0) -> tuple[str, str, int]:
    return ("hit", name, priority)


@pytest.mark.parametrize("policy, ops, victim", [
    # lru: the leaf touched longest ago, even if created later
    ("lru", [make("x"), make("y"), hit("x")], "y"),
    ("lru", [make("x"), make("y"), hit("y")], "x"),
    # lfu: fewest hits, even if touched recently; ties -> least recently used
    ("lfu", [make("x"), hit("x"), hit("x"), make("y"), hit("y")], "y"),
    ("lfu", [make("x"), make("y"), hit("y"), hit("x")], "y"),
    # slru: two hits protect x although it is the oldest; y (1 hit, older) before z (0 hits)
    ("slru", [make("x"), hit("x"), hit("x"), make("y"), hit("y"), make("z")], "y"),
    ("slru", [make("x"), hit("x"), make("y"), make("z")], "x"),
    # fifo / filo: creation order only, whatever the accesses
    ("fifo", [make("x"), make("y"), hit("x")], "x"),
    ("filo", [make("x"), make("y"), hit("y"), hit("x")], "y"),
    # mru: the most recently used
    ("mru", [make("x"), make("y"), hit("x")], "x"),
    ("mru", [make("x"), make("y"), make("z"), hit("y")], "y"),
    # priority: lowest request priority first, even if newest; ties -> least recently used
    ("priority", [make("x", 5), make("y", 1)], "y"),
    ("priority", [make("x", 1), make("y", 1), hit("x", 1)], "y"),
    # a high-priority request hitting a leaf raises its priority
    ("priority", [make("x", 0), make("y", 1), hit("x", 3)], "y"),
])
def test_policy_evicts_the_expected_leaf(policy: str, ops: list[tuple[str, str, int]], victim: str):
    assert _victim(policy, ops) == victim


def test_lru_and_fifo_disagree_on_the_same_history():
    ops = [make("x"), make("y"), make("z"), hit("x")]
    assert (_victim("lru", ops), _victim("fifo", ops), _victim("filo", ops)) == ("y", "x", "z")


def test_lookups_without_admission_do_not_count_as_hits():
    mgr = KVCacheManager(num_blocks=6, block_size=2, prefix_cache="radix", eviction_policy="lfu")
    _run(mgr, "x", [1, 1, 1, 1, 0])
    _run(mgr, "y", [2, 2, 2, 2, 0])
    for _ in range(3):  # a scheduler retrying the waiting head: lookups only
        assert mgr.get_computed_blocks(Request("retry", [2, 2, 2, 2, 0])).num_tokens == 4
    _run(mgr, "x-again", [1, 1, 1, 1, 0])
    _run(mgr, "pressure", [9] * 6)
    assert mgr.get_computed_blocks(Request("probe", [1, 1, 1, 1, 0])).num_tokens == 4
    assert mgr.get_computed_blocks(Request("probe", [2, 2, 2, 2, 0])).num_tokens == 0
