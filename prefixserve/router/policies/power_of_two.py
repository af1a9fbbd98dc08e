"""Power of two choices: draw two distinct random workers, take the less loaded one."""

from __future__ import annotations

from typing import Any

from prefixserve.router.policies.base import RoutingPolicy, WorkerView, register_policy
from prefixserve.router.request_info import RequestInfo


@register_policy
class PowerOfTwoPolicy(RoutingPolicy):
    name = "power_of_two"

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        self.last_decision = "power_of_two"
        n = len(view.workers)
        if n == 1:
            return view.workers[0]
        i, j = self.rng.sample(range(n), 2)
        a, b = view.workers[i], view.workers[j]
        return a if self.loads.get(a.url) <= self.loads.get(b.url) else b
