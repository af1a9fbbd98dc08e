"""Engine options as command-line flags, shared by `generate` and `serve`.

Flags are spelled as vLLM spells them (--max-num-seqs, --block-size, ...) and map 1:1 onto
EngineConfig.from_kwargs; validation happens there, so a bad value gives the same message
on the CLI as in Python. Imports nothing heavy: the router's and bench's CLIs share the parser.
"""

from __future__ import annotations

import argparse
from typing import Any

from prefixserve.config import (
    DTYPES,
    EVICTION_POLICIES,
    HASH_ALGOS,
    PREFIX_CACHES,
    SCHEDULING_POLICIES,
)

_CHOICES = {
    "prefix_cache": PREFIX_CACHES,
    "eviction_policy": EVICTION_POLICIES,
    "hash_algo": HASH_ALGOS,
    "scheduling_policy": SCHEDULING_POLICIES,
    "dtype": DTYPES,
}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("engine")
    g.add_argument("--model", default=None,
                   help="HF checkpoint dir or .gguf file (default: the embedded SmolLM2-135M-Instruct)")
    g.add_argument("--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false",
                   help="turn the prefix cache off")
    g.add_argument("--prefix-cache", choices=_CHOICES["prefix_cache"], default="hash",
                   help="hash: vLLM-style block hashes; radix: SGLang-style radix tree")
    g.add_argument("--block-size", type=int, default=16, help="tokens per KV block (radix: 1 = token-level)")
    g.add_argument("--num-kv-blocks", type=int, default=None, help="KV pool size in blocks (default: from memory)")
    g.add_argument("--kv-cache-memory-gb", type=float, default=2.0, help="KV pool size when --num-kv-blocks is unset")
    g.add_argument("--eviction-policy", choices=_CHOICES["eviction_policy"], default="lru")
    g.add_argument("--hash-algo", choices=_CHOICES["hash_algo"], default="sha256")
    g.add_argument("--hash-seed", type=int, default=0, help="root of the block hash chain (routers use the same)")
    g.add_argument("--scheduling-policy", choices=_CHOICES["scheduling_policy"], default="fcfs")
    g.add_argument("--max-num-seqs", type=int, default=64)
    g.add_argument("--max-num-batched-tokens", type=int, default=2048)
    g.add_argument("--max-model-len", type=int, default=None)
    g.add_argument("--no-enable-chunked-prefill", dest="enable_chunked_prefill", action="store_false")
    g.add_argument("--dtype", choices=_CHOICES["dtype"], default="float32")
    g.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    g.add_argument("--seed", type=int, default=0)


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    names = ("model", "enable_prefix_caching", "prefix_cache", "block_size", "num_kv_blocks",
             "kv_cache_memory_gb", "eviction_policy", "hash_algo", "hash_seed", "scheduling_policy",
             "max_num_seqs", "max_num_batched_tokens", "max_model_len", "enable_chunked_prefill",
             "dtype", "device", "seed")
    return {n: getattr(args, n) for n in names}
