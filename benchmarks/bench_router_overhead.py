"""Latency the router adds per request, against instant fake workers.

Starts `--workers` fake OpenAI workers (each its own process, answering at once) and one
router process per policy, then sends an open-loop Poisson stream of `--rate` requests/s for
`--duration` seconds, first straight to a worker, then through the router. Prints one JSON
line per policy: p50/p90/p99 latency direct and through the router, and the p50 added.

    python benchmarks/bench_router_overhead.py --policies round_robin cache_aware
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import time

import httpx

COMPLETION = {"id": "cmpl-0", "object": "text_completion", "model": "fake",
              "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9,
                        "prompt_tokens_details": {"cached_tokens": 0}}}


def serve_worker(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI
    from starlette.responses import JSONResponse, Response

    app = FastAPI()

    @app.post("/v1/completions")
    async def completions() -> Response:
        return JSONResponse(COMPLETION)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def load(url: str, rate: float, duration: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    prefixes = [f"shared system prompt number {i}. " * 20 for i in range(8)]
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200)) as c:
        async def one(body: dict) -> None:
            t0 = time.perf_counter()
            r = await c.post(url + "/v1/completions", json=body)
            latencies.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text

        for _ in range(20):  # warm up connections
            await one({"prompt": "warmup"})
        latencies.clear()
        tasks, start, t = [], time.perf_counter(), 0.0
        while t < duration:
            t += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, start + t - time.perf_counter()))
            body = {"model": "fake", "prompt": rng.choice(prefixes) + f"question {rng.random()}",
                    "max_tokens": 1}
            tasks.append(asyncio.create_task(one(body)))
        await asyncio.gather(*tasks)
    return latencies


def select_cost(policy_name: str, workers: int, n: int, seed: int) -> dict:
    """In-process cost of one policy decision (select + done), no HTTP."""
    from types import SimpleNamespace

    from prefixserve.router.policies import make_policy
    from prefixserve.router.request_info import RequestInfo

    rng = random.Random(seed)
    policy = make_policy(policy_name, seed=seed)
    ws = tuple(SimpleNamespace(url=f"http://w{i}") for i in range(workers))
    prefixes = [f"shared system prompt number {i}. " * 20 for i in range(64)]
    infos = [RequestInfo.from_completion({"prompt": rng.choice(prefixes) + f"q {rng.random()}"})
             for _ in range(n)]
    times = []
    for info in infos:
        t0 = time.perf_counter()
        w = policy.select(info, ws)
        policy.on_request_done(w)
        times.append(time.perf_counter() - t0)
    return {"bench": "policy_select", "policy": policy_name, "workers": workers,
            "prompt_chars": sum(len(i.text) for i in infos) // n,
            "select_p50_us": round(pct(times, 50) * 1000, 2),
            "select_p99_us": round(pct(times, 99) * 1000, 2)}


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] * 1000 if len(xs) > 1 else xs[0] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--policies", nargs="+", default=["round_robin", "cache_aware"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--select-only", action="store_true",
                        help="only time policy decisions in process (no HTTP)")
    args = parser.parse_args()
    if args.serve_worker:
        serve_worker(args.serve_worker)
        return
    for policy in args.policies:
        for n_workers in (args.workers, 1000):
            print(json.dumps(select_cost(policy, n_workers, 20_000, args.seed)), flush=True)
    if args.select_only:
        return
    procs: list[subprocess.Popen] = []
    try:
        urls = []
        for _ in range(args.workers):
            port = free_port()
            procs.append(subprocess.Popen([sys.executable, __file__, "--serve-worker", str(port)]))
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            wait_ready(url)
        direct = asyncio.run(load(urls[0], args.rate, args.duration, args.seed))
        for policy in args.policies:
            port = free_port()
            router = subprocess.Popen([sys.executable, "-m", "prefixserve.router", "--worker-urls",
                                       *urls, "--policy", policy, "--port", str(port),
                                       "--log-level", "warning"])
            procs.append(router)
            wait_ready(f"http://127.0.0.1:{port}")
            routed = asyncio.run(load(f"http://127.0.0.1:{port}", args.rate, args.duration,
                                      args.seed))
            router.terminate()
            router.wait()
            print(json.dumps({
                "bench": "router_overhead", "policy": policy, "workers": args.workers,
                "rate": args.rate, "requests": len(routed),
                "direct_p50_ms": round(pct(direct, 50), 3),
                "direct_p90_ms": round(pct(direct, 90), 3),
                "router_p50_ms": round(pct(routed, 50), 3),
                "router_p90_ms": round(pct(routed, 90), 3),
                "router_p99_ms": round(pct(routed, 99), 3),
                "added_p50_ms": round(pct(routed, 50) - pct(direct, 50), 3)}), flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
