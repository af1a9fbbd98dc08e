"""Scheduler specs, driven without a model: the test plays the model and samples token 7."""

from __future__ import annotations

import pytest

from prefixserve.config import SchedulerConfig
from prefixserve.kv_cache import KVCacheManager
from prefixserve.request import Request, RequestStatus
from prefixserve.sampling_params import SamplingParams
from prefixserve.scheduler.scheduler import Scheduler


def make(num_blocks=64, block_size=4, caching=True, max_model_len=256, **cfg) -> Scheduler:
    kv = KVCacheManager(num_blocks=num_blocks, block_size=block_size, enable_caching=caching)
    return Scheduler(SchedulerConfig(**cfg), kv, max_model_len)


def req(rid: str, n: int, max_tokens: int = 4, base: int = 0, arrival: float | None = None) -> Request:
    return Request(rid, [base + i % 50 for i in range(n)], SamplingParams(max_tokens=max_tokens, temperature=0),
                   arrival_time=arrival)


def step(s: Scheduler, token: int = 7):
    out = s.schedule()
    sampled = {c.request.request_id: token for c in out.chunks if c.samples}
    s.update_from_output(out, sampled)
    s.kv_cache.check_invariants()
    return out


def run_to_end(s: Scheduler, limit: int = 1000) -> int:
    steps = 0
    while s.has_unfinished_requests():
        step(s)
        steps += 1
        assert steps < limit, "scheduler made no progress"
    return steps


def test_chunked_prefill_splits_a_prompt_by_the_token_budget():
    s = make(max_num_batched_tokens=8)
    r = req("a", 20)
    s.add_request(r)
    chunks = [[(c.start, c.num_tokens, c.samples) for c in step(s).chunks] for _ in range(3)]
    assert chunks == [[(0, 8, False)], [(8, 8, False)], [(16, 4, True)]]
    assert r.output_token_ids == [7]


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget():
    s = make(max_num_batched_tokens=10, enable_chunked_prefill=False)
    s.add_request(req("a", 6))
    s.add_request(req("b", 6, base=100))
    out = step(s)
    assert [(c.request.request_id, c.num_tokens) for c in out.chunks] == [("a", 6)]
    out = step(s)  # a decodes (1 token), b's 6 fit in the remaining 9
    assert [(c.request.request_id, c.num_tokens) for c in out.chunks] == [("a", 1), ("b", 6)]


def test_running_requests_decode_while_new_ones_join():
    s = make(max_num_batched_tokens=64)
    s.add_request(req("a", 10, max_tokens=5))
    step(s)
    s.add_request(req("b", 10, max_tokens=5, base=200))
    out = step(s)
    assert [(c.request.request_id, c.start, c.num_tokens) for c in out.chunks] == [("a", 10, 1), ("b", 0, 10)]


def test_max_num_seqs_caps_the_running_set():
    s = make(max_num_seqs=2)
    for i in range(4):
        s.add_request(req(str(i), 5, base=i * 60))
    step(s)
    assert s.num_running == 2 and s.num_waiting == 2
    run_to_end(s)


def test_requests_finish_at_max_tokens_and_free_their_blocks():
    s = make(caching=False)
    r = req("a", 9, max_tokens=3)
    s.add_request(r)
    run_to_end(s)
    assert r.status == RequestStatus.FINISHED_LENGTH and r.output_token_ids == [7, 7, 7]
    assert s.kv_cache.num_free_blocks == 64


def test_eos_stops_unless_ignored():
    s = make()
    a = Request("a", [1, 2, 3], SamplingParams(max_tokens=8, temperature=0), eos_token_id=7)
    b = Request("b", [4, 5, 6], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), eos_token_id=7)
    s.add_request(a)
    s.add_request(b)
    run_to_end(s)
    assert a.status == RequestStatus.FINISHED_STOPPED and len(a.output_token_ids) == 1
    assert b.status == RequestStatus.FINISHED_LENGTH and len(b.output_token_ids) == 8


@pytest.mark.parametrize("caching", [True, False])
def test_preemption_when_blocks_run_out_then_everything_completes(caching):
    # 6 blocks of 4 tokens; each request grows to 8 + 8 = 16 tokens = 4 blocks.
    s = make(num_blocks=6, caching=caching, max_num_batched_tokens=64)
    reqs = [req(str(i), 8, max_tokens=8, base=i * 60) for i in range(3)]
    for r in reqs:
        s.add_request(r)
    run_to_end(s)
    assert s.num_preemptions > 0
    assert all(r.status == RequestStatus.FINISHED_LENGTH and r.output_token_ids == [7] * 8 for r in reqs)
    assert s.kv_cache.num_free_blocks == 6


def test_preempted_request_goes_back_to_the_front_and_recomputes_from_zero():
    s = make(num_blocks=4, caching=False, max_num_batched_tokens=64)
    a, b = req("a", 8, max_tokens=8), req("b", 7, max_tokens=8, base=100)
    s.add_request(a)
    s.add_request(b)
    step(s)  # a: 2 blocks, b: 2 blocks -> pool full
    out = step(s)  # a needs a third block for token 9 -> b (last running) is preempted
    assert [r.request_id for r in out.preempted] == ["b"]
    assert b.num_computed_tokens == 0 and b.status == RequestStatus.PREEMPTED
    assert next(iter(s.waiting)) is b


def test_prompt_longer_than_max_model_len_is_rejected_with_a_clear_error():
    s = make(max_model_len=16)
    with pytest.raises(ValueError, match="max_model_len"):
        s.add_request(req("a", 16))
    with pytest.raises(ValueError, match="max_tokens"):
        s.add_request(req("b", 10, max_tokens=10))


def test_request_larger_than_the_kv_pool_is_rejected_not_hung():
    s = make(num_blocks=2, max_model_len=256)
    with pytest.raises(ValueError, match="KV pool"):
        s.add_request(req("a", 10, max_tokens=4))


def test_abort_frees_blocks_of_a_running_request():
    s = make(caching=False)
    r = req("a", 10, max_tokens=50)
    s.add_request(r)
    step(s)
    assert s.kv_cache.num_free_blocks < 64
    s.abort_request("a")
    assert r.status == RequestStatus.FINISHED_ABORTED and s.kv_cache.num_free_blocks == 64
    assert not s.has_unfinished_requests()


def test_prefix_hit_starts_the_chunk_after_the_cached_tokens():
    s = make(block_size=4)
    a = req("a", 12, max_tokens=1)
    s.add_request(a)
    run_to_end(s)
    b = Request("b", a.prompt_token_ids[:12] + [99, 98], SamplingParams(max_tokens=1, temperature=0))
    s.add_request(b)
    out = step(s)
    assert [(c.start, c.num_tokens) for c in out.chunks] == [(12, 2)]
    assert b.num_cached_tokens == 12


def test_lpm_runs_the_request_with_the_longest_cached_prefix_first():
    s = make(block_size=4, scheduling_policy="lpm", max_num_seqs=1)
    warm = req("warm", 16, max_tokens=1, base=300)
    s.add_request(warm)
    run_to_end(s)
    cold = req("cold", 16, max_tokens=1, base=0, arrival=1.0)
    hot = Request("hot", warm.prompt_token_ids + [5], SamplingParams(max_tokens=1, temperature=0), arrival_time=2.0)
    s.add_request(cold)
    s.add_request(hot)
    assert [c.request.request_id for c in step(s).chunks] == ["hot"]


def test_lpm_lets_a_passed_over_request_go_first_after_max_skips():
    s = make(block_size=4, scheduling_policy="lpm", max_num_seqs=1, lpm_max_skips=1)
    warm = req("warm", 16, max_tokens=1, base=300)
    s.add_request(warm)
    run_to_end(s)
    cold = req("cold", 16, max_tokens=1, base=0, arrival=1.0)
    s.add_request(cold)
    for i in range(2):
        s.add_request(Request(f"hot{i}", warm.prompt_token_ids + [i], SamplingParams(max_tokens=1, temperature=0),
                              arrival_time=2.0 + i))
    order = []
    while s.has_unfinished_requests():
        order += [c.request.request_id for c in step(s).chunks if c.start == c.request.num_cached_tokens]
    assert order.index("cold") == 1  # skipped once for hot0, then it goes before hot1
