"""The kv_events policy: an index replayed from worker KV events, scored against load."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from types import SimpleNamespace

from prefixserve.kv_cache import KVCacheManager
from prefixserve.request import Request
from prefixserve.router.kv_block_index import KVBlockIndex, prompt_block_keys
from prefixserve.router.kv_event_poller import RESYNC, KVEventPoller
from prefixserve.router.policies.kv_events import KVEventsConfig, KVEventsPolicy
from prefixserve.router.request_info import RequestInfo

BS = 4


@dataclass(eq=False)
class FakeWorker:
    url: str


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tokens_request(ids: list[int], salt: str | None = None) -> RequestInfo:
    body = {"prompt": ids}
    if salt:
        body["cache_salt"] = salt
    return RequestInfo.from_completion(body)


def run_on(mgr: KVCacheManager, rid: str, ids: list[int], salt: str | None = None) -> int:
    """Prefill a request on a worker's cache manager and finish it; returns its hit tokens."""
    req = Request(request_id=rid, prompt_token_ids=ids, cache_salt=salt)
    hit = mgr.get_computed_blocks(req)
    assert mgr.allocate_slots(req, len(ids) - hit.num_tokens, hit) is not None
    req.num_computed_tokens = len(ids)
    mgr.free(req)
    return hit.num_tokens


def as_json(mgr: KVCacheManager, since: int) -> dict:
    """What a worker's GET /kv_events?since= returns, through a JSON round trip."""
    events = mgr.events.events_since(since) if since >= 0 else None
    if events is None:
        return json.loads(json.dumps({"snapshot": mgr.events.snapshot().to_dict(),
                                      "seq": mgr.events.seq}))
    return json.loads(json.dumps({"events": [e.to_dict() for e in events],
                                  "seq": mgr.events.seq}))


def make_router_side(policy: KVEventsPolicy, workers: dict[str, KVCacheManager]):
    router = SimpleNamespace(policy=policy, workers=workers)
    poller = KVEventPoller(router)

    def sync() -> None:
        for url, mgr in workers.items():
            since = poller.since.get(url, RESYNC)
            poller.apply(url, since, as_json(mgr, since))
    return poller, sync


def test_picks_the_worker_whose_events_show_the_longest_cached_run():
    ws = (FakeWorker("a"), FakeWorker("b"), FakeWorker("c"))
    policy = KVEventsPolicy(KVEventsConfig(kv_block_size=BS, speculative_ttl_secs=0), seed=0)
    mgrs = {w.url: KVCacheManager(64, BS, enable_kv_events=True) for w in ws}
    doc = list(range(100, 140))
    run_on(mgrs["a"], "1", doc[:9])  # 2 blocks of the prompt
    run_on(mgrs["b"], "2", doc[:33])  # 8 blocks
    run_on(mgrs["c"], "3", list(range(500, 540)))  # unrelated
    _, sync = make_router_side(policy, mgrs)
    sync()
    assert policy.select(tokens_request(doc), ws).url == "b"
    assert policy.last_decision == "hit" and policy.last_match == (8 * BS, len(doc))


def test_index_predicts_the_engines_hits_exactly_under_eviction_and_salts():
    rng = random.Random(0)
    urls = ["w0", "w1", "w2"]
    mgrs = {u: KVCacheManager(24, BS, enable_kv_events=True, kv_events_ring_size=8)
            for u in urls}  # few blocks: evictions; short ring: snapshots on lag
    policy = KVEventsPolicy(KVEventsConfig(kv_block_size=BS, speculative_ttl_secs=0), seed=0)
    for u in urls:
        policy.add_worker(FakeWorker(u))
    _, sync = make_router_side(policy, mgrs)
    prefixes = [[rng.randrange(3) for _ in range(rng.randrange(4, 30))] for _ in range(6)]
    for i in range(300):
        ids = rng.choice(prefixes) + [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
        salt = rng.choice([None, None, "tenant-x"])
        if rng.random() < 0.7:
            sync()
            keys = prompt_block_keys(ids, BS, salt)
            runs = policy.index.longest_runs(keys, None, 0.0)
            for u in urls:
                req = Request(request_id=f"probe{i}", prompt_token_ids=ids, cache_salt=salt)
                assert runs.get(u, 0) * BS == mgrs[u].get_computed_blocks(req).num_tokens
        run_on(mgrs[rng.choice(urls)], str(i), ids, salt)


def test_load_outweighs_a_short_prefix_match():
    ws = (FakeWorker("a"), FakeWorker("b"))
    policy = KVEventsPolicy(KVEventsConfig(kv_block_size=BS, speculative_ttl_secs=0), seed=0)
    stored = {"type": "BlockStored", "seq": 1, "block_hashes": ["h0"],
              "parent_block_hash": None, "token_ids": [1, 2, 3, 4], "block_size": BS}
    policy.index.apply_events("a", [stored])
    prompt = [1, 2, 3, 4] + list(range(10, 46))  # 1 of 9 blocks cached on a
    for _ in range(3):
        policy.select(tokens_request([9, 9, 9, 9, 9]), ws[:1])  # a is busy
    assert policy.select(tokens_request(prompt), ws).url == "b"


def test_speculative_entries_route_followers_until_they_expire():
    ws = (FakeWorker("a"), FakeWorker("b"), FakeWorker("c"))
    clock = FakeClock()
    policy = KVEventsPolicy(KVEventsConfig(kv_block_size=BS, speculative_ttl_secs=2.0),
                            seed=0, clock=clock)
    prompt = list(range(64))
    first = policy.select(tokens_request(prompt), ws)
    policy.on_request_done(first)
    assert policy.select(tokens_request(prompt + [1]), ws) is first
    policy.on_request_done(first)
    clock.now = 2.5
    policy.maintain()
    assert policy.index.speculative == {}
    assert policy.select(tokens_request(prompt + [2]), ws).url  # load decides again
    assert policy.last_decision == "miss"


def test_removal_and_clear_events_drop_blocks():
    index = KVBlockIndex()
    stored = {"type": "BlockStored", "seq": 1, "block_hashes": ["h0", "h1"],
              "parent_block_hash": None, "token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "block_size": 4}
    index.apply_events("a", [stored])
    index.apply_events("b", [stored])
    keys = prompt_block_keys([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    assert index.longest_runs(keys, None, 0) == {"a": 2, "b": 2}
    index.apply_events("a", [{"type": "BlockRemoved", "seq": 2, "block_hashes": ["h1"]}])
    index.apply_events("b", [{"type": "AllBlocksCleared", "seq": 2}])
    assert index.longest_runs(keys, None, 0) == {"a": 1}


def test_poller_resyncs_after_a_restart_or_gap():
    policy = KVEventsPolicy(KVEventsConfig(kv_block_size=BS), seed=0)
    router = SimpleNamespace(policy=policy, workers={"a": None})
    poller = KVEventPoller(router)
    poller.apply("a", RESYNC, {"snapshot": {"seq": 5, "blocks": []}, "seq": 5,
                               "kv_cache_usage": 0.5, "block_size": 8})
    assert poller.since["a"] == 5
    assert policy.kv_usage == {"a": 0.5} and policy.block_size == 8
    poller.apply("a", 5, {"events": [], "seq": 2})  # sequence went backwards: restarted
    assert poller.since["a"] == RESYNC
    poller.apply("a", RESYNC, {"snapshot": {"seq": 2, "blocks": []}, "seq": 2})
    poller.apply("a", 2, {"events": [{"type": "AllBlocksCleared", "seq": 9}], "seq": 9})
    assert poller.since["a"] == RESYNC  # events 3..8 are missing
