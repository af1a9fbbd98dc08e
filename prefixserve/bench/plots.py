"""Benchmark plots (matplotlib, Agg backend): PNGs drawn from reports' per-request records.

ttft_cdf.png (one curve per report), cached_ratio.png (cached / prompt tokens over request
index) and turn_ttft.png (median TTFT per conversation turn or tree depth, when a workload
has turns). Knows nothing about HTTP; works on reports loaded back from JSON.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def ok_records(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report.get("requests", []) if r.get("ok")]


def plot_ttft_cdf(reports: Sequence[dict[str, Any]], labels: Sequence[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for report, label in zip(reports, labels, strict=True):
        ttft = np.sort([r["ttft_s"] * 1000 for r in ok_records(report) if r["ttft_s"] is not None])
        if len(ttft):
            ax.step(ttft, np.arange(1, len(ttft) + 1) / len(ttft), where="post", label=label)
    ax.set(xlabel="time to first token (ms)", ylabel="fraction of requests", ylim=(0, 1.02),
           title="TTFT CDF")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, path)


def plot_cached_ratio(reports: Sequence[dict[str, Any]], labels: Sequence[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for report, label in zip(reports, labels, strict=True):
        points = [(r["index"], r["cached_tokens"] / r["prompt_tokens"]) for r in ok_records(report)
                  if r["cached_tokens"] is not None and r["prompt_tokens"]]  # fmt: skip
        if points:
            x, y = zip(*points, strict=True)
            ax.plot(x, y, marker="o", markersize=3, linewidth=0.8, label=label)
    ax.set(xlabel="request index (dispatch order)", ylabel="cached / prompt tokens",
           ylim=(-0.02, 1.02), title="Prefix cache hits per request")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, path)


def plot_turn_ttft(reports: Sequence[dict[str, Any]], labels: Sequence[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for report, label in zip(reports, labels, strict=True):
        by_turn: dict[int, list[float]] = defaultdict(list)
        for r in ok_records(report):
            if r["ttft_s"] is not None:
                by_turn[r["turn"]].append(r["ttft_s"] * 1000)
        turns = sorted(by_turn)
        ax.plot(turns, [np.median(by_turn[t]) for t in turns], marker="o", label=label)
    ax.set(xlabel="turn (or tree depth)", ylabel="median TTFT (ms)", title="TTFT per turn")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, path)


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(
    reports: Sequence[dict[str, Any]], labels: Sequence[str], out_dir: str | Path
) -> list[Path]:
    """Write the PNGs that apply to these reports into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "ttft_cdf.png"]
    plot_ttft_cdf(reports, labels, paths[-1])
    if any(r["cached_tokens"] is not None for rep in reports for r in ok_records(rep)):
        paths.append(out / "cached_ratio.png")
        plot_cached_ratio(reports, labels, paths[-1])
    if any(r["turn"] > 0 for rep in reports for r in ok_records(rep)):
        paths.append(out / "turn_ttft.png")
        plot_turn_ttft(reports, labels, paths[-1])
    return paths
