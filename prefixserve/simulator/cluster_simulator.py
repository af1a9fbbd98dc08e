"""ClusterSimulator: the router's real policy objects driving simulated workers on an event clock.

One heap of events, ordered by (time, kind, sequence number): request arrivals come before
worker wake-ups at the same instant, so requests that arrive together are batched together.

    arrival  -> RequestInfo -> policy.select(info, workers)   (counts one in flight there)
             -> worker.enqueue                                 (may schedule a wake-up)
    wake-up  -> worker.wake: finish -> policy.on_request_done, children of the workload
                             admit  -> the worker's KVCacheManager decides the hit

Root requests (`workload.start()`) arrive all at t=0, or by a Poisson process at
`request_rate`; a multi-turn or tree-of-thought child arrives when its parent finishes. The
policy's clock is the simulated clock and `maintain()` runs every `maintain_interval_secs`
of it, as the router's background task does. For `kv_events` every worker's real KV events
are fed to the policy's index as they happen (no polling lag), with the worker's KV usage,
as the router's poller would report it. Per request the simulator does O(prompt blocks)
work plus whatever the policy does; nothing here scans the fleet. It knows nothing of HTTP.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prefixserve.bench.workloads import RequestSpec, Workload
from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.kv_events import BlockRemoved, BlockStored, KVEvent
from prefixserve.router.policies import RoutingPolicy, policy_class
from prefixserve.simulator.cost_model import CostModel
from prefixserve.simulator.sim_metrics import SimMetrics
from prefixserve.simulator.sim_request import (
    SimRequest,
    prompt_token_ids,
    request_info,
    synthesize_answer,
)
from prefixserve.simulator.sim_worker import SimWorker
from prefixserve.simulator.word_tokenizer import WordTokenizer

# What the default engine gives the default model: 2 GiB of float32 KV for SmolLM2-135M
# (30 layers x 3 KV heads x 64 dims x K and V x 4 bytes x 16 tokens = 720 KiB per block).
DEFAULT_WORKER_BLOCKS = 2912

_ARRIVAL, _WAKE = 0, 1


@dataclass(frozen=True)
class SimConfig:
    num_workers: int = 8
    worker_blocks: int = DEFAULT_WORKER_BLOCKS
    block_size: int = 16
    prefix_cache: str = "hash"
    hash_algo: str = "xxhash"
    eviction_policy: str = "lru"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    request_rate: float = math.inf  # requests/s of Poisson root arrivals; inf: all at t=0
    seed: int = 0
    cost: CostModel = field(default_factory=CostModel)
    kv_usage_reports: bool = True  # kv_events: workers report KV usage, as prefixserve serve does
    maintain_interval_secs: float = 1.0
    policy_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("num_workers", "worker_blocks", "block_size", "max_num_seqs",
                     "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.request_rate > 0:
            raise ValueError(f"--request-rate must be > 0, got {self.request_rate}")


def build_policy(name: str, options: dict[str, Any], seed: int,
                 clock: Callable[[], float]) -> RoutingPolicy:
    """A registry policy with its config fields from `options` (others ignored), on `clock`."""
    cls = policy_class(name)
    known = set(cls.config_cls.__dataclass_fields__)
    config = cls.config_cls(**{k: v for k, v in options.items() if k in known and v is not None})
    return cls(config, seed=seed, clock=clock)


def _event_dict(event: KVEvent) -> dict[str, Any]:
    """The `/kv_events` JSON shape, hashes left as in-process values (no hex round trip)."""
    if isinstance(event, BlockStored):
        return {"type": "BlockStored", "seq": event.seq, "block_hashes": event.block_hashes,
                "parent_block_hash": event.parent_block_hash, "token_ids": event.token_ids,
                "block_size": event.block_size, "cache_salt": event.cache_salt,
                "lora_id": event.lora_id}
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "seq": event.seq, "block_hashes": event.block_hashes}
    return {"type": "AllBlocksCleared", "seq": event.seq}


class ClusterSimulator:
    def __init__(self, policy_name: str, config: SimConfig, workload: Workload,
                 roots: list[RequestSpec] | None = None) -> None:
        self.config = config
        self.workload = workload
        self.roots = roots if roots is not None else workload.start()
        self.dynamic = type(workload).next is not Workload.next
        self.now = 0.0
        self.policy = build_policy(policy_name, config.policy_options, config.seed, self._clock)
        self.uses_kv_events = bool(getattr(self.policy, "uses_kv_events", False))
        self.tokenizer = WordTokenizer()
        self.metrics = SimMetrics()
        self.workers = tuple(self._make_worker(i) for i in range(config.num_workers))
        for w in self.workers:
            self.policy.add_worker(w)
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = 0
        self._arrival_rng = random.Random(config.seed)

    def _clock(self) -> float:
        return self.now

    def _make_worker(self, i: int) -> SimWorker:
        c = self.config
        kv = KVCacheManager(c.worker_blocks, c.block_size, enable_caching=True,
                            prefix_cache=c.prefix_cache, hash_algo=c.hash_algo,
                            eviction_policy=c.eviction_policy,
                            enable_kv_events=self.uses_kv_events, kv_events_ring_size=1)
        worker = SimWorker(i, kv, c.cost, self.tokenizer, c.max_num_seqs,
                           c.max_num_batched_tokens, self._on_finished)
        if kv.events is not None:
            index, url = self.policy.index, worker.url
            kv.events.subscribe(lambda e: index.apply_events(url, (_event_dict(e),)))
        return worker

    # -- the event loop --------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        # Millions of long-lived objects (every worker's blocks) would make each full garbage
        # collection walk them all; freeze them out of the collector for the run.
        gc.collect()
        gc.freeze()
        try:
            return self._run()
        finally:
            gc.unfreeze()

    def _run(self) -> dict[str, Any]:
        start, cpu_start = time.perf_counter(), time.process_time()
        roots = self._root_arrivals()
        self._push_root(roots)
        heap, policy, interval = self._heap, self.policy, self.config.maintain_interval_secs
        next_maintain = interval
        while heap:
            at, kind, _, obj, version = heapq.heappop(heap)
            self.now = at
            if at >= next_maintain:
                policy.maintain()
                next_maintain = at + interval
            if kind == _ARRIVAL:
                spec, is_root = obj
                self._arrive(spec, at)
                if is_root:
                    self._push_root(roots)
            elif version == obj.version:
                self._woken(obj, at)
        result = self.metrics.summary(policy.name, list(self.workers), time.perf_counter() - start)
        result["cpu_s"] = round(time.process_time() - cpu_start, 3)
        return result

    def _root_arrivals(self) -> Iterator[tuple[float, RequestSpec]]:
        rate, t = self.config.request_rate, 0.0
        for spec in self.roots:
            if math.isfinite(rate):
                t += self._arrival_rng.expovariate(rate)
            yield t, spec

    def _push_root(self, roots: Iterator[tuple[float, RequestSpec]]) -> None:
        nxt = next(roots, None)
        if nxt is not None:
            self._push(nxt[0], _ARRIVAL, (nxt[1], True), 0)

    def _push(self, at: float, kind: int, obj: Any, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, obj, version))

    def _arrive(self, spec: RequestSpec, now: float) -> None:
        ids = prompt_token_ids(spec, self.tokenizer) if self.uses_kv_events else None
        info = request_info(spec, ids)
        worker = self.policy.select(info, self.workers)
        self.metrics.decisions[self.policy.last_decision] += 1
        self._seq += 1
        wake = worker.enqueue(SimRequest(spec, info, now, self._seq), now)
        if wake is not None:
            self._push(wake, _WAKE, worker, worker.version)

    def _woken(self, worker: SimWorker, now: float) -> None:
        wake = worker.wake(now)
        if wake is not None:
            self._push(wake, _WAKE, worker, worker.version)
        if self.uses_kv_events and self.config.kv_usage_reports:
            self.policy.kv_usage[worker.url] = worker.kv.usage()

    def _on_finished(self, worker: SimWorker, req: SimRequest, now: float, ok: bool) -> None:
        self.policy.on_request_done(worker, req.info, success=ok)
        if not ok:
            self.metrics.rejected += 1
            return
        self.metrics.record_done(req.arrival, req.first_token_at, now, req.max_tokens)
        if self.dynamic:
            for child in self.workload.next(req.spec, synthesize_answer(req.spec)):
                self._push(now, _ARRIVAL, (child, False), 0)


def simulate(policy: str, workload: Workload, config: SimConfig,
             roots: list[RequestSpec] | None = None) -> dict[str, Any]:
    """Run `workload` through `config.num_workers` simulated workers routed by `policy`."""
    result = ClusterSimulator(policy, config, workload, roots).run()
    result["workload"] = workload.name
    return result
