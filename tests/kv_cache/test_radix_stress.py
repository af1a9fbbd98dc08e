"""Randomized stress of the radix cache, one run per eviction policy and block size.

A two-token vocabulary forces heavy sharing; the driver plays a scheduler: new requests with
chunked prefill, decode steps, preemptions, finishes, out-of-blocks and resets, with
`check_invariants()` after every operation. A shadow copy of what each block holds (written
when a request computes tokens) checks every hit against the request's own tokens, as
attention would see them. At the end every block is free or cached.
"""

from __future__ import annotations

import random

import pytest

from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.prefix_cache import EVICTION_POLICIES
from prefixserve.request import Request


class Driver:
    def __init__(self, policy: str, block_size: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.bs = block_size
        self.mgr = KVCacheManager(num_blocks=48 // block_size + 8, block_size=block_size,
                                  prefix_cache="radix", eviction_policy=policy)
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.content: dict[int, tuple[int, ...]] = {}  # block id -> tokens written into it
        self.next_id = 0
        self.hit_tokens = 0

    def new_request(self) -> None:
        rng = self.rng
        tokens = [rng.randint(0, 1) for _ in range(rng.randint(1, 24))]
        salt = rng.choice([None, None, None, "tenant"])
        r = Request(str(self.next_id), tokens, cache_salt=salt, priority=rng.randint(0, 3))
        self.next_id += 1
        self.waiting.append(r)

    def admit(self) -> None:
        r = self.waiting[0]
        hit = self.mgr.get_computed_blocks(r)
        self.check_hit(r, hit.block_ids)
        todo = r.num_tokens - hit.num_tokens
        n = self.rng.randint(1, todo)  # chunked prefill
        if self.mgr.allocate_slots(r, n, hit) is None:
            return
        self.waiting.pop(0)
        self.running.append(r)
        self.hit_tokens += hit.num_tokens
        self.compute(r, hit.num_tokens, n)

    def step(self, r: Request) -> None:
        todo = r.num_tokens - r.num_computed_tokens
        n = self.rng.randint(1, todo)
        if self.mgr.allocate_slots(r, n) is None:
            return
        self.compute(r, r.num_computed_tokens, n)

    def compute(self, r: Request, start: int, n: int) -> None:
        """Write tokens [start, start + n) into the request's blocks, then sample if done."""
        table, bs = self.mgr.block_ids(r), self.bs
        r.num_computed_tokens = start + n
        for i in range(start // bs, -(-(start + n) // bs)):
            self.content[table[i]] = tuple(r.all_token_ids[i * bs:min((i + 1) * bs, start + n)])
        if r.num_computed_tokens == r.num_tokens:
            r.append_output_token_ids(self.rng.randint(0, 1))

    def check_hit(self, r: Request, block_ids: list[int]) -> None:
        bs = self.bs
        for i, b in enumerate(block_ids):
            assert self.content.get(b) == tuple(r.all_token_ids[i * bs:(i + 1) * bs]), (
                f"hit block {b} holds {self.content.get(b)}, request needs "
                f"{r.all_token_ids[i * bs:(i + 1) * bs]}")

    def finish(self, r: Request, preempt: bool) -> None:
        self.running.remove(r)
        self.mgr.free(r)
        if preempt:
            r.num_computed_tokens = 0
            r.num_preemptions += 1
            self.waiting.insert(0, r)

    def op(self) -> None:
        rng, x = self.rng, self.rng.random()
        if x < 0.25 or not (self.waiting or self.running):
            self.new_request()
        elif x < 0.45 and self.waiting:
            self.admit()
        elif x < 0.85 and self.running:
            r = rng.choice(self.running)
            if r.num_tokens > 40:
                self.finish(r, preempt=False)
            else:
                self.step(r)
        elif x < 0.97 and self.running:
            self.finish(rng.choice(self.running), preempt=rng.random() < 0.3)
        elif not self.running:
            assert self.mgr.reset_prefix_cache()
            self.content.clear()
        else:
            assert not self.mgr.reset_prefix_cache()
        self.mgr.check_invariants()

    def drain(self) -> None:
        for r in list(self.running):
            self.finish(r, preempt=False)
        self.mgr.check_invariants()


@pytest.mark.parametrize("block_size", [1, 2, 4])
@pytest.mark.parametrize("policy", EVICTION_POLICIES)
def test_random_ops_keep_every_invariant(policy: str, block_size: int):
    d = Driver(policy, block_size, seed=EVICTION_POLICIES.index(policy) * 10 + block_size)
    for _ in range(2000):
        d.op()
    d.drain()
    mgr, cache = d.mgr, d.mgr.cache
    assert cache.protected_size == 0
    assert mgr.num_free_blocks == mgr.num_blocks  # every block free or evictable cache
    assert mgr.pool.num_free_blocks + cache.num_cached_blocks == mgr.num_blocks
    assert d.hit_tokens > 0 and cache.num_evictions > 0  # sharing and pressure both happened
    cached = cache.num_cached_blocks
    assert cache.evict(mgr.num_blocks) == cached
    mgr.check_invariants()
    assert mgr.pool.num_free_blocks == mgr.num_blocks
