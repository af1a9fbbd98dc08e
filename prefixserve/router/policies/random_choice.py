"""Random: a uniformly random eligible worker."""

from __future__ import annotations

from typing import Any

from prefixserve.router.policies.base import RoutingPolicy, WorkerView, register_policy
from prefixserve.router.request_info import RequestInfo


@register_policy
class RandomPolicy(RoutingPolicy):
    name = "random"

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        self.last_decision = "random"
        return view.workers[self.rng.randrange(len(view.workers))]
