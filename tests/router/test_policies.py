"""Each routing policy driven directly with plain fake workers (no HTTP)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from prefixserve.router.policies import make_policy, policy_names
from prefixserve.router.policies.cache_aware import CacheAwareConfig, CacheAwarePolicy
from prefixserve.router.policies.consistent_hash import ConsistentHashPolicy
from prefixserve.router.request_info import RequestInfo


@dataclass(eq=False)
class FakeWorker:
    url: str


def workers(n: int) -> tuple[FakeWorker, ...]:
    return tuple(FakeWorker(f"http://w{i}") for i in range(n))


def prompt(text: str) -> RequestInfo:
    return RequestInfo.from_completion({"prompt": text})


def test_round_robin_cycles_in_worker_order():
    ws = workers(3)
    policy = make_policy("round_robin")
    picks = [policy.select(prompt("x"), ws).url for _ in range(7)]
    assert picks == [w.url for w in ws] * 2 + [ws[0].url]


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_counts_load_until_done(name):
    ws = workers(4)
    policy = make_policy(name, seed=0)
    chosen = [policy.select(prompt(f"prompt {i} " * 10), ws) for i in range(20)]
    assert policy.loads.total == 20
    for w in chosen:
        policy.on_request_done(w)
    assert policy.loads.total == 0
    assert all(policy.load(w.url) == 0 for w in ws)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_only_picks_eligible_workers(name):
    ws = workers(4)
    policy = make_policy(name, seed=1)
    for w in ws:
        policy.add_worker(w)
    eligible = ws[1:3]
    for i in range(50):
        assert policy.select(prompt(f"same prefix {i % 3}" * 20), eligible) in eligible


def test_least_load_avoids_the_skewed_worker_until_balanced():
    ws = workers(3)
    policy = make_policy("least_load", seed=0)
    for w in ws:
        policy.add_worker(w)
    for _ in range(10):  # 10 requests pinned on w0 (only it was eligible)
        policy.select(prompt("x"), ws[:1])
    picks = [policy.select(prompt("x"), ws).url for _ in range(20)]
    assert ws[0].url not in picks
    assert policy.load(ws[1].url) == policy.load(ws[2].url) == 10


def test_power_of_two_prefers_the_less_loaded_of_two():
    ws = workers(2)
    policy = make_policy("power_of_two", seed=0)
    for w in ws:
        policy.add_worker(w)
    for _ in range(5):
        policy.select(prompt("x"), ws[:1])
    assert policy.select(prompt("x"), ws) is ws[1]


def test_chwbl_keeps_keys_sticky_when_load_is_even():
    ws = workers(8)
    policy = ConsistentHashPolicy(seed=0)
    keys = [f"conversation {i}: " + "context " * 20 for i in range(200)]
    first = {}
    for k in keys:  # each request finishes before the next: load stays ~0
        w = policy.select(prompt(k), ws)
        policy.on_request_done(w)
        first[k] = w.url
    again = {}
    for k in keys:
        w = policy.select(prompt(k + " next turn"), ws)  # same first 100 chars
        policy.on_request_done(w)
        again[k] = w.url
    assert again == first
    assert len(set(first.values())) == 8  # keys spread over the ring


def test_chwbl_bound_holds_under_a_hot_key():
    ws = workers(5)
    eps = 0.25
    policy = make_policy("consistent_hash", load_epsilon=eps, seed=0)
    hot = "the same system prompt " * 10
    for i in range(400):
        policy.select(prompt(hot if i % 2 else f"{i} other"), ws)
        mean = policy.loads.total / len(ws)
        assert max(policy.loads.loads.values()) <= (1 + eps) * mean + 1


def test_chwbl_removed_worker_moves_only_its_keys():
    ws = workers(6)
    policy = ConsistentHashPolicy(seed=0)
    keys = [f"key {i}" for i in range(300)]

    def route() -> dict[str, str]:
        out = {}
        for k in keys:
            w = policy.select(prompt(k), tuple(policy.members.values()))
            policy.on_request_done(w)
            out[k] = w.url
        return out

    for w in ws:
        policy.add_worker(w)
    before = route()
    policy.remove_worker(ws[0])
    after = route()
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == ws[0].url}


def test_cache_aware_sends_a_shared_prefix_to_one_worker_when_balanced():
    ws = workers(4)
    policy = CacheAwarePolicy(seed=0)
    system = "You are a careful assistant who answers in French. " * 4
    picks = set()
    for i in range(20):
        w = policy.select(prompt(system + f"question {i}"), ws)
        picks.add(w.url)
        policy.on_request_done(w)
    assert len(picks) == 1
    assert policy.last_decision == "hit"


def test_cache_aware_sends_to_least_loaded_when_imbalanced():
    ws = workers(2)
    config = CacheAwareConfig(balance_abs_threshold=4, balance_rel_threshold=1.5)
    policy = CacheAwarePolicy(config, seed=0)
    text = "shared prefix " * 20
    owner = policy.select(prompt(text), ws)
    other = ws[1] if owner is ws[0] else ws[0]
    for i in range(4):  # in flight on the owner: still balanced (4 - 0 is not > 4)
        assert policy.select(prompt(text + str(i)), ws) is owner
    assert policy.select(prompt(text + "x"), ws) is other  # 5 vs 0: imbalanced
    assert policy.last_decision == "imbalanced"


def test_cache_aware_miss_goes_to_least_loaded_not_smallest_tree():
    ws = workers(2)
    policy = CacheAwarePolicy(seed=0)
    big = policy.select(prompt("a long cached document " * 50), ws)
    policy.on_request_done(big)
    small = ws[1] if big is ws[0] else ws[0]
    policy.select(prompt("zzz unrelated"), (small,))  # small tree, but one request in flight
    w = policy.select(prompt("completely different text"), ws)
    assert w is big and policy.last_decision == "miss"


def test_cache_aware_min_match_keeps_a_universal_system_prompt_from_pinning():
    ws = workers(4)
    system = "SYSTEM: universal instructions for every tenant. " * 6
    pinned = CacheAwarePolicy(seed=0)
    spread = CacheAwarePolicy(CacheAwareConfig(min_match_chars=len(system) + 20), seed=0)
    for policy in (pinned, spread):
        for i in range(40):
            policy.select(prompt(system + f"user {i}: " + "question text " * 5), ws)
    assert max(pinned.loads.loads.values()) == 40
    assert max(spread.loads.loads.values()) == 10


def test_cache_aware_keeps_a_conversation_on_its_worker_with_spread_prompts():
    ws = workers(3)
    policy = CacheAwarePolicy(CacheAwareConfig(min_match_chars=200), seed=0)
    system = "SYSTEM: shared. " * 5
    homes = {}
    for turn in range(3):
        for c in range(6):
            text = system + "".join(f"conv {c} turn {t}: " + "words " * 40 for t in range(turn + 1))
            w = policy.select(prompt(text), ws)
            policy.on_request_done(w)
            homes.setdefault(c, set()).add(w.url)
    assert all(len(h) == 1 for h in homes.values())
    assert len({next(iter(h)) for h in homes.values()}) == 3


def test_cache_aware_tree_stays_under_its_global_budget():
    ws = workers(3)
    policy = CacheAwarePolicy(CacheAwareConfig(max_tree_size=5_000), seed=0)
    for i in range(300):
        w = policy.select(prompt(f"{i:05d} " + "filler text " * 10), ws)
        policy.on_request_done(w)
        assert policy.tree.total_chars <= 5_000
    policy.tree.check_invariants()


def test_prefix_hash_sticks_to_the_worker_that_saw_the_prefix():
    ws = workers(4)
    policy = make_policy("prefix_hash", seed=0)
    doc = "chapter one. " * 40  # several 128-char chunks
    first = policy.select(prompt(doc + "question A"), ws)
    policy.on_request_done(first)
    for q in "BCDEFG":
        w = policy.select(prompt(doc + "question " + q), ws)
        policy.on_request_done(w)
        assert w is first
    assert policy.last_decision == "hit"


def test_prefix_hash_breaks_affinity_when_its_worker_is_ineligible():
    ws = workers(3)
    policy = make_policy("prefix_hash", seed=0)
    doc = "x" * 1000
    first = policy.select(prompt(doc), ws)
    rest = tuple(w for w in ws if w is not first)
    assert policy.select(prompt(doc), rest) in rest
