"""`prefixserve simulate`: compare routing policies on a simulated cluster, or calibrate it.

    prefixserve simulate --workers 64 --policy round_robin --policy cache_aware \
        --workload shared-prefix --requests 10000 --out sim.json
    prefixserve simulate --calibrate            # time the real default model, print constants

Every policy runs the same requests (the workload is generated once) on a fresh cluster;
the results are printed side by side and, with `--out`, written as a JSON list with one
object per policy. Workload sizes use the same flags as `prefixserve bench`
(`--shared-prefix-num-groups 64`, ...). Policy options use the router's flags
(`--cache-threshold 0.5`, ...), each passed to the policies that have it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import fields
from typing import Any

from prefixserve.bench.workloads import WORKLOADS, Workload, build_workload
from prefixserve.router.policies import policy_class, policy_names
from prefixserve.simulator.cluster_simulator import DEFAULT_WORKER_BLOCKS, SimConfig, simulate
from prefixserve.simulator.cost_model import CostModel
from prefixserve.simulator.report import format_table


def _workload_dest(workload: str, name: str) -> str:
    return f"{workload.replace('-', '_')}__{name}"


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=8, help="simulated workers (default: %(default)s)")
    parser.add_argument("--policy", action="append", choices=policy_names(), default=None,
                        help="routing policy; repeat to compare (default: all of them)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="shared-prefix",
                        help="default: %(default)s")
    parser.add_argument("--requests", type=int, default=1000, help="default: %(default)s")
    parser.add_argument("--max-tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--worker-blocks", type=int, default=DEFAULT_WORKER_BLOCKS,
                        help="KV blocks per worker (default: %(default)s, the default engine's)")
    parser.add_argument("--block-size", type=int, default=16, help="default: %(default)s")
    parser.add_argument("--prefix-cache", choices=["hash", "radix"], default="hash")
    parser.add_argument("--hash-algo", choices=["sha256", "xxhash"], default="xxhash")
    parser.add_argument("--max-num-seqs", type=int, default=64,
                        help="requests running at once per worker (default: %(default)s)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048,
                        help="tokens per engine step per worker (default: %(default)s)")
    parser.add_argument("--request-rate", type=float, default=math.inf,
                        help="Poisson arrivals per second (default: all at t=0)")
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument("--out", default=None, help="write the results as a JSON list here")
    parser.add_argument("--no-kv-usage-reports", action="store_true",
                        help="kv_events: workers report no KV usage (scores cached workers only)")
    cost = parser.add_argument_group("cost model (ms; defaults measured by --calibrate)")
    for f in fields(CostModel):
        cost.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=f.default,
                          help="default: %(default)s")
    cal = parser.add_argument_group("calibration")
    cal.add_argument("--calibrate", action="store_true",
                     help="time the real engine and print the cost constants (needs torch)")
    cal.add_argument("--model", default=None, help="model to calibrate (default: the default model)")
    _add_workload_options(parser)
    _add_policy_options(parser)


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    for name, cls in WORKLOADS.items():
        group = parser.add_argument_group(f"{name} workload", cls.help)
        for field, default, help_text in cls.options():
            flag, dest = f"--{name}-{field.replace('_', '-')}", _workload_dest(name, field)
            if isinstance(default, bool):
                group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                                   default=default, help=help_text)
            else:
                group.add_argument(flag, dest=dest, type=type(default), default=default,
                                   help=f"{help_text} (default: %(default)s)")


def _policy_fields() -> dict[str, tuple[type, Any, str]]:
    out: dict[str, tuple[type, Any, str]] = {}
    for name in policy_names():
        for f in fields(policy_class(name).config_cls):
            out.setdefault(f.name, (type(f.default), f.default, f.metadata.get("help", "")))
    return out


def _add_policy_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("policy options (as `prefixserve router`)")
    for name, (kind, _, help_text) in _policy_fields().items():
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"policy__{name}", type=kind,
                           default=None, help=help_text)


def workload_from_args(args: argparse.Namespace) -> Workload:
    cls = WORKLOADS[args.workload]
    options = {f: getattr(args, _workload_dest(args.workload, f), d) for f, d, _ in cls.options()}
    if args.workload == "multi-turn" and not options["num_conversations"]:
        options["num_conversations"] = 4 * args.workers  # enough conversations to spread
    return build_workload(args.workload, num_requests=args.requests, max_tokens=args.max_tokens,
                          seed=args.seed, **options)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    cost = CostModel(**{f.name: getattr(args, f.name) for f in fields(CostModel)})
    options = {name: getattr(args, f"policy__{name}") for name in _policy_fields()
               if getattr(args, f"policy__{name}", None) is not None}
    return SimConfig(num_workers=args.workers, worker_blocks=args.worker_blocks,
                     block_size=args.block_size, prefix_cache=args.prefix_cache,
                     hash_algo=args.hash_algo, max_num_seqs=args.max_num_seqs,
                     max_num_batched_tokens=args.max_num_batched_tokens,
                     request_rate=args.request_rate, seed=args.seed, cost=cost,
                     kv_usage_reports=not args.no_kv_usage_reports,
                     policy_options={"kv_block_size": args.block_size, **options})


def run_calibrate(args: argparse.Namespace) -> int:
    from prefixserve.simulator.calibration import calibrate

    result = calibrate(model=args.model, seed=args.seed)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    if args.calibrate:
        return run_calibrate(args)
    if args.requests < 1:
        raise ValueError(f"--requests must be >= 1, got {args.requests}")
    config = config_from_args(args)
    workload = workload_from_args(args)
    roots = workload.start()
    results = []
    for policy in args.policy or policy_names():
        result = simulate(policy, workload, config, roots)
        result["cost_model"] = config.cost.to_dict()
        results.append(result)
        print(f"simulate: {policy} done in {result['wall_s']:.1f}s", file=sys.stderr)
    print(format_table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prefixserve simulate", description=__doc__.splitlines()[0])
    add_simulate_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_simulate(args)
    except ValueError as e:
        parser.exit(2, f"prefixserve simulate: error: {e}\n")
