"""End to end: the router app in front of fake OpenAI-compatible workers on loopback."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from prefixserve.router.cli import run_router_in_process
from prefixserve.router.router import WORKER_HEADER


def complete(client: httpx.Client, router_url: str, prompt: str = "hi", **extra) -> httpx.Response:
    return client.post(f"{router_url}/v1/completions",
                       json={"model": "fake", "prompt": prompt, "max_tokens": 4, **extra})


def test_completion_chat_and_models_pass_through(fake_workers):
    ws = fake_workers(2)
    with run_router_in_process([w.url for w in ws], "round_robin") as router, httpx.Client() as c:
        r = complete(c, router.url)
        assert r.status_code == 200
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        chat = c.post(f"{router.url}/v1/chat/completions",
                      json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
        assert chat.json()["choices"][0]["message"]["content"].startswith("hello from")
        assert {r.headers[WORKER_HEADER], chat.headers[WORKER_HEADER]} == {w.url for w in ws}
        assert c.get(f"{router.url}/v1/models").json()["data"][0]["id"] == "fake"
        assert c.get(f"{router.url}/health").status_code == 200


def test_streaming_passes_through_chunk_by_chunk(fake_workers):
    (w,) = fake_workers(1, stream_chunks=5)
    with run_router_in_process([w.url], "least_load") as router, httpx.Client() as c:
        with c.stream("POST", f"{router.url}/v1/completions",
                      json={"prompt": "hi", "stream": True}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        assert [json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]] == \
            [f"tok{i} " for i in range(5)]
        assert router.router.policy.loads.total == 0  # the stream's end settled its load


def test_cache_aware_routes_a_shared_prefix_to_one_worker(fake_workers):
    ws = fake_workers(3)
    with run_router_in_process([w.url for w in ws], "cache_aware") as router, httpx.Client() as c:
        doc = "a long shared document about routing. " * 20
        served = {complete(c, router.url, doc + f"question {i}").headers[WORKER_HEADER]
                  for i in range(8)}
        assert len(served) == 1


def test_a_worker_killed_mid_run_loses_no_request(fake_workers):
    ws = fake_workers(3, delay=0.02)
    with run_router_in_process([w.url for w in ws], "round_robin",
                               health_check_interval_secs=0.2) as router:
        def send(i: int) -> int:
            with httpx.Client(timeout=30) as c:
                return complete(c, router.url, f"prompt {i}").status_code

        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(send, i) for i in range(30)]
            time.sleep(0.1)
            ws[1].kill()
            statuses = [f.result() for f in futures]
        assert statuses == [200] * 30
        time.sleep(1.0)  # health probes mark it down
        assert not router.router.workers[ws[1].url].available(time.monotonic())
        before = ws[0].served + ws[2].served
        with httpx.Client() as c:
            assert all(complete(c, router.url).status_code == 200 for _ in range(10))
        assert ws[0].served + ws[2].served == before + 10


def test_5xx_is_retried_on_another_worker_and_opens_the_breaker(fake_workers):
    bad, good = fake_workers(2)
    bad.fail_status = 500
    with run_router_in_process([bad.url, good.url], "round_robin", cb_failure_threshold=2,
                               cb_open_secs=60) as router, httpx.Client() as c:
        for _ in range(6):
            r = complete(c, router.url)
            assert r.status_code == 200 and r.headers[WORKER_HEADER] == good.url
        assert router.router.workers[bad.url].breaker.state == "open"
        assert good.served == 6


def test_all_workers_failing_returns_the_workers_error(fake_workers):
    (bad,) = fake_workers(1)
    bad.fail_status = 503
    with run_router_in_process([bad.url], "random", max_retries=1,
                               retry_backoff_secs=0.0) as router, httpx.Client() as c:
        r = complete(c, router.url)
        assert r.status_code == 503 and r.json()["error"]["message"] == "boom"


def test_unhealthy_worker_is_skipped_and_rejoins(fake_workers):
    a, b = fake_workers(2)
    with run_router_in_process([a.url, b.url], "round_robin", health_check_interval_secs=0.1,
                               health_failure_threshold=2, health_success_threshold=2
                               ) as router, httpx.Client() as c:
        b.healthy = False
        time.sleep(0.6)
        assert {complete(c, router.url).headers[WORKER_HEADER] for _ in range(6)} == {a.url}
        b.healthy = True
        time.sleep(0.6)
        assert {complete(c, router.url).headers[WORKER_HEADER] for _ in range(6)} == {a.url, b.url}


def test_workers_added_at_runtime_get_traffic_and_removed_ones_do_not(fake_workers):
    a, b = fake_workers(2)
    with run_router_in_process([a.url], "round_robin") as router, httpx.Client() as c:
        assert c.post(f"{router.url}/workers", json={"url": b.url}).status_code == 200
        served = {complete(c, router.url).headers[WORKER_HEADER] for _ in range(4)}
        assert served == {a.url, b.url}
        assert c.request("DELETE", f"{router.url}/workers", json={"url": a.url}).status_code == 200
        a_before = a.served
        assert {complete(c, router.url).headers[WORKER_HEADER] for _ in range(4)} == {b.url}
        assert a.served == a_before
        assert c.delete(f"{router.url}/workers", params={"url": a.url}).status_code == 404
        listed = c.get(f"{router.url}/workers").json()["workers"]
        assert [w["url"] for w in listed] == [b.url]


def test_metrics_parse_with_prometheus_parser(fake_workers):
    ws = fake_workers(2)
    with run_router_in_process([w.url for w in ws], "prefix_hash") as router, httpx.Client() as c:
        for i in range(4):
            complete(c, router.url, "shared prefix " * 20 + str(i))
        text = c.get(f"{router.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["prefixserve_router_requests"]
    assert sum(s.value for s in requests.samples if s.name.endswith("_total")) == 4
    decisions = {s.labels["decision"] for s in families["prefixserve_router_policy_decisions"].samples
                 if s.name.endswith("_total")}
    assert decisions == {"hit", "miss"}
    rate = families["prefixserve_router_estimated_prefix_hit_rate"].samples[0].value
    assert 0.5 < rate < 1.0
    assert "prefixserve_router_inflight_requests" in families


def test_kv_events_routes_to_the_worker_that_reports_the_blocks(fake_workers):
    ws = fake_workers(3)
    doc = list(range(1000, 1064))
    ws[2].events.block_stored([f"{i:02x}".encode() for i in range(8)], None, doc[:32], 4)
    with run_router_in_process([w.url for w in ws], "kv_events", kv_block_size=4,
                               kv_events_poll_interval_secs=0.05) as router, httpx.Client() as c:
        time.sleep(0.3)
        r = complete(c, router.url, doc)
        assert r.headers[WORKER_HEADER] == ws[2].url
