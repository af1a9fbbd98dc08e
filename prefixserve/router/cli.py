"""`prefixserve router ...`: argument definitions and the entry point that runs the router.

`add_router_arguments(parser)` adds the router's flags (the main CLI calls it for its
`router` subcommand); every field of every policy's config dataclass becomes a flag, applied
only to the policy that has it. `run_router(args)` serves until interrupted;
`run_router_in_process(...)` starts one in a background thread and returns its `RouterServer`
(for `prefixserve serve --dp-size N` and tests).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

import uvicorn

from prefixserve.router.app import RouterServer, build_app
from prefixserve.router.policies import RoutingPolicy, make_policy, policy_class, policy_names
from prefixserve.router.prompt_tokenizer import PromptTokenizer
from prefixserve.router.router import Router, RouterConfig

ROUTER_HELP = {
    "health_check_interval_secs": "seconds between GET /health probes of each worker",
    "health_check_timeout_secs": "timeout of one health probe",
    "health_failure_threshold": "failed probes in a row before a worker is unhealthy",
    "health_success_threshold": "good probes in a row before it rejoins",
    "max_retries": "retries of a failed request on other workers",
    "retry_backoff_secs": "initial backoff once every worker was tried (x1.5 per retry)",
    "cb_failure_threshold": "failures in a row that open a worker's circuit breaker",
    "cb_success_threshold": "successes in a row that close a half-open breaker",
    "cb_open_secs": "seconds an open breaker skips its worker before probing again",
    "disable_circuit_breaker": "never skip a worker for failing requests",
    "request_timeout_secs": "timeout of a forwarded request",
    "maintain_interval_secs": "seconds between policy housekeeping runs (eviction, expiry)",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_dataclass_fields(group: argparse._ArgumentGroup, cls: type, seen: set[str],
                          helps: dict[str, str] | None = None) -> None:
    for f in dataclasses.fields(cls):
        if f.name in seen:
            continue
        seen.add(f.name)
        help_text = (helps or {}).get(f.name) or f.metadata.get("help", "")
        if f.type in (bool, "bool"):
            group.add_argument(_flag(f.name), action="store_true", default=None, help=help_text)
        else:
            kind = type(f.default)
            group.add_argument(_flag(f.name), type=kind, default=None,
                               help=f"{help_text} (default: {f.default})")


def add_router_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worker-urls", nargs="*", default=[], metavar="URL",
                        help="worker base URLs (more can be added at runtime: POST /workers)")
    parser.add_argument("--policy", default="cache_aware", choices=policy_names())
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer.json or a model dir (kv_events with text prompts)")
    parser.add_argument("--seed", type=int, default=None, help="seed for random tie-breaks")
    parser.add_argument("--log-level", default="info")
    seen: set[str] = set()
    _add_dataclass_fields(parser.add_argument_group("reliability"), RouterConfig, seen,
                          ROUTER_HELP)
    for name in policy_names():
        cls = policy_class(name)
        group = parser.add_argument_group(f"policy {name}")
        _add_dataclass_fields(group, cls.config_cls, seen)


def _options(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def build_router(args: argparse.Namespace) -> Router:
    tokenizer = PromptTokenizer(args.tokenizer) if getattr(args, "tokenizer", None) else None
    options = {k: v for k, v in vars(args).items() if k not in ("policy", "seed", "tokenizer")}
    policy: RoutingPolicy = make_policy(args.policy, seed=getattr(args, "seed", None),
                                        tokenizer=tokenizer, **options)
    return Router(policy, list(args.worker_urls or []), RouterConfig(**_options(args, RouterConfig)))


def run_router(args: argparse.Namespace) -> None:
    """Serve the router in the foreground until interrupted."""
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    router = build_router(args)
    uvicorn.run(build_app(router), host=args.host, port=args.port,
                log_level=args.log_level.lower())


def run_router_in_process(worker_urls: list[str], policy: str = "cache_aware",
                          host: str = "127.0.0.1", port: int = 0, **options: Any) -> RouterServer:
    """Start a router in a background thread; `options` are any router/policy flag names
    (underscored). Returns the started `RouterServer` (`.url`, `.stop()`)."""
    parser = argparse.ArgumentParser()
    add_router_arguments(parser)
    args = parser.parse_args(["--policy", policy])
    args.worker_urls, args.host, args.port = list(worker_urls), host, port
    for key, value in options.items():
        if not hasattr(args, key):
            raise TypeError(f"unknown router option {key!r}")
        setattr(args, key, value)
    return RouterServer(build_router(args), host, port).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prefixserve router",
                                     description="prefix-cache-aware router for prefixserve")
    add_router_arguments(parser)
    run_router(parser.parse_args(argv))
