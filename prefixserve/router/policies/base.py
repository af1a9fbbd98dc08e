"""The routing policy interface, its config base and the name -> class registry.

A policy turns (request, eligible workers) into one worker. It is pure computation: no I/O,
no clocks except the injected `clock`, so the HTTP router and the cluster simulator drive the
same objects. Every `select()` counts one in-flight request on the chosen worker *before*
the caller dispatches, and the caller pairs it with exactly one `on_request_done()` (also on
failure), so loads never drift.

Workers are any objects with a `url` attribute. `add_worker`/`remove_worker` change
membership (rings, trees); the `workers` passed to `select()` are the members that may take a
request right now (healthy, circuit closed). Pass the same tuple while that set is unchanged:
the policy indexes it once and reuses the index, so the common path stays O(1) in the fleet
size.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

from prefixserve.router.load_tracker import LoadTracker
from prefixserve.router.request_info import RequestInfo


class Worker(Protocol):
    url: str


class NoWorkerAvailable(RuntimeError):
    pass


@dataclass(frozen=True)
class PolicyConfig:
    """Base of the per-policy option dataclasses; each field becomes `--field-name`."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"--{f.name.replace('_', '-')} must be >= 0, got {value}")


@dataclass(frozen=True)
class WorkerView:
    """The eligible workers of one `select()` call, indexed once per distinct tuple."""

    workers: tuple[Any, ...]
    by_url: dict[str, Any]
    all_members: bool  # every member is eligible: the policy's global structures apply as is


_REGISTRY: dict[str, type[RoutingPolicy]] = {}


def register_policy(cls: type[RoutingPolicy]) -> type[RoutingPolicy]:
    _REGISTRY[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    return list(_REGISTRY)


def policy_class(name: str) -> type[RoutingPolicy]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {policy_names()}")
    return _REGISTRY[name]


class RoutingPolicy(ABC):
    name: ClassVar[str] = ""
    config_cls: ClassVar[type[PolicyConfig]] = PolicyConfig
    match_unit: ClassVar[str] = ""  # "chars" | "tokens" for policies that estimate hits

    def __init__(self, config: PolicyConfig | None = None, *, seed: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config if config is not None else self.config_cls()
        self.rng = random.Random(seed)
        self.clock = clock
        self.loads = LoadTracker(self.rng)
        self.members: dict[str, Any] = {}
        self.last_decision = ""  # why the last select() chose its worker (for metrics)
        self.last_match = (0, 0)  # (estimated cached units, prompt units) of the last select
        self._view_key: tuple[Any, ...] | None = None
        self._view: WorkerView | None = None

    # membership -----------------------------------------------------------------------
    def add_worker(self, worker: Worker) -> None:
        self.members[worker.url] = worker
        self.loads.add(worker.url)
        self._view_key = None

    def remove_worker(self, worker: Worker) -> None:
        self.members.pop(worker.url, None)
        self.loads.remove(worker.url)
        self._view_key = None

    # routing --------------------------------------------------------------------------
    def select(self, request_info: RequestInfo, workers: Sequence[Worker]) -> Worker:
        """Choose a worker for this request and count it as in flight there."""
        if not workers:
            raise NoWorkerAvailable("no eligible worker")
        view = self._index(workers)
        worker = self._choose(request_info, view)
        self.loads.inc(worker.url)
        return worker

    def on_request_done(self, worker: Worker, request_info: RequestInfo | None = None,
                        success: bool = True) -> None:
        """The request dispatched to `worker` by `select()` finished (or failed)."""
        self.loads.dec(worker.url)

    def maintain(self) -> None:  # noqa: B027  (optional hook, a no-op by default)
        """Periodic housekeeping (eviction, expiry); the router calls it in the background."""

    def load(self, url: str) -> int:
        return self.loads.get(url)

    @abstractmethod
    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any: ...

    # helpers for subclasses -----------------------------------------------------------
    def _index(self, workers: Sequence[Worker]) -> WorkerView:
        if workers is self._view_key and self._view is not None:
            return self._view
        for w in workers:
            if w.url not in self.members:
                self.add_worker(w)
        by_url = {w.url: w for w in workers}
        view = WorkerView(tuple(workers), by_url, len(by_url) == len(self.members))
        if isinstance(workers, tuple):  # immutable: safe to recognise by identity next time
            self._view_key, self._view = workers, view
        return view

    def _least_loaded(self, view: WorkerView) -> Any:
        if view.all_members:
            return view.by_url[self.loads.least_loaded()]
        return view.by_url[self.loads.least_loaded_of(view.by_url)]

    def _load_bounds(self, view: WorkerView) -> tuple[int, int]:
        if view.all_members:
            return self.loads.min_load, self.loads.max_load
        loads = [self.loads.get(u) for u in view.by_url]
        return min(loads), max(loads)

    def _total_load(self, view: WorkerView) -> int:
        if view.all_members:
            return self.loads.total
        return sum(self.loads.get(u) for u in view.by_url)
