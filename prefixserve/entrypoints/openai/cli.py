"""`prefixserve serve`: flags and the entry point of the OpenAI-compatible server.

Builds the one engine from the shared engine flags, wraps it in AsyncLLM, and serves the
app with uvicorn. `run_serve` returns the process exit status; a bad flag value raises
ValueError, which the main CLI turns into exit status 2 with the message.
"""

from __future__ import annotations

import argparse
import logging
import os

from prefixserve.entrypoints.engine_args import add_engine_arguments, engine_kwargs

DEFAULT_SERVED_NAME = "SmolLM2-135M-Instruct"


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
