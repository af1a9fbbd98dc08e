"""Workload benchmarks for any OpenAI-compatible server (`prefixserve bench`).

Client-side only (httpx, numpy, tqdm, matplotlib): never imports torch or the engine, so it
runs on any machine. Workload generators (`prefixserve.bench.workloads`) need no HTTP at all.
"""

from __future__ import annotations

from prefixserve.bench.workloads import WORKLOADS, RequestSpec, Workload, build_workload, expand

__all__ = ["WORKLOADS", "RequestSpec", "Workload", "build_workload", "expand"]
