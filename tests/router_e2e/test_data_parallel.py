"""The router end to end over three real workers: prefix-aware policies find cached prefixes
that round robin misses, a crashed worker loses no request, and a worker added at runtime gets
traffic. The tests share one cluster; the crash test runs last because it kills a worker.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from e2e_client import Answer, complete, complete_all, reset_caches

from prefixserve.bench.text import TextGenerator
from prefixserve.router.cli import run_router_in_process
from prefixserve.router.launcher import DataParallelCluster, model_tokenizer_path

pytestmark = pytest.mark.slow

NUM_GROUPS, PER_GROUP = 3, 4


def shared_prefix_prompts(seed: int = 0) -> list[str]:
    """3 groups x 4 prompts: a ~400-token system prompt each, then a short question; shuffled."""
    gen = TextGenerator(seed)
    prompts = []
    for g in range(NUM_GROUPS):
        system = f"System {g}: {gen.paragraph(350)}\n\n"
        prompts += [f"{system}Question: {gen.sentence(12)}\nAnswer:" for _ in range(PER_GROUP)]
    random.Random(seed).shuffle(prompts)
    return prompts


def cached_tokens_under(policy: str, cluster: DataParallelCluster, prompts: list[str]) -> int:
    reset_caches(cluster.worker_urls)
    options = {"tokenizer": model_tokenizer_path([])} if policy == "kv_events" else {}
    with run_router_in_process(cluster.worker_urls, policy=policy, seed=0, **options) as router:
        answers = complete_all(router.url, prompts, concurrency=3)
    assert [a.status for a in answers] == [200] * len(prompts), answers
    assert all(a.prompt_tokens > 380 for a in answers)
    return sum(a.cached_tokens for a in answers)


def test_prefix_aware_policies_hit_more_cache_than_round_robin(cluster: DataParallelCluster):
    prompts = shared_prefix_prompts()
    cached = {
        p: cached_tokens_under(p, cluster, prompts)
        for p in ("round_robin", "cache_aware", "kv_events")
    }
    print(f"summed cached_tokens over {len(prompts)} requests: {cached}")
    assert cached["cache_aware"] > cached["round_robin"]
    assert cached["kv_events"] > cached["round_robin"]


def test_worker_added_at_runtime_receives_traffic(cluster: DataParallelCluster):
    extra = cluster.spawn_worker()
    cluster.wait_healthy([extra])
    resp = httpx.post(cluster.url + "/workers", json={"url": extra.url}, timeout=10)
    assert resp.status_code == 200 and extra.url in resp.json()["workers"]
    # Four unrelated prompts at once over four idle workers: cache_aware sends each miss to
    # the least-loaded worker, so every worker, the new one included, gets one.
    gen = TextGenerator(1)
    prompts = [f"Note {i}: {gen.paragraph(40)}" for i in range(4)]
    answers = complete_all(cluster.url, prompts, concurrency=4)
    assert [a.status for a in answers] == [200] * 4
    assert extra.url in {a.worker for a in answers}
    stats = httpx.get(extra.url + "/cache/stats", timeout=10).json()
    assert stats["requests"] >= 1


def test_worker_killed_mid_run_loses_no_request(cluster: DataParallelCluster):
    victim = cluster.workers[0]
    gen = TextGenerator(2)
    prompts = [f"Report {i}: {gen.paragraph(60)}" for i in range(12)]
    answers: list[Answer] = []
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(complete, cluster.url, p) for p in prompts]
        busy = _wait_until_busy(cluster.url, victim.url, timeout=60)
        cluster.kill_worker(0)
        answers = [f.result() for f in futures]
    assert busy, "the victim never had a request in flight"
    assert victim.exit_code() is not None
    assert [a.status for a in answers] == [200] * len(prompts), answers
    assert all(a.text for a in answers)
    assert victim.url not in {a.worker for a in answers}


def _wait_until_busy(router_url: str, worker_url: str, timeout: float) -> bool:
    """Wait until the router counts a request in flight on `worker_url`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = httpx.get(router_url + "/workers", timeout=10).json()["workers"]
        if any(w["url"] == worker_url and w["in_flight"] > 0 for w in workers):
            return True
        time.sleep(0.05)
    return False
