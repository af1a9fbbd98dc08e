"""Prometheus metrics of one router (its own registry, so several routers fit in a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class RouterMetrics:
    def __init__(self, policy_name: str) -> None:
        self.registry = CollectorRegistry()
        self.policy = policy_name
        p = "prefixserve_router_"
        r = self.registry
        self.requests = Counter(p + "requests", "requests dispatched to a worker", ["worker"],
                                registry=r)
        self.errors = Counter(p + "request_errors", "failed attempts (connect errors, 5xx)",
                              ["worker"], registry=r)
        self.retries = Counter(p + "retries", "attempts retried on another worker", registry=r)
        self.unrouted = Counter(p + "unrouted_requests", "requests no worker could answer",
                                registry=r)
        self.decisions = Counter(p + "policy_decisions", "routing decisions by kind",
                                 ["policy", "decision", "worker"], registry=r)
        self.inflight = Gauge(p + "inflight_requests", "requests in flight per worker",
                              ["worker"], registry=r)
        self.healthy = Gauge(p + "worker_healthy", "1 if the worker is available", ["worker"],
                             registry=r)
        self.matched = Counter(p + "estimated_prefix_matched",
                               "prompt units (chars or tokens) the policy expects cached",
                               registry=r)
        self.queried = Counter(p + "estimated_prefix_queried",
                               "prompt units (chars or tokens) routed by a prefix policy",
                               registry=r)
        self.hit_rate = Gauge(p + "estimated_prefix_hit_rate",
                              "estimated_prefix_matched / estimated_prefix_queried", registry=r)
        self._matched = 0
        self._queried = 0

    def record_decision(self, worker: str, decision: str, match: tuple[int, int]) -> None:
        self.requests.labels(worker).inc()
        self.decisions.labels(self.policy, decision or "none", worker).inc()
        matched, total = match
        if total:
            self._matched += matched
            self._queried += total
            self.matched.inc(matched)
            self.queried.inc(total)
            self.hit_rate.set(self._matched / self._queried)

    def forget_worker(self, worker: str) -> None:
        for metric in (self.inflight, self.healthy):
            try:
                metric.remove(worker)
            except KeyError:
                pass

    def render(self) -> bytes:
        return generate_latest(self.registry)
