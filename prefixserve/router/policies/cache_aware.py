"""Cache aware: SGLang router's approximate radix tree with its load-imbalance gate.

    imbalanced = max_load - min_load > balance_abs_threshold
                 and max_load > min_load * balance_rel_threshold
    imbalanced          -> least-loaded worker
    balanced, a hit     -> least-loaded worker among those holding the longest match
    balanced, a miss    -> least-loaded worker (sglang #14650; not the smallest tree)

A hit needs `matched / len(text) > cache_threshold` and `matched >= min_match_chars`; the
minimum keeps one universal system prompt from pinning all traffic to one worker
(production-stack #957). Ties are broken at random. The prompt is inserted under the chosen
worker on every path, so the tree tracks where text really went. `max_tree_size` is a global
character budget enforced reactively on insert and by `maintain()` every
`eviction_interval_secs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefixserve.router.policies.base import (
    PolicyConfig,
    RoutingPolicy,
    Worker,
    WorkerView,
    register_policy,
)
from prefixserve.router.radix_tree import ApproxRadixTree
from prefixserve.router.request_info import RequestInfo


@dataclass(frozen=True)
class CacheAwareConfig(PolicyConfig):
    cache_threshold: float = field(
        default=0.3, metadata={"help": "minimum matched fraction of the prompt for a hit"})
    balance_abs_threshold: int = field(
        default=64, metadata={"help": "imbalanced if max-min in-flight load exceeds this ..."})
    balance_rel_threshold: float = field(
        default=1.5, metadata={"help": "... and max load > min load times this"})
    eviction_interval_secs: float = field(
        default=120.0, metadata={"help": "seconds between background tree evictions"})
    max_tree_size: int = field(
        default=2**26, metadata={"help": "global tree budget in characters (all workers)"})
    min_match_chars: int = field(
        default=0, metadata={"help": "shorter prefix matches count as misses"})


@register_policy
class CacheAwarePolicy(RoutingPolicy):
    name = "cache_aware"
    config_cls = CacheAwareConfig
    config: CacheAwareConfig
    match_unit = "chars"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tree = ApproxRadixTree()
        self._last_eviction = self.clock()

    def remove_worker(self, worker: Worker) -> None:
        super().remove_worker(worker)
        self.tree.remove_tenant(worker.url)

    def maintain(self) -> None:
        now = self.clock()
        if now - self._last_eviction >= self.config.eviction_interval_secs:
            self._last_eviction = now
            self.tree.evict(self.config.max_tree_size)

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        cfg, text = self.config, request_info.text
        lo, hi = self._load_bounds(view)
        if hi - lo > cfg.balance_abs_threshold and hi > lo * cfg.balance_rel_threshold:
            url = self._least_loaded(view).url
            self.last_decision, self.last_match = "imbalanced", (0, len(text))
        else:
            matched, holders = self.tree.match(text, None if view.all_members else view.by_url)
            rate = matched / len(text) if text else 0.0
            if holders and rate > cfg.cache_threshold and matched >= cfg.min_match_chars:
                url = self.loads.least_loaded_of(holders)
                self.last_decision, self.last_match = "hit", (matched, len(text))
            else:
                url = self._least_loaded(view).url
                self.last_decision, self.last_match = "miss", (0, len(text))
        self.tree.insert(text, url)
        if self.tree.total_chars > cfg.max_tree_size:
            self.tree.evict(int(cfg.max_tree_size * 0.9))
        return view.by_url[url]
