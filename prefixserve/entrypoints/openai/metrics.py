"""ServerMetrics: the Prometheus metrics of one server, in its own CollectorRegistry.

Names follow vLLM's where vLLM has one (`vllm:prefix_cache_hits_total`, counted in
tokens, `vllm:time_to_first_token_seconds`, ...), each with a `model_name` label; our
own cache facts are `prefixserve_*`. Engine counters and gauges are read at scrape time
from the stats dict the engine thread refreshes after every step (so a scrape never
waits for a step); latency histograms are observed by the serving layer as outputs
reach it. Knows nothing about HTTP routes or the engine's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0)

# stats key -> (metric name, help); counters are exposed with the `_total` suffix
_COUNTERS = {
    "queries": ("vllm:prefix_cache_queries", "Prefix cache queries, in prompt tokens"),
    "hits": ("vllm:prefix_cache_hits", "Prefix cache hits, in prompt tokens"),
    "prompt_tokens": ("vllm:prompt_tokens", "Prompt tokens received"),
    "generation_tokens": ("vllm:generation_tokens", "Tokens generated"),
    "num_preemptions": ("vllm:num_preemptions", "Requests preempted (their blocks freed to make room)"),
    "evictions": ("prefixserve_prefix_cache_evictions", "Cached KV blocks evicted for reuse"),
    "preempted_queries": ("prefixserve_prefix_cache_preempted_queries",
                          "Prefix cache queries of requests resumed after preemption, in tokens"),
    "preempted_hits": ("prefixserve_prefix_cache_preempted_hits",
                       "Prefix cache hits of requests resumed after preemption, in tokens"),
}
_GAUGES = {
    "num_running": ("vllm:num_requests_running", "Requests in the running batch"),
    "num_waiting": ("vllm:num_requests_waiting", "Requests waiting to be scheduled"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "Fraction of KV blocks held by requests (1 = full)"),
    "blocks_cached": ("prefixserve_kv_blocks_cached", "KV blocks holding a hittable prefix (in use or free)"),
    "blocks_free": ("prefixserve_kv_blocks_free", "KV blocks allocatable now (free-cached included)"),
    "blocks_in_use": ("prefixserve_kv_blocks_in_use", "KV blocks held by requests"),
    "num_blocks": ("prefixserve_kv_blocks_total", "KV blocks in the pool"),
    "kv_events_seq": ("prefixserve_kv_events_seq", "Sequence number of the latest KV event"),
}


class _EngineCollector(Collector):
    def __init__(self, model_name: str, stats: Callable[[], dict[str, Any]], info: dict[str, str]) -> None:
        self.model_name = model_name
        self.stats = stats
        self.info = info

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        for key, (name, doc) in _COUNTERS.items():
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric([self.model_name], float(stats.get(key, 0)))
            yield c
        for key, (name, doc) in _GAUGES.items():
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric([self.model_name], float(stats.get(key, 0)))
            yield g
        labels = sorted(self.info)
        g = GaugeMetricFamily("prefixserve_prefix_cache_info", "Prefix cache kind and hash config",
                              labels=["model_name", *labels])
        g.add_metric([self.model_name, *(self.info[k] for k in labels)], 1.0)
        yield g


class ServerMetrics:
    def __init__(self, model_name: str, stats: Callable[[], dict[str, Any]], info: dict[str, Any]) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token",
                              labels, registry=self.registry, buckets=TTFT_BUCKETS).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Time between output deltas",
                             labels, registry=self.registry, buckets=ITL_BUCKETS).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to finish",
                             labels, registry=self.registry, buckets=E2E_BUCKETS).labels(model_name)
        self._success = Counter("vllm:request_success", "Finished requests by finish reason",
                                ["model_name", "finished_reason"], registry=self.registry)
        self.model_name = model_name
        self.registry.register(_EngineCollector(model_name, stats, {k: str(v) for k, v in info.items()}))

    def request_finished(self, finish_reason: str | None) -> None:
        self._success.labels(self.model_name, finish_reason or "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
