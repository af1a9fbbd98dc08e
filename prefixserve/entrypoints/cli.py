"""The `prefixserve` command: generate | serve | router | bench | simulate.

Each subcommand imports its own machinery only when chosen, so `prefixserve router` and
`prefixserve bench` never load torch. Bad arguments exit with status 2 and a message.
"""

from __future__ import annotations

import argparse
import sys

from prefixserve.entrypoints.engine_args import add_engine_arguments, engine_kwargs


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate a completion and stream it to stdout")
    p.add_argument("prompt", help="the prompt text (with --chat: the user message)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--chat", action="store_true", help="apply the model's chat template")
    p.add_argument("--system", default=None, help="system message (with --chat)")
    add_engine_arguments(p)


def _run_generate(args: argparse.Namespace) -> int:
    from prefixserve.entrypoints.llm import LLM
    from prefixserve.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                            top_p=args.top_p, top_k=args.top_k)
    llm = LLM(**engine_kwargs(args))
    prompt: str | dict = args.prompt
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        prompt = llm.get_tokenizer().encode_chat(messages)
    engine = llm.engine
    rid = engine.next_request_id()
    engine.add_request(rid, prompt, params)
    shown = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            text = out.outputs[0].text
            sys.stdout.write(text[shown:])
            sys.stdout.flush()
            shown = len(text)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prefixserve", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_optional(sub, "serve", "prefixserve.entrypoints.openai.cli", "add_serve_arguments",
                  "serve the OpenAI-compatible API")
    _add_optional(sub, "router", "prefixserve.router.cli", "add_router_arguments",
                  "prefix-cache-aware router over many workers")
    _add_optional(sub, "bench", "prefixserve.bench.cli", "add_bench_arguments",
                  "benchmark a workload against any OpenAI-compatible server")
    _add_optional(sub, "simulate", "prefixserve.simulator.cli", "add_simulate_arguments",
                  "simulate router policies over many workers")
    return parser


def _add_optional(sub: argparse._SubParsersAction, name: str, module: str, fn: str, help_text: str) -> None:
    import importlib

    try:
        add = getattr(importlib.import_module(module), fn)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name):
            raise
        return  # that part of the product is not installed in this build
    add(sub.add_parser(name, help=help_text))


_RUNNERS = {
    "serve": ("prefixserve.entrypoints.openai.cli", "run_serve"),
    "router": ("prefixserve.router.cli", "run_router"),
    "bench": ("prefixserve.bench.cli", "run_bench"),
    "simulate": ("prefixserve.simulator.cli", "run_simulate"),
}


def main(argv: list[str] | None = None) -> int:
    import importlib

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            return _run_generate(args)
        module, fn = _RUNNERS[args.command]
        return int(getattr(importlib.import_module(module), fn)(args) or 0)
    except ValueError as e:
        parser.exit(2, f"prefixserve {args.command}: error: {e}\n")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
