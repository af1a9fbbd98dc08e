"""Round robin: the eligible workers in turn, whatever the request."""

from __future__ import annotations

from typing import Any

from prefixserve.router.policies.base import RoutingPolicy, WorkerView, register_policy
from prefixserve.router.request_info import RequestInfo


@register_policy
class RoundRobinPolicy(RoutingPolicy):
    name = "round_robin"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counter = 0

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        worker = view.workers[self._counter % len(view.workers)]
        self._counter += 1
        self.last_decision = "round_robin"
        return worker
