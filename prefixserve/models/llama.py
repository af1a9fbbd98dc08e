"""LlamaForCausalLM: the decoder-only transformer shared by Llama, Mistral, Qwen2 and Qwen3.

The variants differ only in flags read from ModelConfig: q/k/v bias (Qwen2), per-head q/k
RMSNorm before RoPE (Qwen3), RoPE scaling (Llama 3.1) and tied embeddings (SmolLM2, small
Qwens). q/k/v and gate/up projections are fused into one matmul each at load time.

Shapes: a step packs all scheduled tokens into one [num_tokens] batch; the model returns
final hidden states [num_tokens, hidden] and `compute_logits` projects only the rows the
caller samples. The model knows nothing about scheduling, sampling or how blocks were chosen.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from prefixserve.layers.attention import Attention
from prefixserve.layers.attention_backends import AttentionBackend
from prefixserve.layers.attention_metadata import AttentionMetadata
from prefixserve.layers.rmsnorm import RMSNorm
from prefixserve.layers.rotary import RotaryEmbedding, apply_rotary
from prefixserve.model_config import SUPPORTED_ARCHITECTURES, ModelConfig
from prefixserve.models.weights import load_stacked_weights

KVCache = tuple[torch.Tensor, torch.Tensor]


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        family = SUPPORTED_ARCHITECTURES[config.architecture][0]
        self.qkv_proj = nn.Linear(
            config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias
        )
        # Qwen2 biases q/k/v only; Llama/Qwen3 with attention_bias also bias o_proj.
        o_bias = config.attention_bias and family != "qwen2"
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=o_bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.attn = Attention(self.num_heads, self.num_kv_heads, self.head_dim, backend)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: KVCache,
        md: AttentionMetadata,
    ) -> torch.Tensor:
        n, heads, kv_heads, head_dim = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x)
        v = qkv[:, self.q_size + self.kv_size :].view(n, kv_heads, head_dim)
        if self.q_norm is None:  # rotate q and k in one pass: [n, heads + kv_heads, head_dim]
            qk = qkv[:, : self.q_size + self.kv_size].view(n, heads + kv_heads, head_dim)
            q, k = apply_rotary(qk, cos, sin).split([heads, kv_heads], dim=1)
        else:
            q = self.q_norm(qkv[:, : self.q_size].view(n, heads, head_dim))
            k = self.k_norm(
                qkv[:, self.q_size : self.q_size + self.kv_size].view(n, kv_heads, head_dim)
            )
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.o_proj(self.attn(q, k, v, kv_cache, md))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate).mul_(up))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, backend)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_cache: KVCache,
        md: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            x, residual = self.input_layernorm(x), x
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(x, cos, sin, kv_cache, md)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, backend) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        md: AttentionMetadata,
        kv_caches: list[KVCache],
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb.cos_sin(positions, x.dtype)  # once per step, shared by layers
        residual = None
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, cos, sin, kv_cache, md)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, backend: AttentionBackend) -> None:
        super().__init__()
        self.config = config
        self.attn_backend = backend
        self.model = LlamaModel(config, backend)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attn_metadata: AttentionMetadata,
        kv_caches: list[KVCache],
    ) -> torch.Tensor:
        """Final hidden states [num_tokens, hidden]; writes this step's K/V into kv_caches."""
        return self.model(input_ids, positions, attn_metadata, kv_caches)

    def compute_logits(self, hidden_rows: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> [N, vocab] float32 logits, only for the rows the caller samples."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden_rows, weight).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors in, fusing q/k/v and gate/up; raises on missing or unknown names."""
        skip = ("rotary_emb.inv_freq",)
        if self.lm_head is None:
            skip += ("lm_head.weight",)  # tied: the head is the embedding
        load_stacked_weights(self, weights, skip=skip)
