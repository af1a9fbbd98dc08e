"""Randomized stress: thousands of scheduler-like operations, invariants after every one.

A two-token vocabulary forces heavy sharing. A shadow of what every block holds (the
salt and full token prefix written into it) checks that every hit hands back blocks
whose content really is the request's prefix, i.e. no block is reused while hittable.
"""

from __future__ import annotations

import random

import pytest

from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.prefix_cache import prefix_cache_names
from prefixserve.request import Request

CACHES = [name for name in prefix_cache_names() if name != "none"]


class Sim:
    def __init__(self, mgr: KVCacheManager, rng: random.Random) -> None:
        self.mgr, self.rng = mgr, rng
        self.bs = mgr.block_size
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.done: list[Request] = []
        self.shadow: dict[int, tuple] = {}  # block id -> (salt, token prefix) written into it
        self.next_id = 0

    def new_request(self) -> None:
        rng = self.rng
        if self.done and rng.random() < 0.4:  # next chat turn: previous prompt + answer + more
            prev = rng.choice(self.done)
            tokens, salt = prev.all_token_ids + [rng.randint(0, 1) for _ in range(rng.randint(1, 4))], prev.cache_salt
        else:
            tokens = [rng.randint(0, 1) for _ in range(rng.randint(1, 14))]
            salt = rng.choice([None, None, "a"])
        self.next_id += 1
        self.waiting.append(Request(str(self.next_id), tokens, cache_salt=salt))

    def admit(self) -> None:
        r = self.waiting.pop(self.rng.randrange(len(self.waiting)))
        hit = self.mgr.get_computed_blocks(r)
        assert hit.num_tokens == len(hit.block_ids) * self.bs and hit.num_tokens < r.num_tokens
        n = self.rng.randint(1, r.num_tokens - hit.num_tokens)  # chunked prefill
        if self.mgr.allocate_slots(r, n, hit) is None:
            self.waiting.append(r)
            return
        table = self.mgr.block_ids(r)
        for j, b in enumerate(hit.block_ids):
            assert table[j] == b
            assert self.shadow.get(b) == (r.cache_salt, tuple(r.all_token_ids[:(j + 1) * self.bs])), \
                f"hit block {b} holds other content"
        self.compute(r, hit.num_tokens, n)
        self.running.append(r)

    def compute(self, r: Request, start: int, n: int) -> None:
        table = self.mgr.block_ids(r)
        for pos in range(start, start + n):
            if (pos + 1) % self.bs == 0:
                self.shadow[table[pos // self.bs]] = (r.cache_salt, tuple(r.all_token_ids[:pos + 1]))
        r.num_computed_tokens = start + n

    def step(self) -> None:
        r = self.rng.choice(self.running)
        if r.num_computed_tokens == r.num_tokens:
            r.append_output_token_ids(self.rng.randint(0, 1))
        n = self.rng.randint(1, r.num_tokens - r.num_computed_tokens)
        if self.mgr.allocate_slots(r, n) is None:
            self.preempt(r)
        else:
            self.compute(r, r.num_computed_tokens, n)

    def preempt(self, r: Request) -> None:
        self.running.remove(r)
        self.mgr.free(r)
        r.num_computed_tokens = 0
        r.num_preemptions += 1
        self.waiting.append(r)

    def finish(self) -> None:
        r = self.running.pop(self.rng.randrange(len(self.running)))
        self.mgr.free(r)
        self.done = (self.done + [r])[-20:]

    def run(self, num_ops: int) -> None:
        for _ in range(num_ops):
            x = self.rng.random()
            if x < 0.25 or not (self.waiting or self.running):
                self.new_request()
            elif x < 0.5 and self.waiting:
                self.admit()
            elif x < 0.85 and self.running:
                self.step()
            elif x < 0.98 and self.running:
                self.finish()
            else:
                ok = self.mgr.reset_prefix_cache()
                assert ok == (not self.running or self.mgr.num_free_blocks == self.mgr.num_blocks)
                if ok:
                    self.shadow.clear()
            self.mgr.check_invariants()
        while self.running:
            self.finish()
        self.mgr.check_invariants()
        assert self.mgr.num_free_blocks == self.mgr.num_blocks


@pytest.mark.parametrize("prefix_cache", CACHES)
@pytest.mark.parametrize("block_size", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_operations_keep_invariants_and_hits_correct(prefix_cache, block_size, seed):
    mgr = KVCacheManager(num_blocks=24 // block_size + 3, block_size=block_size,
                         prefix_cache=prefix_cache, hash_seed=seed)
    sim = Sim(mgr, random.Random(seed))
    sim.run(3000)
    assert mgr.stats.hits > 0 and mgr.stats.evictions > 0


@pytest.mark.parametrize("block_size", [1, 2])
def test_random_operations_with_unhashed_blocks_freed_to_head(block_size):
    mgr = KVCacheManager(num_blocks=24 // block_size + 3, block_size=block_size,
                         free_unhashed_to_head=True)
    Sim(mgr, random.Random(3)).run(3000)
    assert mgr.stats.hits > 0


@pytest.mark.parametrize("block_size", [1, 3])
def test_random_operations_without_caching_never_hit(block_size):
    mgr = KVCacheManager(num_blocks=12, block_size=block_size, enable_caching=False)
    sim = Sim(mgr, random.Random(7))
    sim.run(3000)
    assert mgr.stats.hits == 0 and mgr.stats.blocks_cached == 0
    assert mgr.free_block_ids() != list(range(12))  # blocks were really recycled
