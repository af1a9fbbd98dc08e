"""Three real `prefixserve serve` workers on the default model, started once per module.

Workers run as subprocesses through `DataParallelCluster` (the launcher behind
`prefixserve serve --dp-size N`), each with `--max-num-seqs 8` and a small KV pool, their logs
in the pytest temp dir; the cluster's own router runs `cache_aware`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixserve.router.launcher import DataParallelCluster

sys.path.insert(0, str(Path(__file__).parent))  # e2e_client, for the importlib import mode

NUM_WORKERS = 3
WORKER_ARGS = [
    "--max-num-seqs", "8",
    "--num-kv-blocks", "256",
    "--max-model-len", "1024",
    "--log-level", "warning",
    "--log-interval", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataParallelCluster]:
    log_dir = tmp_path_factory.mktemp("workers")
    with DataParallelCluster(
        NUM_WORKERS,
        WORKER_ARGS,
        router_policy="cache_aware",
        router_options={"health_check_interval_secs": 1.0},
        log_dir=log_dir,
        startup_timeout_s=300,
    ) as running:
        yield running
