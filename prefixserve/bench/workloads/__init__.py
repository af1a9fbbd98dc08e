"""Seeded benchmark workloads, each yielding `RequestSpec`s; no HTTP, no tokenizer, no torch."""

from __future__ import annotations

from typing import Any

from prefixserve.bench.workloads.few_shot import FewShot
from prefixserve.bench.workloads.multi_turn import MultiTurn
from prefixserve.bench.workloads.random_prompts import RandomPrompts
from prefixserve.bench.workloads.self_consistency import SelfConsistency
from prefixserve.bench.workloads.shared_prefix import SharedPrefix
from prefixserve.bench.workloads.table_qa import TableQA
from prefixserve.bench.workloads.tree_of_thought import TreeOfThought
from prefixserve.bench.workloads.workload import RequestSpec, Workload, expand

WORKLOADS: dict[str, type[Workload]] = {
    w.name: w
    for w in (
        FewShot,
        SelfConsistency,
        MultiTurn,
        TreeOfThought,
        TableQA,
        SharedPrefix,
        RandomPrompts,
    )
}


def build_workload(name: str, **kwargs: Any) -> Workload:
    """`build_workload("few-shot", num_requests=32, seed=0, num_examples=8)`."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name](**kwargs)


__all__ = ["WORKLOADS", "RequestSpec", "Workload", "build_workload", "expand"]
