"""`prefixserve bench`: run a workload against any OpenAI-compatible server, or compare runs.

    prefixserve bench --base-url http://127.0.0.1:8000 --workload few-shot --out fs.json
    prefixserve bench --compare fs.json random.json --plot plots/

The main CLI calls `add_bench_arguments` and `run_bench`; `python -m prefixserve.bench` too.
Client-side only: needs httpx, numpy, tqdm and matplotlib, never torch or the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from prefixserve.bench.client import OpenAIClient
from prefixserve.bench.report import compare_table, label_for, summarize, summary_line
from prefixserve.bench.runner import BenchmarkRunner
from prefixserve.bench.workloads import WORKLOADS, Workload, build_workload


def option_dest(workload: str, name: str) -> str:
    return f"{workload.replace('-', '_')}__{name}"


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url",
        default="http://127.0.0.1:8000",
        help="server root or its /v1 URL (default: %(default)s)",
    )
    parser.add_argument(
        "--workload", choices=list(WORKLOADS), default="few-shot", help="default: %(default)s"
    )
    parser.add_argument("--num-requests", type=int, default=32, help="default: %(default)s")
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="requests in flight at once (default 4 unless --request-rate)",
    )
    load.add_argument(
        "--request-rate",
        type=float,
        default=None,
        help="Poisson arrivals, requests per second, no concurrency cap",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument("--model", default=None, help="default: the first of GET /v1/models")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer token (default: $OPENAI_API_KEY)",
    )
    parser.add_argument("--out", default=None, help="write the full JSON report here")
    parser.add_argument("--plot", default=None, metavar="DIR", help="write PNG plots into DIR")
    parser.add_argument(
        "--compare",
        nargs="+",
        default=None,
        metavar="JSON",
        help="print saved reports side by side instead of running",
    )
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send every prompt to /v1/chat/completions as one user message",
    )
    parser.add_argument(
        "--no-usage",
        action="store_true",
        help="do not send stream_options.include_usage (for servers that reject it)",
    )
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send ignore_eos=true (vLLM/SGLang extension) for fixed output lengths",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    for name, cls in WORKLOADS.items():
        group = parser.add_argument_group(f"{name} workload", cls.help)
        for field, default, help_text in cls.options():
            flag = f"--{name}-{field.replace('_', '-')}"
            dest = option_dest(name, field)
            if isinstance(default, bool):
                group.add_argument(
                    flag,
                    dest=dest,
                    action=argparse.BooleanOptionalAction,
                    default=default,
                    help=help_text,
                )
            else:
                metavar = "N" if isinstance(default, int) else "X"
                group.add_argument(flag, dest=dest, type=type(default), default=default,
                                   metavar=metavar, help=f"{help_text} (default: %(default)s)")  # fmt: skip


def workload_from_args(args: argparse.Namespace) -> Workload:
    cls = WORKLOADS[args.workload]
    options = {f: getattr(args, option_dest(args.workload, f), d) for f, d, _ in cls.options()}
    if args.workload == "multi-turn" and not options["num_conversations"]:
        options["num_conversations"] = args.concurrency or 4
    return build_workload(
        args.workload,
        num_requests=args.num_requests,
        max_tokens=args.max_tokens,
        seed=args.seed,
        **options,
    )


async def run_workload(args: argparse.Namespace, workload: Workload) -> dict[str, Any]:
    extra = {"ignore_eos": True} if args.ignore_eos else {}
    async with OpenAIClient(args.base_url, model=args.model, api_key=args.api_key,
                            timeout_s=args.timeout, include_usage=not args.no_usage,
                            extra_body=extra, force_chat=args.chat) as client:  # fmt: skip
        model = await client.resolve_model()
        concurrency = args.concurrency or (None if args.request_rate else 4)
        runner = BenchmarkRunner(workload, client, concurrency=concurrency,
                                 request_rate=args.request_rate, seed=args.seed,
                                 progress=not args.no_progress)  # fmt: skip
        results = await runner.run()
    meta = {
        "workload": workload.name,
        "base_url": client.base_url,
        "model": model,
        "concurrency": concurrency,
        "request_rate": args.request_rate,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "workload_options": {f: getattr(workload, f) for f, _, _ in type(workload).options()},
    }
    n = max((s.n for s in workload.start()), default=1)
    return summarize(results, runner.duration_s, meta, n_per_request=n)


def run_compare(args: argparse.Namespace) -> int:
    reports = []
    for path in args.compare:
        try:
            reports.append(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"cannot read report {path}: {exc}", file=sys.stderr)
            return 2
    labels = [label_for(p) for p in args.compare]
    print(compare_table(reports, labels))
    if args.plot:
        from prefixserve.bench.plots import write_plots

        write_plots(reports, labels, args.plot)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark (or `--compare`) that `args` describe; returns the exit code."""
    if args.compare:
        return run_compare(args)
    try:
        workload = workload_from_args(args)
        report = asyncio.run(run_workload(args, workload))
    except (ValueError, RuntimeError, OSError) as exc:  # bad sizes, no model, server down
        print(f"prefixserve bench: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:  # while resolving the model
        print(f"prefixserve bench: cannot reach {args.base_url}: {exc!r}", file=sys.stderr)
        return 1
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        from prefixserve.bench.plots import write_plots

        write_plots([report], [workload.name], args.plot)
    print(json.dumps(summary_line(report)), flush=True)
    return 0 if report["completed"] > 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prefixserve bench", description=__doc__.split("\n")[0])
    add_bench_arguments(parser)
    return run_bench(parser.parse_args(argv))
