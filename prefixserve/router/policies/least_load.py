"""Least load: the worker with the fewest in-flight requests (random among ties).

In-flight counts are the router's own, incremented in `select()` before dispatch, so a burst
of simultaneous requests spreads instead of piling onto the worker that looked idle.
"""

from __future__ import annotations

from typing import Any

from prefixserve.router.policies.base import RoutingPolicy, WorkerView, register_policy
from prefixserve.router.request_info import RequestInfo


@register_policy
class LeastLoadPolicy(RoutingPolicy):
    name = "least_load"

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        self.last_decision = "least_load"
        return self._least_loaded(view)
