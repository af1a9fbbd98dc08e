"""`prefixserve serve`: flags and the entry point of the OpenAI-compatible server.

Builds the one engine from the shared engine flags, wraps it in AsyncLLM, and serves the
app with uvicorn. With `--dp-size N > 1` it instead hands over to the router's launcher:
N such workers on ports PORT+1..PORT+N behind a router on PORT, each given the same
engine and server flags. `run_serve` returns the process exit status; a bad flag value
raises ValueError, which the main CLI turns into exit status 2 with the message.
"""

from __future__ import annotations

import argparse
import logging
import os

from prefixserve.entrypoints.engine_args import add_engine_arguments, engine_kwargs

DEFAULT_SERVED_NAME = "SmolLM2-135M-Instruct"
ROUTER_POLICIES = ("round_robin", "random", "least_load", "power_of_two", "consistent_hash", "prefix_hash",
                   "cache_aware", "kv_events")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("server")
    g.add_argument("--host", default="0.0.0.0", help="address to bind (default: all interfaces)")
    g.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port)")
    g.add_argument("--served-model-name", nargs="+", default=None,
                   help="model name(s) the API accepts (default: the --model path's name)")
    g.add_argument("--api-key", default=os.environ.get("PREFIXSERVE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $PREFIXSERVE_API_KEY)")
    g.add_argument("--max-n", type=int, default=16, help="largest `n` (completions per prompt) accepted")
    g.add_argument("--log-interval", type=float, default=10.0,
                   help="seconds between status log lines (running, waiting, KV usage, hit rate); 0: off")
    g.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    g.add_argument("--dp-size", type=int, default=1,
                   help="data parallel: N worker processes behind a router on --port (workers on PORT+1..)")
    g.add_argument("--router-policy", choices=ROUTER_POLICIES, default="cache_aware",
                   help="with --dp-size > 1: how the router picks a worker")
    add_engine_arguments(parser)


def served_model_names(args: argparse.Namespace) -> list[str]:
    if args.served_model_name:
        return list(args.served_model_name)
    if args.model is None:
        return [DEFAULT_SERVED_NAME]
    return [args.model]


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from prefixserve.engine.async_llm import AsyncLLM
    from prefixserve.entrypoints.openai.api_server import ServerOptions, build_app

    if args.max_n < 1:
        raise ValueError(f"--max-n must be >= 1, got {args.max_n}")
    if args.log_interval < 0:
        raise ValueError(f"--log-interval must be >= 0, got {args.log_interval}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.dp_size < 1:
        raise ValueError(f"--dp-size must be >= 1, got {args.dp_size}")
    if args.dp_size > 1:
        from prefixserve.router.launcher import launch_data_parallel

        return launch_data_parallel(args.dp_size, args.router_policy, args.host, args.port, worker_args(args), {})
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine = AsyncLLM.from_kwargs(**engine_kwargs(args))
    options = ServerOptions(model_names=served_model_names(args), model_path=args.model, api_key=args.api_key,
                            max_n=args.max_n, log_interval=args.log_interval)
    app = build_app(engine, options)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=5)
    finally:
        engine.shutdown()
    return 0


def worker_args(args: argparse.Namespace) -> list[str]:
    """The flags one data-parallel worker needs: every engine and server flag except
    where to listen and the data-parallel ones."""
    out: list[str] = []
    for name, value in engine_kwargs(args).items():
        if name in ("enable_prefix_caching", "enable_chunked_prefill"):
            out += [] if value else [f"--no-{name.replace('_', '-')}"]
        elif value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    out += ["--served-model-name", *served_model_names(args), "--max-n", str(args.max_n),
            "--log-interval", str(args.log_interval), "--log-level", args.log_level]
    if args.api_key:
        out += ["--api-key", args.api_key]
    return out
