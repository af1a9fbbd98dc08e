"""The side-by-side table `prefixserve simulate` prints: one row per policy."""

from __future__ import annotations

from typing import Any

_COLUMNS = [  # (header, width, value)
    ("policy", 16, lambda r: r["policy"]),
    ("workers", 7, lambda r: str(r["workers"])),
    ("requests", 9, lambda r: str(r["completed"])),
    ("hit rate", 8, lambda r: f"{r['hit_rate']:.3f}"),
    ("imbalance", 9, lambda r: f"{r['load_imbalance']:.2f}"),
    ("req/s", 9, lambda r: f"{r['throughput']['requests_per_s']:.1f}"),
    ("out tok/s", 10, lambda r: f"{r['throughput']['output_tokens_per_s']:.0f}"),
    ("TTFT p50", 9, lambda r: f"{r['ttft_ms']['p50']:.0f}"),
    ("p90", 8, lambda r: f"{r['ttft_ms']['p90']:.0f}"),
    ("p99 ms", 8, lambda r: f"{r['ttft_ms']['p99']:.0f}"),
    ("wall s", 7, lambda r: f"{r['wall_s']:.1f}"),
]


def format_table(results: list[dict[str, Any]]) -> str:
    def row(cells: list[str]) -> str:
        first, *rest = cells
        return f"{first:<{_COLUMNS[0][1]}}" + "".join(
            f" {c:>{w}}" for c, (_, w, _) in zip(rest, _COLUMNS[1:], strict=True))

    lines = [row([h for h, _, _ in _COLUMNS])]
    lines += [row([fmt(r) for _, _, fmt in _COLUMNS]) for r in results]
    return "\n".join(lines)
