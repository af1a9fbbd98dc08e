"""SimMetrics: what one simulated run measured, and its summary as a JSON-ready dict.

Hit rate is cached prompt tokens / prompt tokens over every admitted request (the worker's
own KV cache counted them, at admission); load imbalance is max / mean requests routed per
worker, over all workers (an idle worker counts as zero); throughput is completed requests
and output tokens per simulated second (first arrival to last completion); TTFT is first
token minus arrival at the router, in simulated milliseconds. It knows nothing of events.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 99)


def percentiles(values: array | list[float], scale: float = 1.0) -> dict[str, float]:
    """Nearest-rank p50/p90/p99 and the mean, times `scale`; zeros when empty."""
    if not values:
        return {**{f"p{p}": 0.0 for p in PERCENTILES}, "mean": 0.0}
    ordered = sorted(values)
    n = len(ordered)
    out = {f"p{p}": round(ordered[min(n - 1, max(0, math.ceil(p / 100 * n) - 1))] * scale, 3)
           for p in PERCENTILES}
    out["mean"] = round(sum(ordered) / n * scale, 3)
    return out


@dataclass
class SimMetrics:
    ttft_s: array = field(default_factory=lambda: array("d"))
    latency_s: array = field(default_factory=lambda: array("d"))
    completed: int = 0
    rejected: int = 0
    output_tokens: int = 0
    last_finish: float = 0.0
    decisions: Counter = field(default_factory=Counter)

    def record_done(self, arrival: float, first_token_at: float, now: float,
                    output_tokens: int) -> None:
        self.ttft_s.append(first_token_at - arrival)
        self.latency_s.append(now - arrival)
        self.completed += 1
        self.output_tokens += output_tokens
        self.last_finish = max(self.last_finish, now)

    def summary(self, policy: str, workers: list[Any], wall_s: float) -> dict[str, Any]:
        routed = [w.num_routed for w in workers]
        prompt = sum(w.prompt_tokens for w in workers)
        cached = sum(w.cached_tokens for w in workers)
        mean = sum(routed) / len(routed) if routed else 0.0
        span = self.last_finish
        return {
            "policy": policy,
            "workers": len(workers),
            "requests": sum(routed),
            "completed": self.completed,
            "rejected": self.rejected,
            "hit_rate": round(cached / prompt, 6) if prompt else 0.0,
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "output_tokens": self.output_tokens,
            "load_imbalance": round(max(routed) / mean, 4) if mean else 0.0,
            "requests_per_worker": {"min": min(routed, default=0), "max": max(routed, default=0),
                                    "mean": round(mean, 3)},
            "throughput": {"requests_per_s": round(self.completed / span, 3) if span else 0.0,
                           "output_tokens_per_s": round(self.output_tokens / span, 3) if span else 0.0},
            "ttft_ms": percentiles(self.ttft_s, 1000.0),
            "latency_ms": percentiles(self.latency_s, 1000.0),
            "sim_time_s": round(span, 6),
            "kv_evictions": sum(w.kv.num_evictions for w in workers),
            "engine_steps": sum(w.num_steps for w in workers),
            "decisions": dict(sorted(self.decisions.items())),
            "wall_s": round(wall_s, 3),
        }
