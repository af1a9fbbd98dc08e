from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # fake_worker, for the importlib import mode

from fake_worker import FakeWorker  # noqa: E402


@pytest.fixture
def fake_workers():
    started: list[FakeWorker] = []

    def make(n: int, **kwargs) -> list[FakeWorker]:
        ws = [FakeWorker(f"w{len(started) + i}", **kwargs).start() for i in range(n)]
        started.extend(ws)
        return ws

    yield make
    for w in started:
        if w.thread.is_alive():
            w.kill()
