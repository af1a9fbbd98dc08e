"""Prefix hash: production-stack's prefix-aware routing over a chunk-hash trie.

The prompt text is cut into `chunk_chars` chunks; the worker set of the deepest trie node
the prompt reaches (restricted to eligible workers) are the candidates. A match shorter than
`min_match_chars` counts as none (production-stack #957: one shared system prompt must not
pin every request to one worker). Candidates are broken by load (production-stack draws at
random); no candidate means the least-loaded worker. The prompt is then recorded under the
chosen worker in every case (production-stack #990), so affinity starts with the first
request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefixserve.router.hash_trie import HashTrie
from prefixserve.router.policies.base import (
    PolicyConfig,
    RoutingPolicy,
    Worker,
    WorkerView,
    register_policy,
)
from prefixserve.router.request_info import RequestInfo


@dataclass(frozen=True)
class PrefixHashConfig(PolicyConfig):
    chunk_chars: int = field(default=128, metadata={"help": "characters per hashed chunk"})
    min_match_chars: int = field(
        default=0, metadata={"help": "shorter prefix matches route by load alone"})
    max_trie_nodes: int = field(
        default=1_000_000, metadata={"help": "prefix trie node cap, LRU leaves dropped (0: none)"})


@register_policy
class PrefixHashPolicy(RoutingPolicy):
    name = "prefix_hash"
    config_cls = PrefixHashConfig
    config: PrefixHashConfig
    match_unit = "chars"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trie = HashTrie(self.config.chunk_chars, self.config.max_trie_nodes)

    def remove_worker(self, worker: Worker) -> None:
        super().remove_worker(worker)
        self.trie.remove_worker(worker.url)

    def _choose(self, request_info: RequestInfo, view: WorkerView) -> Any:
        text = request_info.text
        hashes = self.trie.chunk_hashes(text)
        depth, holders = self.trie.match(hashes, None if view.all_members else view.by_url)
        matched = min(depth * self.config.chunk_chars, len(text))
        if holders and matched >= max(1, self.config.min_match_chars):
            url = self.loads.least_loaded_of(holders)
            self.last_decision, self.last_match = "hit", (matched, len(text))
        else:
            url = self._least_loaded(view).url
            self.last_decision, self.last_match = "miss", (0, len(text))
        self.trie.insert(hashes, url)
        return view.by_url[url]
