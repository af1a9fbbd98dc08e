"""BlockPool and its free queue: allocation order, touch, reverse free, lazy eviction."""

from __future__ import annotations

import pytest

from prefixserve.kv_cache.block_pool import BlockPool, KVBlock
from prefixserve.kv_cache.free_block_queue import FreeBlockQueue
from prefixserve.kv_cache.kv_events import BlockRemoved, KVEventLog
from prefixserve.request import Request


def _queue(n: int) -> tuple[list[KVBlock], FreeBlockQueue]:
    blocks = [KVBlock(i) for i in range(n)]
    return blocks, FreeBlockQueue(blocks, lambda: KVBlock(-1))


def _ids(queue: FreeBlockQueue) -> list[int]:
    return [b.block_id for b in queue]


def test_free_queue_starts_in_id_order():
    _, q = _queue(5)
    assert _ids(q) == [0, 1, 2, 3, 4]
    assert len(q) == 5
    q.check_links()


def test_free_queue_remove_from_middle_relinks_neighbours():
    blocks, q = _queue(5)
    q.remove(blocks[2])
    assert _ids(q) == [0, 1, 3, 4]
    assert blocks[1].next_free is blocks[3] and blocks[3].prev_free is blocks[1]
    assert blocks[2].prev_free is None and blocks[2].next_free is None
    q.check_links()
    with pytest.raises(RuntimeError):
        q.remove(blocks[2])


def test_free_queue_append_goes_to_tail_and_appendleft_to_head():
    blocks, q = _queue(3)
    q.remove(blocks[0])
    q.append(blocks[0])
    assert _ids(q) == [1, 2, 0]
    q.remove(blocks[2])
    q.appendleft(blocks[2])
    assert _ids(q) == [2, 1, 0]
    q.check_links()


@pytest.mark.parametrize("n", [0, 1, 3])
def test_free_queue_popleft_n_keeps_order_and_clears_links(n):
    blocks, q = _queue(4)
    popped = q.popleft_n(n)
    assert [b.block_id for b in popped] == list(range(n))
    assert all(b.prev_free is None and b.next_free is None for b in popped)
    assert _ids(q) == list(range(n, 4)) and len(q) == 4 - n
    q.check_links()
    q.append_n(popped)
    assert _ids(q) == list(range(n, 4)) + list(range(n))


def test_free_queue_popping_everything_then_popleft_raises():
    _, q = _queue(2)
    q.popleft()
    q.popleft()
    assert len(q) == 0 and _ids(q) == []
    q.check_links()
    with pytest.raises(ValueError, match="No free blocks"):
        q.popleft()
    with pytest.raises(ValueError):
        q.popleft_n(1)


def _cache_request(pool: BlockPool, tokens: list[int], hashes: list[bytes], n: int) -> list[KVBlock]:
    req = Request("r", tokens)
    req.block_hashes = hashes
    blocks = pool.get_new_blocks(n)
    pool.cache_full_blocks(req, blocks[:len(hashes)], 0, len(hashes), block_size=2)
    return blocks


def test_get_new_blocks_pops_head_with_ref_one():
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(2)
    assert [b.block_id for b in blocks] == [0, 1]
    assert [b.ref_cnt for b in blocks] == [1, 1]
    assert pool.free_block_ids() == [2, 3]
    pool.check_invariants()


def test_free_blocks_appends_in_given_order_and_keeps_hash():
    pool = BlockPool(4)
    blocks = _cache_request(pool, [1, 2, 3, 4], [b"a", b"b"], 2)
    pool.free_blocks(reversed(blocks))
    assert pool.free_block_ids() == [2, 3, 1, 0]
    assert pool.get_cached_block(b"a") is blocks[0] and blocks[0].block_hash == b"a"
    pool.check_invariants()


def test_touch_removes_free_cached_block_from_queue():
    pool = BlockPool(4)
    blocks = _cache_request(pool, [1, 2, 3, 4], [b"a", b"b"], 2)
    pool.free_blocks(reversed(blocks))
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1
    assert pool.free_block_ids() == [2, 3, 1]
    pool.check_invariants()


def test_popping_a_cached_block_evicts_it_and_emits_removed():
    log = KVEventLog()
    pool = BlockPool(2, log)
    blocks = _cache_request(pool, [1, 2, 3, 4], [b"a", b"b"], 2)
    pool.free_blocks(reversed(blocks))  # queue: 1 (b), 0 (a)
    (reused,) = pool.get_new_blocks(1)
    assert reused.block_id == 1 and reused.block_hash is None
    assert pool.get_cached_block(b"b") is None and pool.get_cached_block(b"a") is blocks[0]
    assert pool.num_evictions == 1
    assert log.events_since(1) == [BlockRemoved(2, [b"b"])]
    pool.check_invariants()


def test_duplicate_content_keeps_first_block_in_map():
    pool = BlockPool(4)
    first = _cache_request(pool, [1, 2], [b"a"], 1)
    second = _cache_request(pool, [1, 2], [b"a"], 1)
    assert pool.get_cached_block(b"a") is first[0]
    assert second[0].block_hash is None
    pool.free_blocks(second)
    pool.free_blocks(first)
    assert pool.get_cached_block(b"a") is first[0]
    pool.check_invariants()


def test_reset_refused_while_a_block_is_in_use():
    pool = BlockPool(3)
    blocks = _cache_request(pool, [1, 2], [b"a"], 1)
    assert pool.reset() is False and pool.num_cached_blocks == 1
    pool.free_blocks(blocks)
    assert pool.reset() is True
    assert pool.num_cached_blocks == 0 and blocks[0].block_hash is None
    pool.check_invariants()


def test_check_invariants_catches_a_corrupt_ref_count():
    pool = BlockPool(3)
    pool.blocks[1].ref_cnt = 1  # in use, yet still in the free queue
    with pytest.raises(AssertionError):
        pool.check_invariants()


def test_kv_block_has_no_instance_dict():
    assert not hasattr(KVBlock(0), "__dict__")
