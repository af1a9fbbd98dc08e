"""A worker as the HTTP router sees it: url, health state and circuit breaker.

Health comes from periodic `GET /health` probes: `failure_threshold` consecutive failed
probes mark it unhealthy, `success_threshold` consecutive good ones bring it back. A worker
is *available* when healthy and its breaker lets requests through. Loads live in the policy,
not here.
"""

from __future__ import annotations

from prefixserve.router.circuit_breaker import CLOSED, CircuitBreaker


class RouterWorker:
    def __init__(self, url: str, breaker: CircuitBreaker) -> None:
        self.url = url.rstrip("/")
        self.breaker = breaker
        self.healthy = True
        self.probe_failures = 0
        self.probe_successes = 0

    def available(self, now: float) -> bool:
        return self.healthy and self.breaker.allows(now)

    def record_probe(self, ok: bool, failure_threshold: int, success_threshold: int) -> bool:
        """Count one health probe; returns True when `healthy` changed."""
        if ok:
            self.probe_failures, self.probe_successes = 0, self.probe_successes + 1
            if not self.healthy and self.probe_successes >= success_threshold:
                self.healthy = True
                if self.breaker.state != CLOSED:  # a healthy probe is a fresh start
                    self.breaker.state, self.breaker.failures = CLOSED, 0
                return True
        else:
            self.probe_successes, self.probe_failures = 0, self.probe_failures + 1
            if self.healthy and self.probe_failures >= failure_threshold:
                self.healthy = False
                return True
        return False

    def __repr__(self) -> str:
        return f"RouterWorker({self.url!r}, healthy={self.healthy}, breaker={self.breaker.state})"
