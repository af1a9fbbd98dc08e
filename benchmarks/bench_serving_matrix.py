"""Every `prefixserve bench` workload against our own server, with caching off / hash / radix.

For each cache configuration one `prefixserve serve` process starts on loopback; each workload
then runs through `prefixserve bench` (the same client any user points at any server) and its
summary is printed as one JSON line, with the configuration added. Sizes are kept small so the
whole matrix finishes in minutes on 2 cores.

    python benchmarks/bench_serving_matrix.py [--num-requests 16] [--workloads few-shot random ...]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

CONFIGS = {
    "off": ["--no-enable-prefix-caching"],
    "hash16": ["--prefix-cache", "hash", "--block-size", "16"],
    "radix1": ["--prefix-cache", "radix", "--block-size", "1"],
}
WORKLOADS = ["few-shot", "self-consistency", "multi-turn", "tree-of-thought", "table-qa", "shared-prefix", "random"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(flags: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "prefixserve", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--log-interval", "0", "--log-level", "warning", *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the server did not start")


def run_bench(url: str, workload: str, num_requests: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "prefixserve", "bench", "--base-url", url, "--workload", workload,
           "--num-requests", str(num_requests), "--concurrency", "8", "--max-tokens", "16", "--seed", "0",
           "--out", str(out), "--no-progress"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    result.pop("requests", None)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--workloads", nargs="*", default=WORKLOADS)
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prefixserve-matrix-"))
    for name in args.configs:
        proc, url = start_server(CONFIGS[name])
        try:
            for workload in args.workloads:
                httpx.post(url + "/reset_prefix_cache", timeout=30)
                r = run_bench(url, workload, args.num_requests, tmp / f"{name}-{workload}.json")
                print(json.dumps({"bench": "serving", "cache": name, "workload": workload,
                                  "num_requests": r["num_requests"], "cached_token_ratio": r["cached_token_ratio"],
                                  "ttft_ms_p50": r["ttft_ms"]["p50"], "ttft_ms_p90": r["ttft_ms"]["p90"],
                                  "tpot_ms_p50": r["tpot_ms"]["p50"], "request_throughput": r["request_throughput"],
                                  "output_throughput": r["output_throughput"], "errors": r["errors"]["count"]}),
                      flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
