"""load_stacked_weights: copy HF-named tensors into a model whose projections are fused.

HF checkpoints store q_proj/k_proj/v_proj and gate_proj/up_proj separately; our models keep
one qkv_proj and one gate_up_proj. Each HF tensor lands in its row range of the fused
parameter. Every parameter (every shard of a fused one) must be written exactly once, so a
truncated checkpoint or a misnamed tensor fails loudly instead of leaving random weights.
Knows nothing about file formats: the loader hands in (name, tensor) pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

# HF projection name -> (fused name, shard index within the fused parameter)
STACKED_PARAMS: dict[str, tuple[str, int]] = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}


def _fused_name(name: str) -> tuple[str, int | None]:
    """HF parameter name -> (our parameter name, shard index or None)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in STACKED_PARAMS:
            fused, shard = STACKED_PARAMS[part]
            return ".".join(parts[:i] + [fused] + parts[i + 1 :]), shard
    return name, None


def _shard_rows(model: nn.Module, name: str, shard: int) -> tuple[int, int]:
    """(start, length) of `shard` along dim 0 of fused parameter `name`."""
    module = model.get_submodule(name.rsplit(".", 2)[0])  # e.g. model.layers.0.self_attn
    if name.split(".")[-2] == "qkv_proj":
        sizes = [module.q_size, module.kv_size, module.kv_size]
    else:
        half = module.gate_up_proj.out_features // 2
        sizes = [half, half]
    return sum(sizes[:shard]), sizes[shard]


def _num_shards(name: str) -> int:
    fused = name.split(".")[-2]
    return sum(1 for f, _ in STACKED_PARAMS.values() if f == fused)


def load_stacked_weights(
    model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]], skip: tuple[str, ...] = ()
) -> None:
    params = dict(model.named_parameters())
    written: set[tuple[str, int | None]] = set()
    with torch.no_grad():
        for hf_name, tensor in weights:
            if hf_name.endswith(skip):
                continue
            name, shard = _fused_name(hf_name)
            if name not in params:
                raise ValueError(f"checkpoint tensor {hf_name!r} has no place in the model")
            target = params[name].data
            if shard is not None:
                start, length = _shard_rows(model, name, shard)
                target = target.narrow(0, start, length)
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"{hf_name}: checkpoint shape {tuple(tensor.shape)} != "
                    f"model shape {tuple(target.shape)}"
                )
            target.copy_(tensor)
            written.add((name, shard))
    expected = {
        (name, shard)
        for name in params
        for shard in (
            range(_num_shards(name))
            if name.split(".")[-2] in ("qkv_proj", "gate_up_proj")
            else [None]
        )
    }
    missing = sorted(f"{n}" + ("" if s is None else f"[shard {s}]") for n, s in expected - written)
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} weights, e.g. {missing[:5]}")
