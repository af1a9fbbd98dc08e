"""KV events: what a router sees, replayed into a KVEventIndex, matches the real cache."""

from __future__ import annotations

import json
import random

import pytest

from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.block_hasher import hash_token_blocks
from prefixserve.kv_cache.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventIndex,
    KVEventLog,
    KVSnapshot,
    event_from_dict,
)
from prefixserve.request import Request


def _admit(mgr: KVCacheManager, r: Request) -> list[int] | None:
    hit = mgr.get_computed_blocks(r)
    new = mgr.allocate_slots(r, r.num_tokens - hit.num_tokens, hit)
    if new is not None:
        r.num_computed_tokens = r.num_tokens
    return new


def test_allocating_full_blocks_emits_one_stored_event_with_chain_and_tokens():
    mgr = KVCacheManager(num_blocks=8, block_size=2, enable_kv_events=True, hash_seed=4)
    r = Request("a", [1, 2, 3, 4, 5], cache_salt="s", lora_id=3)
    _admit(mgr, r)
    (event,) = mgr.events.events_since(0)
    assert event == BlockStored(1, r.block_hashes, None, [1, 2, 3, 4], 2, "s", 3)
    assert event.block_hashes == hash_token_blocks([1, 2, 3, 4, 5], 2, 4, cache_salt="s", lora_id=3)


def test_decode_filled_block_event_names_its_logical_parent():
    mgr = KVCacheManager(num_blocks=8, block_size=2, enable_kv_events=True)
    r = Request("a", [1, 2, 3])
    _admit(mgr, r)
    r.append_output_token_ids(4)
    mgr.allocate_slots(r, 1)
    last = mgr.events.events_since(1)[0]
    assert last.parent_block_hash == r.block_hashes[0]
    assert last.block_hashes == [r.block_hashes[1]] and last.token_ids == [3, 4]


def test_eviction_emits_removed_and_reset_emits_cleared():
    mgr = KVCacheManager(num_blocks=2, block_size=2, enable_kv_events=True)
    r = Request("a", [1, 2, 3, 4])
    _admit(mgr, r)
    mgr.free(r)
    _admit(mgr, Request("b", [7, 8, 9]))
    stored, removed, stored2 = mgr.events.events_since(0)
    assert isinstance(removed, BlockRemoved) and set(removed.block_hashes) == set(r.block_hashes)
    assert isinstance(stored2, BlockStored)
    assert mgr.reset_prefix_cache() is False
    mgr.free(Request("b", []))
    assert mgr.reset_prefix_cache() is True
    assert mgr.events.events_since(3) == [AllBlocksCleared(4)]
    assert mgr.events.snapshot() == KVSnapshot(4, [])


def test_sequence_numbers_increase_and_ring_reports_falling_behind():
    log = KVEventLog(ring_size=3)
    for i in range(5):
        log.block_removed([bytes([i])])
    assert [e.seq for e in log.events_since(2)] == [3, 4, 5]
    assert log.events_since(5) == []
    assert log.events_since(1) is None  # event 2 fell out of the ring


def test_subscribers_get_every_event_until_they_unsubscribe():
    log = KVEventLog()
    seen: list[int] = []
    unsubscribe = log.subscribe(lambda e: seen.append(e.seq))
    log.block_removed([b"x"])
    log.all_cleared()
    unsubscribe()
    log.all_cleared()
    assert seen == [1, 2]


def test_events_and_snapshot_round_trip_through_json():
    event = BlockStored(7, [b"\x01\x02", b"\x03"], b"\x00", [1, 2, 3, 4], 2, "salt", 9)
    wire = json.loads(json.dumps(event.to_dict()))
    assert wire["block_hashes"] == ["0102", "03"]
    assert event_from_dict(wire) == event
    for other in (BlockRemoved(8, [b"\xff"]), AllBlocksCleared(9)):
        assert event_from_dict(json.loads(json.dumps(other.to_dict()))) == other
    index = KVEventIndex()
    index.apply(wire)
    snap = json.loads(json.dumps(index.snapshot().to_dict()))
    assert KVSnapshot.from_dict(snap) == index.snapshot()


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_replayed_events_and_snapshot_reproduce_the_cached_hashes(block_size):
    rng = random.Random(block_size)
    mgr = KVCacheManager(num_blocks=16 // block_size + 2, block_size=block_size,
                         enable_kv_events=True, kv_events_ring_size=100_000)
    live = KVEventIndex()
    mgr.events.subscribe(live.apply)
    late = KVEventIndex()
    running: list[Request] = []
    for i in range(2000):
        x = rng.random()
        if x < 0.45 or not running:
            r = Request(str(i), [rng.randint(0, 1) for _ in range(rng.randint(1, 12))],
                        cache_salt=rng.choice([None, "t"]))
            if _admit(mgr, r) is not None:
                running.append(r)
        elif x < 0.75:
            r = rng.choice(running)
            r.append_output_token_ids(rng.randint(0, 1))
            if mgr.allocate_slots(r, 1) is None:
                running.remove(r)
                mgr.free(r)
            else:
                r.num_computed_tokens += 1
        elif x < 0.995:
            mgr.free(running.pop(rng.randrange(len(running))))
        elif not running:
            assert mgr.reset_prefix_cache()
        if i == 1000:
            late.load_snapshot(json.loads(json.dumps(mgr.events.snapshot().to_dict())))
        elif i > 1000:
            late.apply_all(mgr.events.events_since(late.seq))
        cached = set(mgr.pool.cached)
        assert live.hashes == cached
        assert {b.block_hash for b in mgr.events.snapshot().blocks} == cached
        if i >= 1000:
            assert late.hashes == cached
    replayed = KVEventIndex()
    replayed.apply_all([e.to_dict() for e in mgr.events.events_since(0)])
    assert replayed.hashes == set(mgr.pool.cached) and replayed.seq == mgr.events.seq


def test_snapshot_records_parent_tokens_and_salt_of_each_block():
    mgr = KVCacheManager(num_blocks=8, block_size=2, enable_kv_events=True)
    r = Request("a", [1, 2, 3, 4, 5], cache_salt="s")
    _admit(mgr, r)
    snap = mgr.events.snapshot()
    assert snap.seq == 1
    assert [(b.parent_block_hash, b.token_ids, b.cache_salt) for b in snap.blocks] == [
        (None, (1, 2), "s"), (r.block_hashes[0], (3, 4), "s")]


def test_events_are_off_by_default():
    assert KVCacheManager(num_blocks=4, block_size=2).events is None
