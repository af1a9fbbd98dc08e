"""RoPE and RMSNorm against transformers' own implementations."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from prefixserve.layers.rmsnorm import RMSNorm
from prefixserve.layers.rotary import RotaryEmbedding, apply_rotary

HEAD_DIM = 64
ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


@pytest.mark.parametrize("kind", list(ROPES))
def test_rotary_matches_transformers(kind: str) -> None:
    params = ROPES[kind]
    hf_config = LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        rope_parameters=dict(params),
        max_position_embeddings=131072,
    )
    hf_rope = LlamaRotaryEmbedding(hf_config)
    scaling = None if kind == "default" else params
    ours = RotaryEmbedding(HEAD_DIM, params["rope_theta"], scaling)
    torch.testing.assert_close(ours.inv_freq, hf_rope.inv_freq, atol=0, rtol=0)

    positions = torch.tensor([0, 1, 7, 300, 4095, 8191, 20000, 100000])
    q = torch.randn(len(positions), 4, HEAD_DIM)
    k = torch.randn(len(positions), 2, HEAD_DIM)
    hf_cos, hf_sin = hf_rope(q, positions[None])
    # transformers works on [batch, heads, seq, dim]
    hf_q, hf_k = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], hf_cos, hf_sin
    )
    cos, sin = ours.cos_sin(positions, q.dtype)
    torch.testing.assert_close(
        apply_rotary(q, cos, sin), hf_q[0].transpose(0, 1), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        apply_rotary(k, cos, sin), hf_k[0].transpose(0, 1), atol=1e-5, rtol=0
    )


def test_unknown_rope_scaling_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported rope_scaling"):
        RotaryEmbedding(HEAD_DIM, 10000.0, {"rope_type": "made_up", "factor": 2.0})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_transformers(dtype: torch.dtype) -> None:
    hf = LlamaRMSNorm(96, eps=1e-5)
    ours = RMSNorm(96, eps=1e-5)
    weight = torch.randn(96)
    hf.weight.data.copy_(weight)
    ours.weight.data.copy_(weight)
    hf, ours = hf.to(dtype), ours.to(dtype)
    x = (torch.randn(5, 96) * 3).to(dtype)
    torch.testing.assert_close(ours(x), hf(x), atol=1e-5, rtol=0)


def test_rmsnorm_fuses_residual_add() -> None:
    norm = RMSNorm(32)
    norm.weight.data.uniform_(0.5, 1.5)
    x, residual = torch.randn(3, 32), torch.randn(3, 32)
    normed, new_residual = norm(x, residual)
    torch.testing.assert_close(new_residual, x + residual)
    torch.testing.assert_close(normed, norm(x + residual))
