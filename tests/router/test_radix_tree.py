"""The approximate multi-tenant radix tree behind the cache_aware policy."""

from __future__ import annotations

import random

from prefixserve.router.hash_trie import HashTrie
from prefixserve.router.radix_tree import ApproxRadixTree, common_prefix_len


def test_common_prefix_len_matches_a_character_scan():
    rng = random.Random(0)
    for _ in range(500):
        a = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 12)))
        b = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 12)))
        start = rng.randrange(0, len(b) + 1)
        n = 0
        while n < len(a) and start + n < len(b) and a[n] == b[start + n]:
            n += 1
        assert common_prefix_len(a, b, start) == n


def test_cold_tree_matches_nothing():
    tree = ApproxRadixTree()
    assert tree.match("hello") == (0, [])


def test_split_keeps_both_tenants_on_the_shared_part():
    tree = ApproxRadixTree()
    tree.insert("hello world", "a")
    tree.insert("hello there", "b")
    matched, holders = tree.match("hello everyone")
    assert matched == 6 and sorted(holders) == ["a", "b"]
    assert tree.match("hello world!") == (11, ["a"])
    assert tree.tenant_chars == {"a": 11, "b": 11}
    tree.check_invariants()


def test_match_respects_eligible_tenants():
    tree = ApproxRadixTree()
    tree.insert("hello world", "a")
    tree.insert("hello", "b")
    assert tree.match("hello world", eligible={"b"}) == (5, ["b"])
    assert tree.match("hello world", eligible={"c"}) == (0, [])


def test_characters_not_bytes():
    tree = ApproxRadixTree()
    tree.insert("你好世界", "a")
    tree.insert("你好朋友", "b")
    matched, holders = tree.match("你好吗")
    assert matched == 2 and sorted(holders) == ["a", "b"]
    tree.check_invariants()


def test_eviction_drops_the_least_recent_leaf_first():
    tree = ApproxRadixTree()
    tree.insert("hello", "t")
    tree.insert("world", "t")
    tree.evict(5)
    assert tree.match("world") == (5, ["t"])
    assert tree.match("hello") == (0, [])
    tree.check_invariants()


def test_random_inserts_evictions_and_removals_keep_invariants():
    rng = random.Random(0)
    tree = ApproxRadixTree()
    tenants = [f"w{i}" for i in range(4)]
    for step in range(3000):
        text = "".join(rng.choice("ab") for _ in range(rng.randrange(1, 24)))
        op = rng.random()
        if op < 0.7:
            tree.insert(text, rng.choice(tenants))
        elif op < 0.9:
            matched, holders = tree.match(text)
            for t in holders:  # every holder really holds the matched prefix
                assert tree.match(text[:matched], eligible={t})[0] == matched
        elif op < 0.98:
            tree.evict(rng.randrange(0, 200))
        else:
            tree.remove_tenant(rng.choice(tenants))
        if step % 50 == 0:
            tree.check_invariants()
    tree.check_invariants()


def test_hash_trie_matches_whole_chunks_and_caps_its_nodes():
    trie = HashTrie(chunk_chars=4, max_nodes=10)
    trie.insert(trie.chunk_hashes("aaaabbbbcccc"), "w0")
    assert trie.match(trie.chunk_hashes("aaaabbbbdddd")) == (2, {"w0"})
    for i in range(20):
        trie.insert(trie.chunk_hashes(f"{i:04d}xxxxyyyy"), "w1")
        assert trie.num_nodes <= 10
    trie.remove_worker("w1")
    assert trie.match(trie.chunk_hashes("0019xxxx")) == (0, set())
