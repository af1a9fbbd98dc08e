"""Checkpoint: resolve a model reference to a config, a tokenizer and a stream of weights.

    None            -> the default model (SmolLM2-135M-Instruct, converted once, cached)
    a directory     -> a HF checkpoint: config.json + *.safetensors (sharded or not) + tokenizer.json
    a .gguf file    -> converted once into <cache>/models/gguf-<key>/, then loaded as a directory

Weights are yielded one tensor at a time under their HF names, memory-mapped from
safetensors, so the model code can copy them into place without holding two copies.
Knows nothing about model classes or devices.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from prefixserve.loader.default_model import cache_dir, default_model_dir
from prefixserve.loader.gguf_checkpoint import convert_gguf_atomically
from prefixserve.loader.tokenizer import Tokenizer
from prefixserve.model_config import ModelConfig

_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    config: ModelConfig
    tokenizer: Tokenizer
    weight_files: tuple[Path, ...]

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield `(hf_name, tensor)` for every tensor of every safetensors file."""
        for file in self.weight_files:
            try:
                with safe_open(str(file), framework="pt") as f:
                    for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                        yield name, f.get_tensor(name)
            except (OSError, RuntimeError, ValueError) as e:
                raise ValueError(f"{file}: corrupt safetensors file: {e}") from e


def load_checkpoint(path: str | Path | None = None) -> Checkpoint:
    """Load the default model (None), a HF checkpoint directory, or a .gguf file."""
    if path is None:
        return _load_dir(default_model_dir())
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"{p}: no such file or directory (expected a HF checkpoint dir or a .gguf file)")
    if p.is_dir():
        return _load_dir(p)
    return _load_dir(converted_gguf_dir(p))


def converted_gguf_dir(gguf_path: Path) -> Path:
    """The cached HF conversion of `gguf_path`, converting on first use. The cache key is the
    resolved path, size and mtime, so an edited file is converted again."""
    st = gguf_path.stat()
    key = f"{gguf_path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    target = cache_dir() / "models" / f"gguf-{hashlib.sha256(key).hexdigest()[:16]}"
    if not target.is_dir():
        convert_gguf_atomically(gguf_path, target)
    return target


def _load_dir(path: Path) -> Checkpoint:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{path}: not a HF checkpoint directory (no config.json)")
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{config_file}: invalid JSON: {e}") from e
    config = ModelConfig.from_hf_config(raw, source=str(config_file))
    files = _weight_files(path)
    for file in files:
        _check_safetensors(file)
    return Checkpoint(path=path, config=config, tokenizer=Tokenizer.from_dir(path),
                      weight_files=files)


def _weight_files(path: Path) -> tuple[Path, ...]:
    index = path / _INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{index}: invalid safetensors index: {e!r}") from e
        files = tuple(path / name for name in dict.fromkeys(weight_map.values()))
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"{index}: lists shard(s) that do not exist: {', '.join(missing)}")
        return files
    files = tuple(sorted(path.glob("*.safetensors")))
    if not files:
        raise ValueError(f"{path}: no weights (*.safetensors or {_INDEX}); "
                         ".bin/.pt checkpoints are not supported")
    return files


def _check_safetensors(file: Path) -> None:
    """Read the header now, so a truncated or foreign file fails at load time, by name."""
    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors raises its own SafetensorError
        raise ValueError(f"{file}: corrupt safetensors file: {e}") from e
