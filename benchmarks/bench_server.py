"""Server overhead: the same engine offline (`LLM.generate`) and behind HTTP, in one process.

(a) TTFT of a cached-prefix request: a `--prefix-tokens` shared prefix is cached first,
    then each request adds a short unique question; offline TTFT is one `LLM.generate`
    call with max_tokens=1, HTTP TTFT is the time to the first streamed token of
    `/v1/completions` (goal: within 10 ms of offline).
(b) `--num-streams` concurrent streaming clients, greedy, EOS ignored, `--max-tokens` each:
    output tok/s, p50/p99 TTFT and errors; the same batch offline for comparison.

The server is the real app (AsyncLLM + FastAPI + uvicorn) in a thread of this process,
wrapping the very engine of the `LLM`. The offline calls run `LLM.generate` on the engine
thread itself (as one AsyncLLM.call, timed inside it), so both paths share the engine, its
cache and its torch thread pool; offline and HTTP requests alternate, so load from
elsewhere on the machine hits both alike. Seeded; prints one JSON line per result.

    python benchmarks/bench_server.py [--num-streams 64] [--max-tokens 32] [--reps 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import threading
import time

import httpx
import uvicorn

from prefixserve import LLM, SamplingParams
from prefixserve.engine.async_llm import AsyncLLM
from prefixserve.entrypoints.openai.api_server import ServerOptions, build_app

MODEL = "SmolLM2-135M-Instruct"
WORDS = ("river stone bread lamp window garden engine cloud paper violin harbor meadow copper "
         "lantern orchard signal canyon thread mirror compass").split()


def make_prefix(num_tokens: int, llm: LLM, seed: int) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    while len(llm.get_tokenizer().encode(" ".join(words))) < num_tokens:
        words.extend(rng.choice(WORDS) for _ in range(16))
    return "Background notes: " + " ".join(words) + "\n"


def question(i: int) -> str:
    return f"Question {i}: what is item {i * 7 % 13}?"


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def ms(seconds: float) -> float:
    return round(1000 * seconds, 2)


# ----------------------------------------------------------------------------- offline
def offline_ttft(llm: LLM, prompt: str) -> float:
    t = time.perf_counter()
    out = llm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)[0]
    dt = time.perf_counter() - t
    assert out.num_cached_tokens > 0, "the prefix should be cached"
    return dt


def offline_batch(llm: LLM, prompts: list[str], max_tokens: int) -> dict:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"bench": "concurrent_streams", "path": "offline", "requests": len(prompts), "output_tokens": tokens,
            "seconds": round(dt, 2), "output_tok_s": round(tokens / dt, 1)}


# -------------------------------------------------------------------------------- http
def start_server(llm: LLM) -> tuple[str, uvicorn.Server, AsyncLLM]:
    engine = AsyncLLM(llm.engine)
    app = build_app(engine, ServerOptions(model_names=[MODEL], log_interval=0))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", server, engine


async def stream_one(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> tuple[float, int]:
    """(TTFT seconds, output tokens) of one streamed completion."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    t = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if ttft is None and chunk["choices"]:
                ttft = time.perf_counter() - t
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    assert ttft is not None
    return ttft, tokens


async def ttft_pairs(url: str, llm: LLM, engine: AsyncLLM, prefix: str,
                     reps: int) -> tuple[list[float], list[float]]:
    """Alternating offline / HTTP cached-prefix requests (each with its own question)."""
    offline, http = [], []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await stream_one(client, prefix + "warm-up", 1)
        for i in range(reps):
            offline.append(await engine.call(lambda i=i: offline_ttft(llm, prefix + question(2 * i))))
            http.append((await stream_one(client, prefix + question(2 * i + 1), 1))[0])
    return offline, http


async def http_batch(url: str, prompts: list[str], max_tokens: int) -> dict:
    limits = httpx.Limits(max_connections=len(prompts) + 8)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        t = time.perf_counter()
        results = await asyncio.gather(*(stream_one(client, p, max_tokens) for p in prompts),
                                       return_exceptions=True)
        dt = time.perf_counter() - t
    ok = [r for r in results if not isinstance(r, BaseException)]
    ttfts = [r[0] for r in ok]
    tokens = sum(r[1] for r in ok)
    return {"bench": "concurrent_streams", "path": "http", "requests": len(prompts),
            "errors": len(results) - len(ok), "output_tokens": tokens, "seconds": round(dt, 2),
            "output_tok_s": round(tokens / dt, 1),
            "ttft_p50_ms": ms(percentile(ttfts, 50)) if ttfts else None,
            "ttft_p99_ms": ms(percentile(ttfts, 99)) if ttfts else None}


async def _on_engine(engine: AsyncLLM, fn):  # noqa: ANN001, ANN202
    return await engine.call(fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix-tokens", type=int, default=512)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--num-streams", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    llm = LLM(seed=args.seed, max_num_seqs=max(64, args.num_streams))
    prefix = make_prefix(args.prefix_tokens, llm, args.seed)
    prompts = [f"Story {i}: once upon a time, a {WORDS[i % len(WORDS)]} " for i in range(args.num_streams)]

    url, server, engine = start_server(llm)
    try:
        off, via_http = asyncio.run(ttft_pairs(url, llm, engine, prefix, args.reps))
        diffs = [h - o for o, h in zip(off, via_http, strict=True)]
        overhead = statistics.median(diffs)
        print(json.dumps({"bench": "cached_prefix_ttft", "prefix_tokens": args.prefix_tokens, "reps": args.reps,
                          "offline_p50_ms": ms(statistics.median(off)), "http_p50_ms": ms(statistics.median(via_http)),
                          "http_overhead_p50_ms": ms(overhead), "within_10ms": overhead <= 0.010}), flush=True)
        batch = asyncio.run(_on_engine(engine, lambda: offline_batch(llm, prompts, args.max_tokens)))
        print(json.dumps(batch), flush=True)
        print(json.dumps(asyncio.run(http_batch(url, prompts, args.max_tokens))), flush=True)
    finally:
        server.should_exit = True
        engine.shutdown()


if __name__ == "__main__":
    main()
