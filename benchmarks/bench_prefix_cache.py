"""Prefix caching on the real default model: what it saves, what it costs. One JSON line per result.

Parts (`--part`, default all):
- table: a ~2k-token markdown table of 30 people, then "what is the age of John Doe?" (cold)
  and "...of Zack Blue?" (warm); TTFT with max_tokens=1, median of `--reps`.
- overhead: prompts that share nothing (distinct first tokens); throughput with caching on /
  off in the same run, alternating, median of `--reps`. Goal: ratio >= 0.98.
- hashing: block hashing cost in ns/token per hash_algo (block_size 16).
- workloads: multi-turn, few-shot, self-consistency (n=8) and tree-of-thought through the
  engine with caching off, hash and radix at block sizes 1, 4, 16: hit rate, mean TTFT,
  throughput. The workload generators are `prefixserve bench`'s own.
- lpm: shared-prefix groups, shuffled, under memory pressure: scheduling_policy lpm vs fcfs.

    python benchmarks/bench_prefix_cache.py [--part table|overhead|hashing|workloads|lpm] [--reps 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from typing import Any

from prefixserve import LLM, SamplingParams
from prefixserve.bench.workloads import RequestSpec, Workload, build_workload
from prefixserve.bench.workloads.table_qa import TableQA


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def make_llm(**kwargs: Any) -> LLM:
    gc.collect()
    return LLM(**kwargs)


# ------------------------------------------------------------------ table
def bench_table(reps: int) -> None:
    t = TableQA(num_requests=1)
    people = t.people()
    people[0]["name"], people[-1]["name"] = "John Doe", "Zack Blue"
    head = f"Here is a table of people:\n{t.table(people)}\n"
    prompts = [head + f"Question: what is the age of {n}? Your answer: The age of {n} is " for n in ("John Doe", "Zack Blue")]
    llm = make_llm()
    one = SamplingParams(temperature=0.0, max_tokens=1)
    llm.generate(prompts[0][:200], one, use_tqdm=False)  # warm-up
    cold, warm, cached = [], [], 0
    for _ in range(reps):
        llm.reset_prefix_cache()
        for i, bucket in enumerate((cold, warm)):
            start = time.perf_counter()
            out = llm.generate(prompts[i], one, use_tqdm=False)[0]
            bucket.append(time.perf_counter() - start)
            cached = out.num_cached_tokens if i else cached
    n = len(llm.get_tokenizer().encode(prompts[0]))
    c, w = statistics.median(cold), statistics.median(warm)
    emit(bench="table_ttft", prompt_tokens=n, warm_cached_tokens=cached, cold_s=round(c, 4), warm_s=round(w, 4),
         warm_over_cold=round(w / c, 4))


# --------------------------------------------------------------- overhead
def bench_overhead(reps: int, num: int = 32, length: int = 256, out_len: int = 32) -> None:
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [1000 + i] + [rng.randrange(1000, 40000) for _ in range(length - 1)]}
               for i in range(num)]
    params = SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True)
    engines = {"off": make_llm(enable_prefix_caching=False), "on": make_llm(enable_prefix_caching=True)}
    tput: dict[str, list[float]] = {"off": [], "on": []}
    for llm in engines.values():
        llm.generate(prompts[:2], params, use_tqdm=False)
    for rep in range(reps):
        for name in (("off", "on") if rep % 2 == 0 else ("on", "off")):
            llm = engines[name]
            llm.reset_prefix_cache()
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            tput[name].append(num * out_len / (time.perf_counter() - start))
    on, off = statistics.median(tput["on"]), statistics.median(tput["off"])
    emit(bench="zero_overhead", requests=num, prompt_tokens=length, output_tokens=out_len,
         on_tok_s=round(on, 1), off_tok_s=round(off, 1), on_over_off=round(on / off, 4),
         hits=engines["on"].cache_stats()["hits"])


# ---------------------------------------------------------------- hashing
def bench_hashing(tokens: int = 1_000_000) -> None:
    from prefixserve.kv_cache.block_hasher import hash_token_blocks

    ids = [random.Random(1).randrange(50000) for _ in range(tokens)]
    for algo in ("sha256", "xxhash"):
        best = min(_timed(lambda a=algo: hash_token_blocks(ids, 16, 0, a)) for _ in range(3))
        emit(bench="hashing", hash_algo=algo, block_size=16, ns_per_token=round(best / tokens * 1e9, 1))


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -------------------------------------------------------------- workloads
def run_workload(llm: LLM, workload: Workload) -> dict[str, Any]:
    """Drive a workload through the engine: children are submitted as their parents finish.

    Cached tokens come from the KV manager's counters (every engine request, the n samples of
    one prompt included, counts its prompt once), so they hold with caching off too."""
    eng, tok = llm.engine, llm.get_tokenizer()
    specs: dict[str, RequestSpec] = {}
    ttfts, out_tokens = [], 0
    before = llm.cache_stats()

    def submit(spec: RequestSpec) -> None:
        prompt: Any = tok.encode_chat(spec.messages) if spec.is_chat else spec.prompt
        seed = None if spec.temperature == 0 else 0
        eng.add_request(spec.request_id, prompt,
                        SamplingParams(temperature=spec.temperature, max_tokens=spec.max_tokens, n=spec.n, seed=seed))
        specs[spec.request_id] = spec

    for spec in workload.start():
        submit(spec)
    start = time.perf_counter()
    while eng.has_unfinished_requests():
        for out in eng.step():
            if not out.finished:
                continue
            ttfts.append(out.metrics["first_token_time"] - out.metrics["arrival_time"])
            out_tokens += sum(len(o.token_ids) for o in out.outputs)
            for child in workload.next(specs[out.request_id], out.outputs[0].text):
                submit(child)
    wall = time.perf_counter() - start
    after = llm.cache_stats()
    prompt_tokens, cached = after["queries"] - before["queries"], after["hits"] - before["hits"]
    return {"requests": len(specs), "prompt_tokens": prompt_tokens, "cached_tokens": cached,
            "hit_rate": round(cached / prompt_tokens, 4), "ttft_mean_s": round(statistics.mean(ttfts), 4),
            "ttft_p50_s": round(statistics.median(ttfts), 4), "wall_s": round(wall, 2),
            "output_tok_s": round(out_tokens / wall, 1)}


WORKLOADS = {
    "multi-turn": dict(num_requests=16, num_conversations=4, max_tokens=24),
    "few-shot": dict(num_requests=16, max_tokens=16),
    "self-consistency": dict(num_requests=8, max_tokens=32, use_n_field=True),
    "tree-of-thought": dict(max_tokens=24),
}
CACHES = {
    "off": dict(enable_prefix_caching=False),
    **{f"{kind}{bs}": dict(prefix_cache=kind, block_size=bs) for kind in ("hash", "radix") for bs in (1, 4, 16)},
}


def bench_workloads(names: list[str], caches: list[str]) -> None:
    for cache in caches:
        llm = make_llm(**CACHES[cache])
        for name in names:
            llm.reset_prefix_cache()
            result = run_workload(llm, build_workload(name, seed=0, **WORKLOADS[name]))
            emit(bench="workload", workload=name, cache=cache, **result)
        del llm


# --------------------------------------------------------------------- lpm
def bench_lpm(num_kv_blocks: int = 48, max_num_seqs: int = 2) -> None:
    # 6 prefixes of ~16 blocks each, a pool that holds the running requests and about one more
    # prefix: the order in which waiting requests run decides what is still cached.
    for policy in ("fcfs", "lpm"):
        llm = make_llm(scheduling_policy=policy, num_kv_blocks=num_kv_blocks, max_num_seqs=max_num_seqs)
        wl = build_workload("shared-prefix", seed=0, num_groups=6, prompts_per_group=8, max_tokens=8)
        result = run_workload(llm, wl)
        emit(bench="lpm_vs_fcfs", policy=policy, num_kv_blocks=num_kv_blocks, max_num_seqs=max_num_seqs,
             preemptions=llm.cache_stats()["num_preemptions"], **result)
        del llm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["table", "overhead", "hashing", "workloads", "lpm", "all"], default="all")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--caches", nargs="*", default=list(CACHES))
    args = ap.parse_args()
    parts = ["table", "overhead", "hashing", "workloads", "lpm"] if args.part == "all" else [args.part]
    for part in parts:
        if part == "table":
            bench_table(args.reps)
        elif part == "overhead":
            bench_overhead(args.reps)
        elif part == "hashing":
            bench_hashing()
        elif part == "workloads":
            bench_workloads(args.workloads, args.caches)
        else:
            bench_lpm()


if __name__ == "__main__":
    main()
