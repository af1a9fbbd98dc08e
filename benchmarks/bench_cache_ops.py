"""Prefix-cache micro-benchmark: block hashing cost and KV cache manager throughput.

No model. Prints one JSON line per result:
- `{"bench": "hash", ...}`: ns/token of the chained block hash per algorithm (50k tokens);
- `{"bench": "manager", ...}`: a seeded trace of scheduler-like calls replayed through
  `KVCacheManager` (get_computed_blocks + allocate_slots, 16 decode allocate_slots, free per
  request), with the hit tokens per workload, best wall time of several runs.

The trace is the one the peers (vLLM, SGLang) were measured on (shared/peers/CACHE_OPS.md):
64 shared-system-prompt requests (1,024 + 64 tokens), 16 chats x 6 turns (turn 1: 128
tokens; turn k+1 = turn k + 32-token answer + 24 tokens; the 16 decoded tokens are the
answer's first 16), 100 few-shot (2,000 + 40), 100 random (512); token ids 1..31999;
seeded interleaving; K=8 requests running, decode round-robin. Pools: "normal" holds
every distinct block plus the K largest requests (no eviction); "pressure" 25% of that.

    python benchmarks/bench_cache_ops.py --prefix-cache hash,radix --block-size 16,1
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from collections import deque
from dataclasses import dataclass

from prefixserve.kv_cache import KVCacheManager
from prefixserve.kv_cache.block_hasher import BlockHasher
from prefixserve.request import Request

DECODE = 16


@dataclass
class TraceRequest:
    rid: str
    workload: str
    prompt: list[int]
    output: list[int]
    after: str | None = None  # a chat turn starts only once its previous turn has finished


def make_trace(seed: int = 0) -> list[TraceRequest]:
    rng = random.Random(seed)

    def toks(n: int) -> list[int]:
        return [rng.randint(1, 31999) for _ in range(n)]

    system, header = toks(1024), toks(2000)
    streams: list[list[TraceRequest]] = []
    streams.append([TraceRequest(f"sys{i}", "shared_sys", system + toks(64), toks(DECODE))
                    for i in range(64)])
    for c in range(16):
        prompt, turns = toks(128), []
        for t in range(6):
            answer = toks(32)
            turns.append(TraceRequest(f"chat{c}.{t}", "multi_turn", prompt, answer[:DECODE],
                                      turns[-1].rid if turns else None))
            prompt = prompt + answer + toks(24)
        streams.append(turns)
    streams.append([TraceRequest(f"shot{i}", "few_shot", header + toks(40), toks(DECODE))
                    for i in range(100)])
    streams.append([TraceRequest(f"rand{i}", "random", toks(512), toks(DECODE)) for i in range(100)])
    # Seeded interleaving that keeps each stream's order.
    order = [i for i, s in enumerate(streams) for _ in s]
    rng.shuffle(order)
    cursors = [0] * len(streams)
    trace = []
    for i in order:
        trace.append(streams[i][cursors[i]])
        cursors[i] += 1
    return trace


def pool_sizes(trace: list[TraceRequest], block_size: int, concurrency: int) -> dict[str, int]:
    unique: set[bytes] = set()  # chained hashes identify a block by its whole prefix
    hasher = BlockHasher(block_size, "xxhash")
    sizes = []
    for t in trace:
        seq = t.prompt + t.output
        unique.update(hasher.hash_tokens(seq))
        sizes.append(-(-len(seq) // block_size))
    distinct = len(unique) + len(trace)  # + one partial tail per request
    largest = sum(sorted(sizes)[-concurrency:])
    return {"normal": distinct + largest, "pressure": max(distinct // 4, largest)}


def replay(mgr: KVCacheManager, trace: list[TraceRequest], concurrency: int) -> dict[str, int]:
    """Runs the trace; returns hit tokens per workload."""
    hits = {"shared_sys": 0, "multi_turn": 0, "few_shot": 0, "random": 0}
    finished: set[str] = set()
    waiting = deque(trace)
    running: list[tuple[TraceRequest, Request]] = []
    while waiting or running:
        while len(running) < concurrency and waiting:
            t = next((t for t in waiting if t.after is None or t.after in finished), None)
            if t is None:
                break
            req = Request(t.rid, t.prompt)
            hit = mgr.get_computed_blocks(req)
            if mgr.allocate_slots(req, req.num_tokens - hit.num_tokens, hit) is None:
                raise RuntimeError(f"pool too small for {t.rid}")
            waiting.remove(t)
            req.num_computed_tokens = req.num_tokens
            hits[t.workload] += hit.num_tokens
            running.append((t, req))
        for t, req in list(running):
            req.append_output_token_ids(t.output[req.num_output_tokens])
            if mgr.allocate_slots(req, 1) is None:
                raise RuntimeError(f"pool too small to decode {t.rid}")
            req.num_computed_tokens += 1
            if req.num_output_tokens == DECODE:
                mgr.free(req)
                running.remove((t, req))
                finished.add(t.rid)
    return hits


def bench_manager(prefix_cache: str, block_size: int, mode: str, args) -> dict:
    trace = make_trace(args.seed)
    pool = pool_sizes(trace, block_size, args.concurrency)[mode]
    walls, hits, evictions = [], None, 0
    for _ in range(args.runs):
        mgr = KVCacheManager(num_blocks=pool, block_size=block_size, prefix_cache=prefix_cache,
                             hash_algo=args.hash_algo,
                             free_unhashed_to_head=args.free_unhashed_to_head)
        gc.collect()
        t0 = time.perf_counter()
        run_hits = replay(mgr, trace, args.concurrency)
        walls.append(time.perf_counter() - t0)
        mgr.check_invariants()
        assert mgr.num_free_blocks == pool, "blocks leaked"
        assert hits is None or hits == run_hits, "hits differ between runs"
        hits, evictions = run_hits, mgr.stats.evictions
    wall = min(walls)
    tokens = sum(len(t.prompt) + DECODE for t in trace)
    return {"bench": "manager", "prefix_cache": prefix_cache, "hash_algo": args.hash_algo,
            "free_unhashed_to_head": args.free_unhashed_to_head,
            "block_size": block_size, "mode": mode, "pool_blocks": pool,
            "concurrency": args.concurrency, "requests": len(trace),
            "logical_ops": len(trace) * (3 + DECODE), "wall_s": round(wall, 4),
            "wall_s_runs": [round(w, 4) for w in walls],
            "logical_ops_per_s": round(len(trace) * (3 + DECODE) / wall),
            "tokens_per_s": round(tokens / wall), "cached_tokens": sum(hits.values()),
            "cached_by_workload": hits, "evicted_blocks": evictions}


def bench_hash(algo: str, block_size: int, runs: int) -> dict:
    rng = random.Random(0)
    tokens = [rng.randint(1, 31999) for _ in range(50_000)]
    hasher = BlockHasher(block_size, algo, 0)
    best = min(_timed(lambda: hasher.hash_tokens(tokens)) for _ in range(runs))
    salted = min(_timed(lambda: hasher.hash_tokens(tokens, cache_salt="t", lora_id=1))
                 for _ in range(runs))
    return {"bench": "hash", "hash_algo": algo, "block_size": block_size, "tokens": len(tokens),
            "ns_per_token": round(best / len(tokens) * 1e9, 1),
            "ns_per_token_salt_lora": round(salted / len(tokens) * 1e9, 1)}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix-cache", default="hash", help="comma list: hash,radix")
    p.add_argument("--block-size", default="16", help="comma list, e.g. 16,1")
    p.add_argument("--mode", default="normal,pressure")
    p.add_argument("--hash-algo", default="sha256", choices=["sha256", "xxhash"])
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-hash", action="store_true")
    p.add_argument("--free-unhashed-to-head", action="store_true",
                   help="hash cache: reuse freed partial blocks first (vLLM PR #42656)")
    args = p.parse_args()
    if not args.skip_hash:
        for algo in ("sha256", "xxhash"):
            print(json.dumps(bench_hash(algo, 16, 7)), flush=True)
    for cache in args.prefix_cache.split(","):
        for bs in map(int, args.block_size.split(",")):
            for mode in args.mode.split(","):
                print(json.dumps(bench_manager(cache, bs, mode, args)), flush=True)


if __name__ == "__main__":
    main()
