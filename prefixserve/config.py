"""Engine configuration: frozen dataclasses built once from kwargs or CLI flags.

Each is validated in __post_init__ with a message that says what to fix. The model's own
architecture facts live in model_config.ModelConfig; this module knows nothing about files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from prefixserve.kv_cache.prefix_cache import EVICTION_POLICIES, HASH_ALGOS

PREFIX_CACHES = ("hash", "radix")
SCHEDULING_POLICIES = ("fcfs", "lpm")
DTYPES = ("float32", "bfloat16", "float16")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _positive_int(value: Any, name: str) -> None:
    _require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
             f"{name} must be a positive integer, got {value!r}")


def _one_of(value: Any, choices: tuple[str, ...], name: str) -> None:
    _require(value in choices, f"{name} must be one of {', '.join(choices)}; got {value!r}")


@dataclass(frozen=True)
class CacheConfig:
    enable_prefix_caching: bool = True
    prefix_cache: str = "hash"
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: sized from kv_cache_memory_gb
    kv_cache_memory_gb: float = 2.0
    eviction_policy: str = "lru"
    hash_algo: str = "sha256"
    hash_seed: int = 0
    kv_events_ring_size: int = 10_000  # events kept for /kv_events subscribers that poll

    def __post_init__(self) -> None:
        _one_of(self.prefix_cache, PREFIX_CACHES, "prefix_cache")
        _positive_int(self.kv_events_ring_size, "kv_events_ring_size")
        _one_of(self.eviction_policy, EVICTION_POLICIES, "eviction_policy")
        _one_of(self.hash_algo, HASH_ALGOS, "hash_algo")
        _positive_int(self.block_size, "block_size")
        if self.num_kv_blocks is not None:
            _positive_int(self.num_kv_blocks, "num_kv_blocks")
        _require(self.kv_cache_memory_gb > 0, f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb!r}")


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # None: the model's max_position_embeddings, capped at 8192
    enable_chunked_prefill: bool = True
    scheduling_policy: str = "fcfs"
    lpm_max_queue: int = 128  # lpm falls back to fcfs above this many waiting requests
    lpm_max_skips: int = 32  # a request passed over this many times goes first (no starvation)

    def __post_init__(self) -> None:
        _positive_int(self.max_num_seqs, "max_num_seqs")
        _positive_int(self.max_num_batched_tokens, "max_num_batched_tokens")
        if self.max_model_len is not None:
            _positive_int(self.max_model_len, "max_model_len")
        _one_of(self.scheduling_policy, SCHEDULING_POLICIES, "scheduling_policy")


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    attention_backend: str | None = None  # None: the fastest one for the device
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        _one_of(self.dtype, DTYPES, "dtype")
        _require(isinstance(self.device, str) and self.device.split(":")[0] in ("cpu", "cuda"),
                 f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """Split flat kwargs (as LLM(...) and the CLI take them) into the nested configs."""
        groups: dict[type, dict[str, Any]] = {CacheConfig: {}, SchedulerConfig: {}, cls: {}}
        names = {c: {f.name for f in fields(c)} for c in groups}
        for key, value in kwargs.items():
            owner = next((c for c in groups if key in names[c] and key not in ("cache", "scheduler")), None)
            _require(owner is not None, f"unknown engine option {key!r}")
            groups[owner][key] = value
        return cls(cache=CacheConfig(**groups[CacheConfig]),
                   scheduler=SchedulerConfig(**groups[SchedulerConfig]), **groups[cls])
