"""Rotary position embedding (RoPE), with the default, linear and llama3 frequency rules.

Uses the "rotate half" layout of HF checkpoints (the two halves of each head are the
rotated pair). cos/sin are computed from the step's positions once per forward and shared
by every layer. Knows nothing about attention or the KV cache.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1: keep high frequencies, divide low ones by `factor`, blend in between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context_len = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def compute_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None = None
) -> torch.Tensor:
    """[head_dim // 2] float32 inverse frequencies for the given rope_scaling dict."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, scaling)
    raise ValueError(
        f"unsupported rope_scaling type {rope_type!r}; supported: default, linear, llama3"
    )


class RotaryEmbedding(nn.Module):
    def __init__(
        self, head_dim: int, theta: float = 10000.0, scaling: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.register_buffer(
            "inv_freq", compute_inv_freq(head_dim, theta, scaling), persistent=False
        )

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [num_tokens, 1, head_dim // 2], ready to broadcast over heads."""
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        return freqs.cos().to(dtype)[:, None, :], freqs.sin().to(dtype)[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [num_tokens, num_heads, head_dim] by the half-width cos/sin of its positions.

    Same result as x * cos + rotate_half(x) * sin with cos/sin repeated to full width, in
    fewer passes over memory: out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
    """
    x1, x2 = x.chunk(2, dim=-1)
    out = torch.empty_like(x)
    out1, out2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=out1)
    out1.addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=out2)
    out2.addcmul_(x1, sin)
    return out
