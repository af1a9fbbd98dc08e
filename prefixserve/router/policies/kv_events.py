"""KV events: route by the blocks each worker reports cached, weighed against its load.

The index (`KVBlockIndex`) is fed by the router's background poller from each worker's
`GET /kv_events`; `select()` only reads it. Each eligible worker gets, as the Gateway API
endpoint picker and llm-d score it:

    prefix = cached leading blocks / prompt blocks
    queue  = (max_load - load) / (max_load - min_load)     (1 when all loads are equal)
    kv     = 1 - kv_cache_usage                            (usage reported by the worker)
    score  = prefix_weight * prefix + queue_weight * queue + kv_weight * kv

and the highest score wins (random among ties). The scan covers only the workers that can
plausibly win: those with a cached run, the least-loaded one, and (with usage reports) the
few with the lowest KV usage, recomputed at most every `usage_refresh_secs`; so a request
costs O(cached runs), not O(workers), in a fleet of thousands. The chosen
worker's prompt blocks are inserted speculatively for `speculative_ttl_secs`, covering the
gap until its BlockStored events arrive. Prompts need token ids: the client's, or from the
`tokenizer`; with neither the request is routed by load alone.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from prefixserve.router.kv_block_index import KVBlockIndex, prompt_block_keys
from prefixserve.router.policies.base import (
    PolicyConfig,
    RoutingPolicy,
    Worker,
    WorkerView,
    register_policy,
)
from prefixserve.router.prompt_tokenizer import PromptTokenizer
from prefixserve.router.request_info import RequestInfo


@dataclass(frozen=True)
class KVEventsConfig(PolicyConfig):
    kv_block_size: int = field(
        default=16, metadata={"help": "workers' tokens per KV block (learned from events too)"})
    prefix_weight: float = field(default=3.0, metadata={"help": "weight of the prefix score"})
    queue_weight: float = field(default=2.0, metadata={"help": "weight of the queue score"})
    kv_usage_weight: float = field(default=2.0, metadata={"help": "weight of 1 - KV usage"})
    speculative_ttl_secs: float = field(
        default=2.0, metadata={"help": "lifetime of speculative index entries (0: off)"})
    max_prefix_blocks: int = field(
        default=1024, metadata={"help": "at most this many leading blocks are matched"})
    kv_events_poll_interval_secs: float = field(
        default=0.2, metadata={"help": "seconds between GET /kv_events polls per worker"})
    usage_candidates: int = field(
        default=8, metadata={"help": "lowest-KV-usage workers scored besides those with a hit"})
    usage_refresh_secs: float = field(
        default=0.1, metadata={"help": "how often the lowest-usage candidates are recomputed"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kv_block_size < 1:
            raise ValueError(f"--kv-block-size must be >= 1, got {self.kv_block_size}")


@register_policy
class KVEventsPolicy(RoutingPolicy):
    name = "kv_events"
    config_cls = KVEventsConfig
    config: KVEventsConfig
    match_unit = "tokens"
    uses_kv_events = True

    def __init__(self, *args: Any, tokenizer: PromptTokenizer | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.index = KVBlockIndex()
        self.tokenizer = tokenizer
        self.kv_usage: dict[str, float] = {}  # url -> fraction of KV blocks in use, if reported
        self._low_usage: list[str] = []
        self._low_usage_at = float("-inf")

    @property
    def block_size(self) -> int:
        return self.index.block_size_seen or self.config.kv_block_size

    def remove_worker(self, worker: Worker) -> None:
        super().remove_worker(worker)
        self.index.clear_worker(worker.url)
        self.kv_usage.pop(worker.url, None)

    def maintain(self) -> None:
        self.index.expire(self.clock())

    def token_ids(self, request_info: RequestInfo) -> list[int] | None:
        if request_info.token_ids is not None:
            return request_info.token_ids
        return self.tokenizer.encode(request_info) if self.tokenizer is not None else None

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        cfg, now = self.config, self.clock()
        ids = self.token_ids(request_info)
        if ids is None:
            self.last_decision, self.last_match = "no_tokens", (0, 0)
            return self._least_loaded(view)
        bs = self.block_size
        keys = prompt_block_keys(ids, bs, request_info.cache_salt, cfg.max_prefix_blocks)
        runs = self.index.longest_runs(keys, None if view.all_members else view.by_url, now)
        url = self._best(view, runs, len(keys))
        run = runs.get(url, 0)
        self.last_decision = "hit" if run else "miss"
        self.last_match = (run * bs, len(ids))
        if cfg.speculative_ttl_secs > 0 and keys:
            self.index.insert_speculative(url, keys, now + cfg.speculative_ttl_secs)
        return view.by_url[url]

    def _lowest_usage(self) -> list[str]:
        now = self.clock()
        if now - self._low_usage_at >= self.config.usage_refresh_secs:
            k = self.config.usage_candidates
            self._low_usage = [u for u, _ in heapq.nsmallest(k, self.kv_usage.items(), key=lambda kv: kv[1])]
            self._low_usage_at = now
        return self._low_usage

    def _best(self, view: WorkerView, runs: dict[str, int], num_blocks: int) -> str:
        cfg = self.config
        lo, hi = self._load_bounds(view)
        candidates = list(runs)
        candidates.append(self._least_loaded(view).url)
        if self.kv_usage:
            candidates += [u for u in self._lowest_usage() if u in view.by_url]
        best: list[str] = []
        best_score = float("-inf")
        for url in candidates:
            prefix = runs.get(url, 0) / num_blocks if num_blocks else 0.0
            queue = (hi - self.loads.get(url)) / (hi - lo) if hi > lo else 1.0
            kv = 1.0 - self.kv_usage.get(url, 0.0)
            score = cfg.prefix_weight * prefix + cfg.queue_weight * queue + cfg.kv_usage_weight * kv
            if score > best_score + 1e-12:
                best, best_score = [url], score
            elif abs(score - best_score) <= 1e-12 and url not in best:
                best.append(url)
        return best[0] if len(best) == 1 else best[self.rng.randrange(len(best))]
