"""AttentionBackend: the one interface every paged-attention implementation follows.

A backend attends a packed batch of queries over paged K/V that the caller has already
written into the cache (see AttentionMetadata for the layout). Index tensors a backend
derives from the metadata are built once per step by `plan()` and cached on the metadata
object, so the 30-odd layers of a forward share them and never sync with the host (a
metadata object therefore describes one step and must not be mutated after its first use).
Backends know nothing about models, weights or the KV cache manager.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from prefixserve.layers.attention_metadata import AttentionMetadata


class AttentionBackend(ABC):
    name: ClassVar[str]

    def plan(self, md: AttentionMetadata) -> Any:
        """This step's per-backend index tensors, built on first use and cached on `md`."""
        key = f"_plan_{self.name}"
        cached = md.__dict__.get(key)
        if cached is None:
            cached = self.build_plan(md)
            md.__dict__[key] = cached
        return cached

    def build_plan(self, md: AttentionMetadata) -> Any:
        return None

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads, head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], already in the cache
        v: torch.Tensor,
        key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
        value_cache: torch.Tensor,
        md: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Causal paged attention; returns [num_tokens, num_heads, head_dim]."""


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Store this step's K/V rows at their flat slots (block_id * block_size + offset)."""
    num_kv_heads, head_dim = key_cache.shape[-2:]
    key_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    value_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)
