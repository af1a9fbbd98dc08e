"""SdpaBackend: paged attention through torch's scaled_dot_product_attention.

The step's sequences split three ways, each with as little data movement as possible:

- fresh prefill (query_len == seq_len): the step's own K/V are the whole context, so SDPA
  runs on them directly with is_causal, no gather;
- prefill after cached tokens (1 < query_len < seq_len): gather the sequence's K/V blocks
  (block-table order) and run SDPA with a causal mask offset by seq_len - query_len;
- decode (query_len == 1): all decodes at once, K/V blocks gathered into one padded batch
  [num_decodes, max_blocks * block_size] and one masked SDPA, with the query heads grouped
  per KV head.

K/V are gathered whole blocks at a time (one contiguous block_size * kv_heads * head_dim
row per index), never token by token. The gather indices and masks are built once per step
in `build_plan` (tensor ops on the metadata's device, no host syncs) and shared by every
layer. Works on any device SDPA does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from prefixserve.layers.attention_backends.base import AttentionBackend
from prefixserve.layers.attention_metadata import AttentionMetadata


@dataclass
class _Prefill:
    start: int  # first query row
    end: int
    seq_len: int
    blocks: torch.Tensor | None  # [num_blocks] block ids; None for a fresh prefill
    mask: torch.Tensor | None  # [query_len, seq_len] bool, True = attend


@dataclass
class _Decodes:
    rows: torch.Tensor | None  # [num_decodes] query rows; None when every row is a decode
    blocks: torch.Tensor  # [num_decodes * max_blocks] block ids (padding entries are masked)
    mask: torch.Tensor  # [num_decodes, 1, 1, max_blocks * block_size] additive, 0 or -inf
    pad_rows: torch.Tensor  # gathered token rows past their seq_len (unwritten memory)
    max_blocks: int
    buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # gather targets, reused by layers


@dataclass
class SdpaPlan:
    prefills: list[_Prefill]
    decodes: _Decodes | None


def _gather_blocks(
    cache: torch.Tensor, blocks: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[len(blocks) * block_size, kv_heads, head_dim]: the blocks' tokens, in table order."""
    num_blocks, block_size, kv_heads, head_dim = cache.shape
    rows = torch.index_select(cache.view(num_blocks, -1), 0, blocks, out=out)
    return rows.view(-1, kv_heads, head_dim)


class SdpaBackend(AttentionBackend):
    name = "sdpa"

    def build_plan(self, md: AttentionMetadata) -> SdpaPlan:
        device = md.block_tables.device
        prefills: list[_Prefill] = []
        decode_seqs: list[int] = []
        decode_rows: list[int] = []
        start = 0
        for i, (q_len, seq_len) in enumerate(
            zip(md.query_lens_list, md.seq_lens_list, strict=True)
        ):
            if q_len == 1:
                decode_seqs.append(i)
                decode_rows.append(start)
            elif q_len == seq_len:
                prefills.append(_Prefill(start, start + q_len, seq_len, None, None))
            else:
                blocks = md.block_tables[i, : -(-seq_len // md.block_size)]
                pos = torch.arange(seq_len, device=device)
                q_pos = torch.arange(seq_len - q_len, seq_len, device=device)
                mask = pos[None, :] <= q_pos[:, None]
                prefills.append(_Prefill(start, start + q_len, seq_len, blocks, mask))
            start += q_len
        decodes = None
        if decode_seqs:
            decodes = self._plan_decodes(md, decode_seqs, decode_rows, start)
        return SdpaPlan(prefills, decodes)

    @staticmethod
    def _plan_decodes(
        md: AttentionMetadata, seqs: list[int], rows: list[int], num_tokens: int
    ) -> _Decodes:
        device = md.block_tables.device
        max_blocks = -(-max(md.seq_lens_list[i] for i in seqs) // md.block_size)
        everything = len(seqs) == num_tokens
        if everything:
            tables, seq_lens, row_index = md.block_tables, md.seq_lens, None
        else:
            index = torch.tensor(seqs, dtype=torch.int64, device=device)
            tables, seq_lens = md.block_tables[index], md.seq_lens[index]
            row_index = torch.tensor(rows, dtype=torch.int64, device=device)
        blocks = tables[:, :max_blocks].reshape(-1)
        pos = torch.arange(max_blocks * md.block_size, device=device)
        mask = torch.zeros(len(seqs), 1, 1, len(pos), device=device)
        mask.masked_fill_((pos >= seq_lens[:, None])[:, None, None, :], float("-inf"))
        width = len(pos)
        pad = [j * width + p for j, i in enumerate(seqs) for p in range(md.seq_lens_list[i], width)]
        pad_rows = torch.tensor(pad, dtype=torch.int64, device=device)
        return _Decodes(row_index, blocks, mask, pad_rows, max_blocks)

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
        plan: SdpaPlan = self.plan(md)
        if len(plan.prefills) == 1 and plan.decodes is None and plan.prefills[0].blocks is None:
            return self._fresh_prefill(q, k, v, scale)  # the common long-prompt case, no copy
        out = torch.empty_like(q)
        for p in plan.prefills:
            if p.blocks is None:
                out[p.start : p.end] = self._fresh_prefill(
                    q[p.start : p.end], k[p.start : p.end], v[p.start : p.end], scale
                )
            else:
                keys = _gather_blocks(key_cache, p.blocks)[: p.seq_len]
                values = _gather_blocks(value_cache, p.blocks)[: p.seq_len]
                out[p.start : p.end] = _sdpa(q[p.start : p.end], keys, values, p.mask, False, scale)
        if plan.decodes is not None:
            d = plan.decodes
            rows = q if d.rows is None else q.index_select(0, d.rows)
            result = self._decode(rows, key_cache, value_cache, d, scale)
            if d.rows is None:
                return result
            out.index_copy_(0, d.rows, result)
        return out

    @staticmethod
    def _fresh_prefill(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        return _sdpa(q, k, v, None, True, scale)

    @staticmethod
    def _decode(
        q: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        d: _Decodes,
        scale: float,
    ) -> torch.Tensor:
        n, num_heads, head_dim = q.shape
        num_kv_heads = key_cache.shape[2]
        # [n, max_blocks * block_size, kv_heads, head_dim], viewed as [n, kv_heads, len, head_dim]
        if d.buffers is None or d.buffers[0].dtype != key_cache.dtype:
            shape = (len(d.blocks), key_cache[0].numel())
            d.buffers = (key_cache.new_empty(shape), key_cache.new_empty(shape))
        keys = _gather_blocks(key_cache, d.blocks, d.buffers[0])
        values = _gather_blocks(value_cache, d.blocks, d.buffers[1])
        # Slots past seq_len were never written (the cache may come from torch.empty, NaN and
        # all); zero them so that masked scores are exactly -inf and 0 * value stays 0.
        keys.index_fill_(0, d.pad_rows, 0.0)
        values.index_fill_(0, d.pad_rows, 0.0)
        keys = keys.view(n, -1, num_kv_heads, head_dim)
        values = values.view(n, -1, num_kv_heads, head_dim)
        # Query heads h*G .. h*G+G-1 share KV head h: attend them as G "query positions".
        grouped = q.reshape(n, num_kv_heads, num_heads // num_kv_heads, head_dim)
        if d.mask.dtype != q.dtype:
            d.mask = d.mask.to(q.dtype)  # once per step, then shared by the remaining layers
        out = F.scaled_dot_product_attention(
            grouped, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=d.mask, scale=scale
        )
        return out.reshape(n, num_heads, head_dim)


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
) -> torch.Tensor:
    """One sequence: q [q_len, H, D], k/v [kv_len, H_kv, D] -> [q_len, H, D]."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        is_causal=causal,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )
    return out.squeeze(0).transpose(0, 1)
