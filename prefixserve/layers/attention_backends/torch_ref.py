"""TorchRefBackend: paged attention in plain PyTorch, written to be obviously correct.

One sequence at a time: gather the sequence's K/V position by position through its block
table, build the causal mask offset by seq_len - query_len, expand K/V heads for GQA and
run softmax(q k^T * scale) v in float32. Slow by design; it is the yardstick the fast
backends are tested against.
"""

from __future__ import annotations

import torch

from prefixserve.layers.attention_backends.base import AttentionBackend
from prefixserve.layers.attention_metadata import AttentionMetadata


class TorchRefBackend(AttentionBackend):
    name = "torch_ref"

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        md: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        num_heads, num_kv_heads = q.shape[1], key_cache.shape[2]
        block_size = md.block_size
        start = 0
        for i, (q_len, seq_len) in enumerate(
            zip(md.query_lens_list, md.seq_lens_list, strict=True)
        ):
            table = md.block_tables[i]
            pos = torch.arange(seq_len, device=q.device)
            blocks, offsets = table[pos // block_size], pos % block_size
            keys = key_cache[blocks, offsets]  # [seq_len, num_kv_heads, head_dim]
            values = value_cache[blocks, offsets]
            group = num_heads // num_kv_heads
            keys = keys.repeat_interleave(group, dim=1).float()
            values = values.repeat_interleave(group, dim=1).float()
            queries = q[start : start + q_len].float()  # [q_len, num_heads, head_dim]
            scores = torch.einsum("qhd,khd->hqk", queries, keys) * scale
            q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
            allowed = pos[None, :] <= q_pos[:, None]  # [q_len, seq_len]
            scores = scores.masked_fill(~allowed[None], float("-inf"))
            probs = scores.softmax(dim=-1)
            out[start : start + q_len] = torch.einsum("hqk,khd->qhd", probs, values).to(q.dtype)
            start += q_len
        return out
