"""KVCacheManager with the hash prefix cache: vLLM's APC scenarios with exact block ids."""

from __future__ import annotations

import pytest

from prefixserve.kv_cache import ComputedBlocks, KVCacheManager
from prefixserve.kv_cache.kv_events import AllBlocksCleared
from prefixserve.request import Request

_ids = iter(range(10**9))


def req(tokens: list[int], **kw) -> Request:
    return Request(str(next(_ids)), tokens, **kw)


def admit(mgr: KVCacheManager, r: Request) -> list[int] | None:
    """Schedule a whole new prompt: lookup, allocate the rest, advance the count."""
    hit = mgr.get_computed_blocks(r)
    new = mgr.allocate_slots(r, r.num_tokens - hit.num_tokens, hit)
    if new is not None:
        r.num_computed_tokens = r.num_tokens
    mgr.check_invariants()
    return new


def decode(mgr: KVCacheManager, r: Request, token: int) -> list[int] | None:
    """One decode step: the sampled token is appended, then room for it is allocated."""
    r.append_output_token_ids(token)
    new = mgr.allocate_slots(r, 1)
    if new is not None:
        r.num_computed_tokens += 1
    mgr.check_invariants()
    return new


COMMON = list(range(100, 112))  # 3 blocks of 4


def test_prefill_cold_then_warm_shares_full_blocks():
    mgr = KVCacheManager(num_blocks=10, block_size=4)
    r0 = req(COMMON + [1, 2, 3])
    assert mgr.get_computed_blocks(r0) == ComputedBlocks([], 0)
    assert admit(mgr, r0) == [0, 1, 2, 3]
    assert [mgr.pool.blocks[b].block_hash is not None for b in range(4)] == [True, True, True, False]
    r1 = req(COMMON + [4, 5])
    assert mgr.get_computed_blocks(r1) == ComputedBlocks([0, 1, 2], 12)
    assert admit(mgr, r1) == [4]
    assert mgr.block_ids(r1) == [0, 1, 2, 4]
    assert [mgr.pool.blocks[b].ref_cnt for b in range(5)] == [2, 2, 2, 1, 1]
    assert mgr.num_free_blocks == 5
    assert r1.num_cached_tokens == 12


def test_free_appends_blocks_to_tail_in_reverse_table_order():
    mgr = KVCacheManager(num_blocks=10, block_size=4)
    r0, r1 = req(COMMON + [1, 2, 3]), req(COMMON + [4, 5])
    admit(mgr, r0)
    admit(mgr, r1)
    mgr.free(r0)
    assert mgr.free_block_ids() == [5, 6, 7, 8, 9, 3]
    mgr.free(r1)
    assert mgr.free_block_ids() == [5, 6, 7, 8, 9, 3, 4, 2, 1, 0]
    mgr.check_invariants()


def test_hit_on_free_blocks_touches_them_out_of_the_queue():
    mgr = KVCacheManager(num_blocks=10, block_size=4)
    r0 = req(COMMON + [1, 2, 3])
    admit(mgr, r0)
    mgr.free(r0)
    r1 = req(COMMON + [7])
    assert mgr.get_computed_blocks(r1).block_ids == [0, 1, 2]
    assert admit(mgr, r1) == [4]
    assert mgr.free_block_ids() == [5, 6, 7, 8, 9, 3]
    assert [mgr.pool.blocks[b].ref_cnt for b in (0, 1, 2)] == [1, 1, 1]


def test_miss_evicts_lazily_from_the_queue_head():
    mgr = KVCacheManager(num_blocks=6, block_size=4)
    r0 = req(COMMON + [1, 2, 3])
    admit(mgr, r0)
    mgr.free(r0)
    assert mgr.free_block_ids() == [4, 5, 3, 2, 1, 0]
    big = req(list(range(500, 520)))  # 5 blocks, unrelated
    assert admit(mgr, big) == [4, 5, 3, 2, 1]
    assert mgr.stats.evictions == 2 and mgr.stats.blocks_cached == 1 + 5
    assert mgr.get_computed_blocks(req(COMMON + [9])).block_ids == [0]
    assert mgr.pool.blocks[2].block_hash != r0.block_hashes[1]


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_full_hit_recomputes_last_token(block_size):
    mgr = KVCacheManager(num_blocks=32, block_size=block_size)
    prompt = list(range(3 * block_size))
    admit(mgr, req(prompt))
    hit = mgr.get_computed_blocks(req(prompt))
    assert hit.num_tokens == 2 * block_size if block_size > 1 else len(prompt) - 1
    assert hit.num_tokens <= len(prompt) - 1


@pytest.mark.parametrize("block_size", [2, 4])
def test_prompt_of_at_most_one_block_never_hits(block_size):
    mgr = KVCacheManager(num_blocks=8, block_size=block_size)
    prompt = list(range(block_size))
    admit(mgr, req(prompt))
    assert mgr.get_computed_blocks(req(prompt)) == ComputedBlocks([], 0)


def test_partial_blocks_are_never_cached_or_hit():
    mgr = KVCacheManager(num_blocks=8, block_size=4)
    r0 = req([1, 2, 3, 4, 5, 6])
    admit(mgr, r0)
    assert mgr.stats.blocks_cached == 1
    assert mgr.get_computed_blocks(req([1, 2, 3, 4, 5, 6, 7, 8, 9])).num_tokens == 4


def test_decode_fills_blocks_and_next_turn_hits_the_answer():
    mgr = KVCacheManager(num_blocks=8, block_size=4)
    r = req([1, 2, 3, 4, 5, 6])
    assert admit(mgr, r) == [0, 1]
    assert decode(mgr, r, 7) == []
    assert mgr.pool.blocks[1].block_hash is None
    assert decode(mgr, r, 8) == []
    assert mgr.pool.blocks[1].block_hash == r.block_hashes[1]  # filled by generated tokens
    assert decode(mgr, r, 9) == [2]
    mgr.free(r)
    turn2 = req([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    assert mgr.get_computed_blocks(turn2) == ComputedBlocks([0, 1], 8)


def test_hit_blocks_are_not_evicted_to_serve_their_own_request():
    mgr = KVCacheManager(num_blocks=2, block_size=2)
    a, b = req([1, 2]), req([3, 4])
    admit(mgr, a)
    admit(mgr, b)
    mgr.free(a)
    mgr.free(b)
    assert mgr.free_block_ids() == [0, 1]
    c = req([1, 2, 5])
    assert mgr.get_computed_blocks(c).block_ids == [0]
    assert admit(mgr, c) == [1]
    assert mgr.block_ids(c) == [0, 1]


def test_failed_allocation_changes_nothing():
    mgr = KVCacheManager(num_blocks=5, block_size=2)
    r0 = req([1, 2, 3, 4, 5])
    admit(mgr, r0)
    mgr.free(r0)
    before = (mgr.free_block_ids(), [b.ref_cnt for b in mgr.pool.blocks], dict(mgr.pool.cached),
              mgr.stats)
    big = req([1, 2, 3, 4] + list(range(50, 60)))
    hit = mgr.get_computed_blocks(big)
    assert hit.block_ids == [0, 1]
    assert mgr.allocate_slots(big, big.num_tokens - hit.num_tokens, hit) is None
    after = (mgr.free_block_ids(), [b.ref_cnt for b in mgr.pool.blocks], dict(mgr.pool.cached),
             mgr.stats)
    assert after == before and mgr.block_ids(big) == []
    mgr.check_invariants()


def test_stale_hit_is_refused_not_used():
    mgr = KVCacheManager(num_blocks=3, block_size=2)
    r0 = req([1, 2, 3])
    admit(mgr, r0)
    mgr.free(r0)
    late = req([1, 2, 9])
    hit = mgr.get_computed_blocks(late)
    admit(mgr, req([7, 7, 8, 8, 9]))  # evicts everything, including the hit block
    assert mgr.allocate_slots(late, 1, hit) is None
    mgr.check_invariants()


def test_same_step_second_identical_prompt_hits_the_first():
    mgr = KVCacheManager(num_blocks=10, block_size=4)
    a, b = req(list(range(10))), req(list(range(10)))
    ha = mgr.get_computed_blocks(a)
    assert mgr.allocate_slots(a, 10, ha) == [0, 1, 2]
    hb = mgr.get_computed_blocks(b)  # before a's forward pass: blocks are cached at allocation
    assert hb == ComputedBlocks([0, 1], 8)
    assert mgr.allocate_slots(b, 2, hb) == [3]
    mgr.check_invariants()


def test_duplicate_computation_keeps_first_block_cached():
    mgr = KVCacheManager(num_blocks=10, block_size=4)
    a, b = req(list(range(10))), req(list(range(10)))
    ha, hb = mgr.get_computed_blocks(a), mgr.get_computed_blocks(b)  # both miss
    mgr.allocate_slots(a, 10, ha)
    mgr.allocate_slots(b, 10, hb)
    mgr.check_invariants()
    assert mgr.stats.blocks_cached == 2
    mgr.free(b)
    mgr.free(a)
    assert mgr.get_computed_blocks(req(list(range(10)))).block_ids == [0, 1]
    mgr.check_invariants()


def test_different_salts_never_share():
    mgr = KVCacheManager(num_blocks=16, block_size=2)
    prompt = list(range(9))
    admit(mgr, req(prompt, cache_salt="alice"))
    assert mgr.get_computed_blocks(req(prompt, cache_salt="alice")).num_tokens == 8
    assert mgr.get_computed_blocks(req(prompt, cache_salt="bob")).num_tokens == 0
    assert mgr.get_computed_blocks(req(prompt)).num_tokens == 0
    assert mgr.get_computed_blocks(req(prompt, cache_salt="alice", lora_id=1)).num_tokens == 0


def test_same_seed_same_hashes_across_managers_and_different_seed_differs():
    prompt = list(range(12))
    hashes = []
    for seed in (5, 5, 6):
        mgr = KVCacheManager(num_blocks=8, block_size=4, hash_seed=seed)
        r = req(prompt)
        admit(mgr, r)
        hashes.append(r.block_hashes)
    assert hashes[0] == hashes[1] != hashes[2]


def test_preempted_request_rehits_its_own_blocks_and_counts_apart():
    mgr = KVCacheManager(num_blocks=8, block_size=2)
    r = req([1, 2, 3, 4, 5])
    admit(mgr, r)
    decode(mgr, r, 6)
    mgr.free(r)  # preemption
    r.num_computed_tokens, r.num_preemptions = 0, 1
    hit = mgr.get_computed_blocks(r)
    assert hit == ComputedBlocks([0, 1], 4)  # 6 tokens: last block recomputed
    assert mgr.allocate_slots(r, 2, hit) == [3]
    stats = mgr.stats
    assert (stats.requests, stats.queries, stats.hits) == (1, 5, 0)
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, 6, 4)
    mgr.check_invariants()


def test_stats_count_a_request_once_even_if_admission_is_retried():
    mgr = KVCacheManager(num_blocks=2, block_size=2)
    holder = req([9, 9, 9])
    admit(mgr, holder)
    r = req([1, 2, 3])
    assert admit(mgr, r) is None
    mgr.free(holder)
    assert admit(mgr, r) == [1, 0]
    assert (mgr.stats.requests, mgr.stats.queries) == (2, 6)


def test_reset_prefix_cache_refused_while_in_use_then_clears():
    mgr = KVCacheManager(num_blocks=8, block_size=2, enable_kv_events=True)
    r = req([1, 2, 3, 4, 5])
    admit(mgr, r)
    assert mgr.reset_prefix_cache() is False and mgr.stats.blocks_cached == 2
    mgr.free(r)
    assert mgr.reset_prefix_cache() is True
    assert mgr.stats.blocks_cached == 0
    assert all(b.block_hash is None for b in mgr.pool.blocks)
    assert isinstance(mgr.events.events_since(mgr.events.seq - 1)[0], AllBlocksCleared)
    assert mgr.get_computed_blocks(req([1, 2, 3, 4, 5])).num_tokens == 0
    mgr.check_invariants()


def test_caching_disabled_is_a_plain_paged_allocator():
    mgr = KVCacheManager(num_blocks=4, block_size=2, enable_caching=False)
    a = req([1, 2, 3])
    assert admit(mgr, a) == [0, 1]
    assert mgr.get_computed_blocks(req([1, 2, 3])) == ComputedBlocks([], 0)
    assert admit(mgr, req([1, 2, 3, 4, 5])) is None
    mgr.free(a)
    assert mgr.free_block_ids() == [2, 3, 1, 0]
    assert mgr.stats.blocks_cached == 0 and a.block_hashes == []


def test_usage_and_num_free_blocks_track_held_blocks():
    mgr = KVCacheManager(num_blocks=4, block_size=2)
    r = req([1, 2, 3])
    admit(mgr, r)
    assert mgr.num_free_blocks == 2 and mgr.usage() == 0.5
    mgr.free(r)
    assert mgr.num_free_blocks == 4 and mgr.usage() == 0.0
    assert mgr.stats.to_dict()["blocks_cached"] == 1


def test_chunked_prefill_caches_each_chunk_as_it_is_allocated():
    mgr = KVCacheManager(num_blocks=8, block_size=2)
    r = req(list(range(7)))
    hit = mgr.get_computed_blocks(r)
    assert mgr.allocate_slots(r, 3, hit) == [0, 1]
    r.num_computed_tokens = 3
    assert mgr.stats.blocks_cached == 1
    assert mgr.allocate_slots(r, 4) == [2, 3]
    assert mgr.stats.blocks_cached == 3


def test_bad_configuration_is_rejected_with_a_message():
    with pytest.raises(ValueError, match="prefix_cache"):
        KVCacheManager(4, 2, prefix_cache="trie")
    with pytest.raises(ValueError, match="LRU"):
        KVCacheManager(4, 2, prefix_cache="hash", eviction_policy="lfu")
    with pytest.raises(ValueError, match="hash_algo"):
        KVCacheManager(4, 2, hash_algo="md5")


def test_free_unhashed_to_head_reuses_partial_blocks_first():
    mgr = KVCacheManager(num_blocks=10, block_size=4, free_unhashed_to_head=True)
    r0, r1 = req(COMMON + [1, 2, 3]), req(COMMON + [4, 5])
    admit(mgr, r0)
    admit(mgr, r1)
    mgr.free(r0)
    mgr.free(r1)
    assert mgr.free_block_ids() == [4, 3, 5, 6, 7, 8, 9, 2, 1, 0]
    mgr.check_invariants()
    assert admit(mgr, req([7] * 6)) == [4, 3]  # no cached block evicted
    assert mgr.num_evictions == 0


def test_num_evictions_counts_cached_blocks_popped_for_reuse():
    mgr = KVCacheManager(num_blocks=3, block_size=2)
    r = req([1, 2, 3, 4, 5])
    admit(mgr, r)
    mgr.free(r)
    admit(mgr, req([9, 9, 9, 9, 9]))
    assert mgr.num_evictions == mgr.stats.evictions == 2
