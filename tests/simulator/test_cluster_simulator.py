"""The cluster simulator: determinism, timing of the cost model, and what routing does to hits."""

from __future__ import annotations

import pytest

from prefixserve.bench.workloads import build_workload
from prefixserve.router.policies import policy_names
from prefixserve.simulator import CostModel, SimConfig, simulate

CACHE_AWARE = ["cache_aware", "prefix_hash", "kv_events"]


def shared_prefix(num_requests: int = 128, groups: int = 8):
    return build_workload("shared-prefix", num_requests=num_requests, num_groups=groups,
                          system_prompt_words=64, question_words=8, seed=3)


def without_wall(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("wall_s", "cpu_s")}


@pytest.mark.parametrize("policy", ["random", "power_of_two", "cache_aware", "kv_events"])
def test_same_seed_gives_identical_results(policy):
    config = SimConfig(num_workers=4, seed=7, request_rate=50.0)
    first = simulate(policy, shared_prefix(), config)
    second = simulate(policy, shared_prefix(), config)
    assert without_wall(first) == without_wall(second)
    assert first["completed"] == 128


def test_one_worker_every_policy_has_the_same_hit_rate():
    workload = shared_prefix()
    roots = workload.start()
    results = {p: simulate(p, workload, SimConfig(num_workers=1), roots) for p in policy_names()}
    rates = {p: r["hit_rate"] for p, r in results.items()}
    assert len(set(rates.values())) == 1, rates
    # 8 groups: each group's first prompt misses, every later one hits its 64-word prefix
    assert rates["round_robin"] > 0.7
    assert len({r["ttft_ms"]["p50"] for r in results.values()}) == 1


def test_round_robin_hit_rate_falls_with_workers_while_cache_aware_policies_hold():
    workload = shared_prefix(256)
    roots = workload.start()

    def rate(policy: str, n: int) -> float:
        return simulate(policy, workload, SimConfig(num_workers=n), roots)["hit_rate"]

    single = rate("round_robin", 1)
    assert rate("round_robin", 4) < single - 0.05
    assert rate("round_robin", 16) < single - 0.25
    for policy in CACHE_AWARE:
        assert rate(policy, 16) == pytest.approx(single, abs=0.02), policy
    # bounded load spills a group's burst to the next ring worker, but keeps most affinity
    assert rate("consistent_hash", 16) > rate("round_robin", 16) + 0.15


def test_lone_request_timing_follows_the_cost_model():
    cost = CostModel(prefill_ms_per_token=2.0, decode_ms_per_token=1.0, step_overhead_ms=10.0)
    workload = build_workload("random", num_requests=1, max_tokens=8)
    result = simulate("round_robin", workload, SimConfig(num_workers=3, cost=cost))
    prompt = result["prompt_tokens"]
    ttft = 10.0 + 2.0 * prompt
    assert result["ttft_ms"]["p50"] == pytest.approx(ttft)
    assert result["latency_ms"]["p50"] == pytest.approx(ttft + 7 * (10.0 + 1.0))
    assert result["engine_steps"] == 8
    assert result["output_tokens"] == 8


def test_burst_queues_behind_max_num_seqs():
    workload = build_workload("random", num_requests=8, max_tokens=4)
    roots = workload.start()
    wide = simulate("round_robin", workload, SimConfig(num_workers=1, max_num_seqs=8), roots)
    narrow = simulate("round_robin", workload, SimConfig(num_workers=1, max_num_seqs=1), roots)
    assert narrow["ttft_ms"]["p99"] > wide["ttft_ms"]["p99"]
    assert narrow["engine_steps"] == 8 * 4  # one request at a time: 1 prefill + 3 decode steps
    assert wide["engine_steps"] < 8 * 4
    assert narrow["completed"] == wide["completed"] == 8


@pytest.mark.parametrize("name", ["multi-turn", "tree-of-thought"])
def test_children_arrive_after_their_parent_and_hit_its_prefix(name):
    workload = build_workload(name, num_requests=30, max_tokens=8)
    result = simulate("least_load", workload, SimConfig(num_workers=1))
    assert result["completed"] == workload.expected_requests()
    assert result["hit_rate"] > 0.5  # each child extends its parent's prompt and answer
    # a child can only start after its parent finished, so the run outlasts one request
    assert result["sim_time_s"] * 1000 > 2 * result["latency_ms"]["p50"]


def test_prompt_bigger_than_the_cache_is_rejected_not_stuck():
    workload = build_workload("shared-prefix", num_requests=4, num_groups=1)
    result = simulate("least_load", workload, SimConfig(num_workers=2, worker_blocks=4))
    assert result["rejected"] == 4 and result["completed"] == 0


def test_small_cache_evicts_and_lowers_the_hit_rate():
    workload = shared_prefix(256, groups=32)
    roots = workload.start()
    big = simulate("round_robin", workload, SimConfig(num_workers=2), roots)
    small = simulate("round_robin", workload, SimConfig(num_workers=2, worker_blocks=64,
                                                        max_num_seqs=4), roots)
    assert small["kv_evictions"] > 0 == big["kv_evictions"]
    assert small["hit_rate"] < big["hit_rate"]


def test_bad_config_says_what_to_fix():
    with pytest.raises(ValueError, match="--request-rate"):
        SimConfig(request_rate=0)
    with pytest.raises(ValueError, match="--num-workers"):
        SimConfig(num_workers=0)
    with pytest.raises(ValueError, match="--step-overhead-ms"):
        CostModel(0.0, 0.0, 0.0)
