"""/metrics (Prometheus, vLLM's names), /cache/stats and the /kv_events feed a router consumes."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prefixserve.kv_cache.block_hasher import hash_token_blocks
from prefixserve.kv_cache.kv_events import KVEventIndex, decode_hash

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"
PREFIX = "System: you answer questions about the solar system, briefly and precisely. " * 3


def _samples(http) -> dict[str, float]:
    text = http.get("/metrics").text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("model_name") == MODEL and "finished_reason" not in s.labels and "le" not in s.labels:
                out[s.name] = s.value
    return out


def _complete(http, prompt: str | list[int], salt: str | None = None) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "temperature": 0, "cache_salt": salt}
    resp = http.post("/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_metrics_parse_and_the_hit_counter_rises_with_hits(server) -> None:
    with server.client() as http:
        _complete(http, PREFIX + "Q: how many planets?")
        before = _samples(http)
        reply = _complete(http, PREFIX + "Q: which is largest?")
        after = _samples(http)
    cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 32
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == cached
    assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] == \
        reply["usage"]["prompt_tokens"]
    assert after["vllm:prompt_tokens_total"] > before["vllm:prompt_tokens_total"]
    assert after["vllm:generation_tokens_total"] >= before["vllm:generation_tokens_total"] + 1
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "prefixserve_prefix_cache_evictions_total",
                 "prefixserve_kv_blocks_cached", "prefixserve_prefix_cache_info"):
        assert name in after, name
    assert after["vllm:e2e_request_latency_seconds_count"] >= 2
    assert after["prefixserve_kv_blocks_cached"] >= 3


def test_cache_stats_reports_counts_and_hash_config(server) -> None:
    with server.client() as http:
        stats = http.get("/cache/stats").json()
    for key in ("queries", "hits", "hit_rate", "num_blocks", "blocks_cached", "blocks_free", "blocks_in_use",
                "evictions", "num_running", "num_waiting", "kv_cache_usage"):
        assert key in stats, key
    assert stats["block_size"] == 16 and stats["hash_algo"] == "sha256" and stats["hash_seed"] == 0


def test_kv_events_replayed_from_zero_reproduce_the_cached_block_count(server) -> None:
    with server.client() as http:
        _complete(http, PREFIX + "Q: what orbits Mars?", salt="events")
        feed = http.get("/kv_events", params={"since": 0}).json()
        stats = http.get("/cache/stats").json()
        index = KVEventIndex()
        index.apply_all(feed["events"])
        assert feed["seq"] == index.seq >= 1
        assert len(index) == stats["blocks_cached"]

        # incremental polling from the last seq sees only new events, and still agrees
        _complete(http, "A different prompt about comets and their tails, long enough to fill blocks. " * 2)
        more = http.get("/kv_events", params={"since": feed["seq"]}).json()
        assert more["events"] and all(e["seq"] > feed["seq"] for e in more["events"])
        index.apply_all(more["events"])
        assert len(index) == http.get("/cache/stats").json()["blocks_cached"]
        assert http.get("/kv_events", params={"since": more["seq"]}).json()["events"] == []


def test_kv_events_without_since_give_a_snapshot_a_router_can_hash_against(server) -> None:
    with server.client() as http:
        prompt_ids = _complete(http, PREFIX + "Q: is Pluto a planet?")
        feed = http.get("/kv_events").json()
        assert http.get("/kv_events", params={"since": -1}).json().keys() == feed.keys()
        stats = http.get("/cache/stats").json()
    assert "snapshot" in feed and feed["snapshot"]["seq"] == feed["seq"]
    index = KVEventIndex()
    index.load_snapshot(feed["snapshot"])
    assert len(index) == stats["blocks_cached"]
    # the router hashes a prompt with the advertised config and finds the worker's blocks
    ids = server.engine.tokenizer.encode(PREFIX + "Q: is Pluto a planet?")
    hashes = hash_token_blocks(ids, feed["block_size"], feed["hash_seed"], feed["hash_algo"])
    assert prompt_ids["usage"]["prompt_tokens"] == len(ids)
    assert len(hashes) >= 3 and all(decode_hash(h.hex()) in index for h in hashes)


def test_reset_prefix_cache_clears_blocks_and_emits_a_clear_event(server) -> None:
    with server.client() as http:
        _complete(http, PREFIX + "Q: how hot is Venus?")
        seq = http.get("/kv_events").json()["seq"]
        assert http.post("/reset_prefix_cache").json() == {"success": True}
        stats = http.get("/cache/stats").json()
        events = http.get("/kv_events", params={"since": seq}).json()["events"]
        again = _complete(http, PREFIX + "Q: how hot is Venus?")
    assert stats["blocks_cached"] == 0
    assert [e["type"] for e in events] == ["AllBlocksCleared"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_radix_cache_server_reports_the_same_feed(make_server) -> None:
    radix = make_server(prefix_cache="radix")
    with radix.client() as http:
        _complete(http, PREFIX + "Q: what is a comet?")
        hit = _complete(http, PREFIX + "Q: what is a meteor?")
        feed = http.get("/kv_events", params={"since": 0}).json()
        stats = http.get("/cache/stats").json()
        assert http.post("/reset_prefix_cache").json() == {"success": True}
        cleared = http.get("/cache/stats").json()
    assert feed["prefix_cache"] == "radix" and hit["usage"]["prompt_tokens_details"]["cached_tokens"] >= 32
    index = KVEventIndex()
    index.apply_all(feed["events"])
    assert len(index) == stats["blocks_cached"] >= 3
    assert cleared["blocks_cached"] == 0
