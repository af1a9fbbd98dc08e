"""Benchmark reports: statistics of one run's RequestResults, and a side-by-side comparison.

A report is a plain JSON-ready dict (the `--out` file): the summary keys first, then the
per-request records that the plots read. Knows nothing about HTTP or workloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prefixserve.bench.client import RequestResult

MAX_ERROR_MESSAGES = 5


def latency_stats(values_s: Sequence[float]) -> dict[str, float | None]:
    """mean/p50/p90/p99 in milliseconds; None when there is no value."""
    if not values_s:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ms = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {"mean": round(float(ms.mean()), 3), "p50": round(float(p50), 3),
            "p90": round(float(p90), 3), "p99": round(float(p99), 3)}  # fmt: skip


def time_per_output_token(r: RequestResult, n: int) -> float | None:
    """Decode time per token after the first, per choice; None for one-token answers."""
    per_choice = r.completion_tokens / max(n, 1)
    if r.ttft_s is None or r.e2e_s is None or per_choice <= 1:
        return None
    return (r.e2e_s - r.ttft_s) / (per_choice - 1)


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    meta: dict[str, Any],
    n_per_request: int = 1,
) -> dict[str, Any]:
    """The report of one run; `meta` (workload, base_url, ...) is copied in first."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    tpots = [t for r in ok if (t := time_per_output_token(r, n_per_request)) is not None]
    output_tokens = sum(r.completion_tokens for r in ok)
    with_usage = [r for r in ok if r.prompt_tokens is not None]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in with_usage)
    with_cache = [r for r in with_usage if r.cached_tokens is not None]
    cached_tokens = sum(r.cached_tokens or 0 for r in with_cache)
    cache_prompt_tokens = sum(r.prompt_tokens or 0 for r in with_cache)
    duration = max(duration_s, 1e-9)
    report: dict[str, Any] = dict(meta)
    report.update({
        "num_requests": len(results),
        "completed": len(ok),
        "duration_s": round(duration_s, 3),
        "ttft_ms": latency_stats([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_ms": latency_stats(tpots),
        "e2e_ms": latency_stats([r.e2e_s for r in ok if r.e2e_s is not None]),
        "request_throughput": round(len(ok) / duration, 4),
        "output_throughput": round(output_tokens / duration, 3),
        "input_throughput": round(prompt_tokens / duration, 3) if with_usage else None,
        "total_prompt_tokens": prompt_tokens if with_usage else None,
        "total_cached_tokens": cached_tokens if with_cache else None,
        "total_output_tokens": output_tokens,
        "cached_token_ratio": (
            round(cached_tokens / cache_prompt_tokens, 4) if cache_prompt_tokens else None
        ),
        "usage_reported": f"{len(with_usage)}/{len(ok)}",
        "errors": {
            "count": len(failed),
            "messages": unique_first([r.error for r in failed], MAX_ERROR_MESSAGES),
        },
    })  # fmt: skip
    report["requests"] = [r.to_record() for r in sorted(results, key=lambda r: r.index)]
    return report


def unique_first(messages: Sequence[str], k: int) -> list[str]:
    out: list[str] = []
    for m in messages:
        if m not in out:
            out.append(m)
        if len(out) == k:
            break
    return out


def summary_line(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its per-request records (the one JSON line printed to stdout)."""
    return {k: v for k, v in report.items() if k != "requests"}


COMPARE_ROWS: list[tuple[str, str]] = [
    ("workload", "workload"),
    ("base_url", "base_url"),
    ("requests", "num_requests"),
    ("completed", "completed"),
    ("errors", "errors.count"),
    ("duration (s)", "duration_s"),
    ("TTFT p50 (ms)", "ttft_ms.p50"),
    ("TTFT p90 (ms)", "ttft_ms.p90"),
    ("TTFT p99 (ms)", "ttft_ms.p99"),
    ("TPOT p50 (ms)", "tpot_ms.p50"),
    ("TPOT p99 (ms)", "tpot_ms.p99"),
    ("E2E p50 (ms)", "e2e_ms.p50"),
    ("E2E p99 (ms)", "e2e_ms.p99"),
    ("requests/s", "request_throughput"),
    ("output tok/s", "output_throughput"),
    ("cached token ratio", "cached_token_ratio"),
]


def lookup(report: dict[str, Any], dotted: str) -> Any:
    value: Any = report
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def format_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def compare_table(reports: Sequence[dict[str, Any]], labels: Sequence[str]) -> str:
    """One plain-text table, a column per report, a row per metric."""
    rows = [["metric", *labels]]
    rows += [[name, *(format_value(lookup(r, key)) for r in reports)] for name, key in COMPARE_ROWS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in rows]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def label_for(path: str | Path) -> str:
    return Path(path).stem
