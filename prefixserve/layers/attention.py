"""Attention: the paged-attention step of one layer, after projections and RoPE.

Writes the step's new K/V into the layer's cache at `slot_mapping`, then lets the backend
attend every query over its sequence's paged K/V. Knows nothing about projections,
positions or how blocks were allocated.
"""

from __future__ import annotations

import torch
from torch import nn

from prefixserve.layers.attention_backends import AttentionBackend, write_kv
from prefixserve.layers.attention_metadata import AttentionMetadata


class Attention(nn.Module):
    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, backend: AttentionBackend
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.backend = backend

    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
        v: torch.Tensor,
        kv_cache: tuple[torch.Tensor, torch.Tensor],
        md: AttentionMetadata,
    ) -> torch.Tensor:
        key_cache, value_cache = kv_cache
        write_kv(k, v, key_cache, value_cache, md.slot_mapping)
        out = self.backend.forward(q, k, v, key_cache, value_cache, md, self.scale)
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)
