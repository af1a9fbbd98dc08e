"""Routing policies over real workers: prefix cache hit rate and throughput per policy.

SGLang's generated-shared-prefix workload scaled to this machine: `--groups` 8 system prompts
of ~1k tokens, `--prompts-per-group` 8 questions of ~32 tokens each, 16 output tokens, all 64
requests shuffled (seed 0). `--workers` 4 `prefixserve serve` processes on the default model
start once (`DataParallelCluster`); for each policy their prefix caches are reset, a router
with that policy is started in front, and the workload is sent at `--concurrency` 16 with
the `prefixserve.bench` runner. Prints one JSON line per policy (hit rate = sum
cached_tokens / sum prompt_tokens, requests/s, output tok/s, latencies, requests per
worker), then one line comparing every policy with round robin.

The hit rate has a ceiling: a perfect router misses only each group's first request (7/8 of
prompt tokens hit), while round robin puts each group's 8 prompts on all 4 workers and still
hits about half of them even with no eviction, so no policy can beat it by more than ~1.8x
here; throughput is where the missed prefills show.

    python benchmarks/bench_router.py                     # round_robin cache_aware kv_events
    python benchmarks/bench_router.py --policies round_robin prefix_hash --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import httpx

from prefixserve.bench.client import OpenAIClient
from prefixserve.bench.report import summarize
from prefixserve.bench.runner import BenchmarkRunner
from prefixserve.bench.workloads import Workload, build_workload
from prefixserve.router.cli import run_router_in_process
from prefixserve.router.launcher import DataParallelCluster, model_tokenizer_path

WORDS_PER_1K_TOKENS = 870  # SmolLM2's tokenizer: ~1.15 tokens per generated word


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policies", nargs="+", default=["round_robin", "cache_aware", "kv_events"])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--prompts-per-group", type=int, default=8)
    p.add_argument("--system-prompt-words", type=int, default=WORDS_PER_1K_TOKENS)
    p.add_argument("--question-words", type=int, default=28)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worker-args", default="--max-num-seqs 16 --num-kv-blocks 1024 "
                   "--max-model-len 2048 --log-level warning --log-interval 0",
                   help="flags for each `prefixserve serve` worker (one string)")
    p.add_argument("--log-dir", default=None, help="keep worker logs here (default: inherit)")
    return p.parse_args(argv)


def make_workload(args: argparse.Namespace) -> Workload:
    return build_workload(
        "shared-prefix",
        num_requests=args.groups * args.prompts_per_group,
        num_groups=args.groups,
        prompts_per_group=args.prompts_per_group,
        system_prompt_words=args.system_prompt_words,
        question_words=args.question_words,
        max_tokens=args.output_len,
        seed=args.seed,
    )


def worker_requests(cluster: DataParallelCluster) -> list[int]:
    """Requests each worker has served so far (from its `/cache/stats`)."""
    return [int(httpx.get(url + "/cache/stats", timeout=30).json()["requests"])
            for url in cluster.worker_urls]  # fmt: skip


def prepare_workers(cluster: DataParallelCluster) -> None:
    """Warm every worker with one short request, then empty its prefix cache."""
    for url in cluster.worker_urls:
        body = {"prompt": "Warm up.", "max_tokens": 2, "temperature": 0.0}
        httpx.post(url + "/v1/completions", json=body, timeout=300).raise_for_status()
    reset_caches(cluster)


def reset_caches(cluster: DataParallelCluster) -> None:
    for url in cluster.worker_urls:
        resp = httpx.post(url + "/reset_prefix_cache", timeout=30)
        if resp.status_code != 200 or not resp.json().get("success"):
            raise RuntimeError(f"{url}: could not reset the prefix cache: {resp.text}")


async def drive(url: str, workload: Workload, concurrency: int, seed: int) -> tuple[list, float]:
    async with OpenAIClient(url) as client:
        await client.resolve_model()
        runner = BenchmarkRunner(workload, client, concurrency=concurrency, seed=seed,
                                 progress=False)  # fmt: skip
        results = await runner.run()
    return results, runner.duration_s


def run_policy(policy: str, cluster: DataParallelCluster, args: argparse.Namespace,
               tokenizer: str | None) -> dict[str, Any]:  # fmt: skip
    reset_caches(cluster)
    before = worker_requests(cluster)
    options = {"tokenizer": tokenizer} if policy == "kv_events" and tokenizer else {}
    with run_router_in_process(cluster.worker_urls, policy=policy, seed=args.seed, **options) as r:
        results, duration = asyncio.run(drive(r.url, make_workload(args), args.concurrency,
                                              args.seed))  # fmt: skip
    after = worker_requests(cluster)
    report = summarize(results, duration, {"bench": "router", "policy": policy})
    return {
        "bench": "router",
        "policy": policy,
        "workers": args.workers,
        "num_requests": report["num_requests"],
        "completed": report["completed"],
        "errors": report["errors"]["count"],
        "hit_rate": report["cached_token_ratio"],
        "prompt_tokens": report["total_prompt_tokens"],
        "cached_tokens": report["total_cached_tokens"],
        "request_throughput": report["request_throughput"],
        "output_throughput": report["output_throughput"],
        "duration_s": report["duration_s"],
        "ttft_p50_ms": report["ttft_ms"]["p50"],
        "e2e_p50_ms": report["e2e_ms"]["p50"],
        "e2e_p99_ms": report["e2e_ms"]["p99"],
        "worker_requests": [a - b for a, b in zip(after, before, strict=True)],
    }


def comparison(lines: list[dict[str, Any]]) -> dict[str, Any]:
    base = next((x for x in lines if x["policy"] == "round_robin"), None)
    out: dict[str, Any] = {"bench": "router_vs_round_robin"}
    if base is None:
        return out
    for key, name in (("hit_rate", "hit_rate_x"), ("request_throughput", "throughput_x")):
        out[name] = {x["policy"]: round(x[key] / base[key], 2) if base[key] else None
                     for x in lines}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workload = make_workload(args)
    setup = {"bench": "router_setup", "workload": "shared-prefix", "workers": args.workers,
             "groups": args.groups, "prompts_per_group": args.prompts_per_group,
             "system_prompt_words": args.system_prompt_words,
             "question_words": args.question_words, "output_len": args.output_len,
             "concurrency": args.concurrency, "num_requests": workload.expected_requests(),
             "worker_args": args.worker_args, "seed": args.seed}  # fmt: skip
    t0 = time.perf_counter()
    cluster = DataParallelCluster(args.workers, args.worker_args.split(), log_dir=args.log_dir,
                                  start_router=False)  # fmt: skip
    lines = []
    with cluster:
        setup["worker_start_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(setup), flush=True)
        prepare_workers(cluster)
        tokenizer = model_tokenizer_path(cluster.worker_args)
        for policy in args.policies:
            line = run_policy(policy, cluster, args, tokenizer)
            lines.append(line)
            print(json.dumps(line), flush=True)
    print(json.dumps(comparison(lines)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
