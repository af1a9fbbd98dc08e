"""AttentionMetadata: where each token of a packed batch reads and writes paged K/V.

A step's batch packs the query tokens of every scheduled sequence back to back. Sequence i
owns query rows [query_start_loc[i], query_start_loc[i+1]); those queries are the LAST
query_len_i positions of its seq_len_i tokens of K/V, so a query at row r sits at position
seq_len_i - query_len_i + (r - query_start_loc[i]) and attends causally to K/V positions
[0, that position]. Decode is query_len 1; a prefill after cached tokens (prefix hit or
chunked prefill) has query_len < seq_len; a fresh prefill has query_len == seq_len.

    seq i K/V:   [ cached / earlier chunks ........ | this step's queries ]
                 0                  seq_len - query_len              seq_len

KV memory per layer: key/value tensors of shape [num_blocks, block_size, num_kv_heads,
head_dim]. Token position p of sequence i lives in block block_tables[i][p // block_size]
at offset p % block_size; its flat slot is block_id * block_size + offset, and
slot_mapping[r] is the slot where row r's new K/V is written before attention reads.
This module knows nothing about the scheduler or the KV cache manager.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64: flat slot for each query row's new K/V
    query_start_loc: torch.Tensor  # [num_seqs + 1] int64 (cumulative query lengths)
    seq_lens: torch.Tensor  # [num_seqs] int64: K/V length of each sequence after this step
    block_tables: torch.Tensor  # [num_seqs, max_num_blocks] int64, padded with 0
    query_lens_list: list[int]  # host copies, so backends can loop without device syncs
    seq_lens_list: list[int]
    block_size: int

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_list)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_list) if self.query_lens_list else 0

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_list) if self.seq_lens_list else 0

    @property
    def is_pure_decode(self) -> bool:
        return all(q == 1 for q in self.query_lens_list)

    @classmethod
    def build(
        cls,
        query_lens: list[int],
        seq_lens: list[int],
        block_tables: list[list[int]],
        block_size: int,
        device: torch.device | str = "cpu",
    ) -> AttentionMetadata:
        """Build metadata from host lists (one entry per sequence)."""
        slots: list[int] = []
        for q, s, table in zip(query_lens, seq_lens, block_tables, strict=True):
            for pos in range(s - q, s):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
        starts = [0]
        for q in query_lens:
            starts.append(starts[-1] + q)
        width = max((len(t) for t in block_tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            query_start_loc=torch.tensor(starts, dtype=torch.int64, device=device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int64, device=device),
            block_tables=torch.tensor(padded, dtype=torch.int64, device=device).reshape(len(padded), width),
            query_lens_list=list(query_lens),
            seq_lens_list=list(seq_lens),
            block_size=block_size,
        )

    def positions(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """[num_tokens] int64 position of each query row."""
        pos: list[int] = []
        for q, s in zip(self.query_lens_list, self.seq_lens_list, strict=True):
            pos.extend(range(s - q, s))
        return torch.tensor(pos, dtype=torch.int64, device=device)
