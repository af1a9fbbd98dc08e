"""Radix prefix cache through KVCacheManager(prefix_cache="radix"): matching, splits,
duplicates, pages, salts, lock refs, eviction order of parents, events and reset."""

from __future__ import annotations

import pytest

from prefixserve.kv_cache import KVCacheManager, hash_token_blocks
from prefixserve.kv_cache.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from prefixserve.kv_cache.radix_prefix_cache import RadixPrefixCache
from prefixserve.request import Request

_ids = iter(range(10**9))


def make(num_blocks: int = 16, block_size: int = 2, policy: str = "lru",
         events: bool = False) -> KVCacheManager:
    mgr = KVCacheManager(num_blocks=num_blocks, block_size=block_size, prefix_cache="radix",
                         eviction_policy=policy, enable_kv_events=events)
    assert isinstance(mgr.cache, RadixPrefixCache)
    return mgr


def req(tokens: list[int], **kw) -> Request:
    return Request(str(next(_ids)), tokens, **kw)


def prefill(mgr: KVCacheManager, r: Request) -> int:
    """Schedule the whole prompt in one step; return the hit in tokens."""
    hit = mgr.get_computed_blocks(r)
    assert mgr.allocate_slots(r, r.num_tokens - hit.num_tokens, hit) is not None
    r.num_computed_tokens = r.num_tokens
    mgr.check_invariants()
    return hit.num_tokens


def run(mgr: KVCacheManager, tokens: list[int], **kw) -> int:
    """A request that prefills and finishes; return its hit in tokens."""
    r = req(tokens, **kw)
    hit = prefill(mgr, r)
    mgr.free(r)
    mgr.check_invariants()
    return hit


def tree(mgr: KVCacheManager) -> list[tuple[int, list[int], list[int], int]]:
    """(depth, tokens, block ids, lock_ref) of every node, depth-first, children in key order."""
    out = []

    def walk(node, depth):
        for key in sorted(node.children, key=repr):
            child = node.children[key]
            out.append((depth, child.key, child.block_ids, child.lock_ref))
            walk(child, depth + 1)

    walk(mgr.cache.root, 0)
    return out


def test_first_request_caches_its_full_blocks_as_one_edge():
    mgr = make()
    assert run(mgr, [1, 2, 3, 4, 5, 6, 7]) == 0
    assert tree(mgr) == [(0, [1, 2, 3, 4, 5, 6], [0, 1, 2], 0)]
    # the partial tail block 3 went back to the free queue's tail; the tree's blocks come
    # after the whole queue, in the order eviction would free them (the leaf's tail first)
    ids = mgr.free_block_ids()
    assert ids[-4:] == [3, 2, 1, 0]
    assert mgr.cache.pool.free_block_ids()[-1] == 3 and 0 not in mgr.cache.pool.free_block_ids()
    assert mgr.stats.blocks_cached == 3


def test_partial_match_splits_the_edge():
    mgr = make()
    run(mgr, [1, 2, 3, 4, 5, 6, 7])
    r = req([1, 2, 3, 4, 9, 9, 9])
    hit = mgr.get_computed_blocks(r)
    assert hit.block_ids == [0, 1] and hit.num_tokens == 4
    assert tree(mgr) == [(0, [1, 2, 3, 4], [0, 1], 0), (1, [5, 6], [2], 0)]
    mgr.check_invariants()


def test_insert_after_split_adds_a_sibling_branch():
    mgr = make()
    run(mgr, [1, 2, 3, 4, 5, 6, 7])
    assert run(mgr, [1, 2, 3, 4, 9, 9, 9]) == 4
    assert tree(mgr) == [(0, [1, 2, 3, 4], [0, 1], 0), (1, [5, 6], [2], 0), (1, [9, 9], [4], 0)]
    assert run(mgr, [1, 2, 3, 4, 9, 9, 8, 8]) == 6
    assert run(mgr, [1, 2, 3, 4, 5, 6, 1]) == 6


def test_split_inside_a_locked_edge_keeps_lock_refs_on_both_halves():
    mgr = make()
    holder = req([1, 2, 3, 4, 5, 6, 7])
    prefill(mgr, holder)
    assert run(mgr, [1, 2, 3, 4, 8, 8, 8]) == 4
    assert tree(mgr) == [(0, [1, 2, 3, 4], [0, 1], 1), (1, [5, 6], [2], 1), (1, [8, 8], [4], 0)]
    mgr.free(holder)
    mgr.check_invariants()
    assert [n[3] for n in tree(mgr)] == [0, 0, 0]


def test_full_hit_recomputes_last_token():
    mgr = make(block_size=4)
    run(mgr, list(range(8)))
    r = req(list(range(8)))
    hit = mgr.get_computed_blocks(r)
    assert hit.num_tokens == 4  # 7 tokens at most, rounded down to whole blocks
    token_level = make(block_size=1)
    run(token_level, [5, 6, 7])
    assert token_level.get_computed_blocks(req([5, 6, 7])).num_tokens == 2


def test_recomputed_last_block_is_a_duplicate_the_tree_already_holds():
    mgr = make(block_size=4)
    run(mgr, list(range(8)))
    r = req(list(range(8)))
    hit = mgr.get_computed_blocks(r)
    free_before = mgr.cache.pool.free_block_ids()  # the queue, without evictable tree blocks
    mgr.allocate_slots(r, 4, hit)
    mgr.check_invariants()
    # the fresh block (head of the queue) was a duplicate of tree block 1: freed again
    assert mgr.block_ids(r) == [0, 1]
    assert sorted(mgr.cache.pool.free_block_ids()) == sorted(free_before)
    assert mgr.free_block_ids()[-1] == free_before[0]


def test_duplicate_insert_keeps_the_trees_blocks_and_frees_the_requests():
    mgr = make(num_blocks=10)
    a, b = req([1, 2, 3, 4, 5]), req([1, 2, 3, 4, 6])
    hit_a, hit_b = mgr.get_computed_blocks(a), mgr.get_computed_blocks(b)  # same step: both miss
    assert mgr.allocate_slots(a, 5, hit_a) == [0, 1, 2]
    mgr.allocate_slots(b, 5, hit_b)
    mgr.check_invariants()
    assert mgr.block_ids(b) == [0, 1, 5]  # its fresh 3 and 4 duplicated the tree's 0 and 1
    assert mgr.free_block_ids()[-2:] == [4, 3]
    assert [n[3] for n in tree(mgr)] == [2]
    assert mgr.stats.blocks_cached == 2
    mgr.free(a)
    mgr.free(b)
    mgr.check_invariants()
    assert mgr.num_free_blocks == 10


def test_page_matching_ignores_a_partial_last_page():
    mgr = make(block_size=4)
    run(mgr, list(range(10)))  # blocks [0..3] [4..7] cached; [8, 9] stays private
    assert tree(mgr) == [(0, list(range(8)), [0, 1], 0)]
    assert mgr.get_computed_blocks(req(list(range(10)) + [42])).num_tokens == 8
    assert mgr.get_computed_blocks(req([0, 1, 2, 3, 4, 5, 6, 99, 8])).num_tokens == 4
    assert mgr.get_computed_blocks(req([0, 1, 2, 99, 4, 5, 6, 7, 8])).num_tokens == 0
    assert mgr.get_computed_blocks(req([0, 1, 2])).num_tokens == 0


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_salts_and_lora_ids_never_share(block_size: int):
    mgr = make(num_blocks=64, block_size=block_size)
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    run(mgr, tokens, cache_salt="tenant-a")
    assert mgr.get_computed_blocks(req(tokens)).num_tokens == 0
    assert mgr.get_computed_blocks(req(tokens, cache_salt="tenant-b")).num_tokens == 0
    assert mgr.get_computed_blocks(req(tokens, cache_salt="tenant-a", lora_id=1)).num_tokens == 0
    full = (len(tokens) - 1) // block_size * block_size
    assert mgr.get_computed_blocks(req(tokens, cache_salt="tenant-a")).num_tokens == full
    run(mgr, tokens)
    run(mgr, tokens, lora_id=7)
    assert len(mgr.cache.root.children) == 3  # one subtree per namespace
    assert run(mgr, tokens, lora_id=7) == full


def test_running_requests_lock_their_path_against_eviction():
    mgr = make(num_blocks=6)
    holder = req([1, 1, 2, 2, 3, 3, 4])  # 3 cached blocks + 1 private
    prefill(mgr, holder)
    assert mgr.num_free_blocks == 2
    assert mgr.allocate_slots(req([7] * 7), 7) is None  # needs 4; the locked 3 cannot go
    mgr.check_invariants()
    mgr.free(holder)
    assert mgr.num_free_blocks == 6
    assert run(mgr, [7] * 7) == 0
    assert mgr.cache.num_evictions == 3  # the whole 3-block leaf, not just the 2 missing blocks
    mgr.check_invariants()


def test_lock_ref_counts_every_running_request_through_a_node():
    mgr = make()
    rs = [req([1, 2, 3, 4, 5]), req([1, 2, 3, 4, 6]), req([1, 2, 7, 7, 7])]
    for r in rs:
        prefill(mgr, r)
    assert tree(mgr) == [(0, [1, 2], [0], 3), (1, [3, 4], [1], 2), (1, [7, 7], [4], 1)]
    mgr.free(rs[1])
    mgr.check_invariants()
    assert [n[3] for n in tree(mgr)] == [2, 1, 1]


def test_lock_ref_never_goes_negative():
    mgr = make()
    run(mgr, [1, 2, 3])
    node = mgr.cache.root.children[(None, (1, 2))]
    with pytest.raises(AssertionError, match="negative"):
        mgr.cache._unlock(node)


def test_parent_becomes_evictable_after_its_last_child_is_evicted():
    mgr = make(num_blocks=8)
    run(mgr, [1, 2, 3, 4, 9])
    run(mgr, [1, 2, 5, 6, 9])  # tree: [1 2] -> {[3 4], [5 6]}
    assert [n[1] for n in tree(mgr)] == [[1, 2], [3, 4], [5, 6]]
    cache = mgr.cache
    assert cache.evict(1) == 1 and [n[1] for n in tree(mgr)] == [[1, 2], [5, 6]]
    mgr.check_invariants()
    assert cache.evict(1) == 1 and [n[1] for n in tree(mgr)] == [[1, 2]]
    mgr.check_invariants()
    assert cache.evict(1) == 1 and tree(mgr) == []
    mgr.check_invariants()
    assert mgr.pool.num_free_blocks == 8


def test_evicting_for_an_allocation_frees_whole_leaves_in_lru_order():
    mgr = make(num_blocks=7)
    run(mgr, [1, 1, 1, 1, 0])   # leaf A: 2 blocks
    run(mgr, [2, 2, 2, 2, 0])   # leaf B: 2 blocks
    run(mgr, [3, 3, 3, 3, 0])   # leaf C: 2 blocks, 1 block free
    run(mgr, [1, 1, 1, 1, 0])   # touch A: B is now the oldest
    assert run(mgr, [4, 4, 4]) == 0  # needs 2 blocks: evicts B (2 blocks)
    assert mgr.cache.num_evictions == 2
    hits = [mgr.get_computed_blocks(req([t] * 4 + [0])).num_tokens for t in (1, 2, 3)]
    assert hits == [4, 0, 4]


def test_multi_turn_chat_hits_the_previous_turns_output():
    mgr = make(num_blocks=32, block_size=4)
    r = req(list(range(10)))
    prefill(mgr, r)
    for t in range(5):  # decode: each sampled token is computed in the next step
        r.append_output_token_ids(100 + t)
        if t < 4:
            assert mgr.allocate_slots(r, 1) is not None
            r.num_computed_tokens += 1
            mgr.check_invariants()
    mgr.free(r)
    nxt = req(r.all_token_ids + [7, 7, 7])
    # 10 prompt + 5 output tokens, of which the last has no KV: 14 -> 12 in whole blocks
    assert prefill(mgr, nxt) == 12


def test_events_use_the_hash_cache_chain_and_removal_returns_the_stored_hashes():
    mgr = make(num_blocks=8, events=True)
    run(mgr, [1, 2, 3, 4, 5, 6, 0], cache_salt="s")
    run(mgr, [1, 2, 3, 4, 7, 7, 0], cache_salt="s")  # splits [1..6]
    stored = [e for e in mgr.events.events_since(0) if isinstance(e, BlockStored)]
    chain = hash_token_blocks([1, 2, 3, 4, 5, 6], 2, cache_salt="s")
    assert stored[0].block_hashes == chain and stored[0].parent_block_hash is None
    assert stored[1].block_hashes == hash_token_blocks([1, 2, 3, 4, 7, 7], 2, cache_salt="s")[2:]
    assert stored[1].parent_block_hash == chain[1]
    path = [h for n in (mgr.cache.root.children[(("s", None, None), (1, 2))],) for h in n.block_hashes]
    assert path == chain[:2]  # the split kept the hashes with their blocks
    mgr.cache.evict(8)
    removed = [h for e in mgr.events.events_since(0) if isinstance(e, BlockRemoved)
               for h in e.block_hashes]
    assert sorted(removed) == sorted(set(chain) | set(stored[1].block_hashes))
    assert len(mgr.events.snapshot().blocks) == 0


def test_reset_is_refused_while_running_then_frees_everything():
    mgr = make(num_blocks=8, events=True)
    r = req([1, 2, 3, 4, 5])
    prefill(mgr, r)
    assert mgr.reset_prefix_cache() is False
    mgr.free(r)
    assert mgr.reset_prefix_cache() is True
    mgr.check_invariants()
    assert tree(mgr) == [] and mgr.pool.num_free_blocks == 8 and mgr.stats.blocks_cached == 0
    assert isinstance(mgr.events.events_since(0)[-1], AllBlocksCleared)
    assert run(mgr, [1, 2, 3, 4, 5]) == 0


def test_stats_count_queries_and_hits_in_tokens():
    mgr = make()
    run(mgr, [1, 2, 3, 4, 5])
    run(mgr, [1, 2, 3, 4, 6])
    s = mgr.stats
    assert (s.queries, s.hits, s.blocks_cached, s.evictions) == (10, 4, 2, 0)


def test_free_block_ids_lists_the_free_queue_then_evictable_leaves_in_eviction_order():
    from prefixserve.kv_cache import KVCacheManager
    from prefixserve.request import Request

    mgr = KVCacheManager(num_blocks=8, block_size=2, prefix_cache="radix", eviction_policy="lru")
    a = Request("a", [1, 2, 3, 4, 5])       # blocks [1,2] [3,4] + partial
    b = Request("b", [1, 2, 7, 8, 9])       # shares [1,2], then [7,8] + partial
    for req in (a, b):
        hit = mgr.get_computed_blocks(req)
        assert mgr.allocate_slots(req, req.num_tokens - hit.num_tokens, hit) is not None
        req.num_computed_tokens = req.num_tokens
    table_a, table_b = mgr.block_ids(a), mgr.block_ids(b)
    mgr.free(a)
    mgr.free(b)
    mgr.check_invariants()
    order = mgr.free_block_ids()
    assert sorted(order) == list(range(8))  # every block is reusable once no request runs
    # the tree's blocks come last: a's leaf [3,4] (older access) before b's [7,8], then [1,2]
    assert order[-3:] == [table_a[1], table_b[1], table_a[0]]
    before = list(order)
    assert mgr.free_block_ids() == before  # read-only
