"""Per-worker circuit breaker: closed -> open after consecutive failures -> half-open.

Closed: requests flow; `failure_threshold` consecutive failures open it. Open: the worker is
skipped for `open_secs`, then half-open. Half-open: requests flow again as probes;
`success_threshold` consecutive successes close it, one failure reopens it. Time comes from
the caller, so the breaker itself holds no clock.
"""

from __future__ import annotations

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 5, success_threshold: int = 2,
                 open_secs: float = 30.0, enabled: bool = True) -> None:
        self.failure_threshold = failure_threshold
        self.success_threshold = success_threshold
        self.open_secs = open_secs
        self.enabled = enabled
        self.state = CLOSED
        self.failures = 0
        self.successes = 0
        self.opened_at = 0.0

    def allows(self, now: float) -> bool:
        if not self.enabled or self.state == CLOSED:
            return True
        if self.state == OPEN and now - self.opened_at >= self.open_secs:
            self.state, self.successes = HALF_OPEN, 0
        return self.state == HALF_OPEN

    def record_success(self) -> None:
        self.failures = 0
        if self.state == HALF_OPEN:
            self.successes += 1
            if self.successes >= self.success_threshold:
                self.state = CLOSED

    def record_failure(self, now: float) -> None:
        self.successes = 0
        self.failures += 1
        if self.state == HALF_OPEN or self.failures >= self.failure_threshold:
            self.state, self.opened_at = OPEN, now
