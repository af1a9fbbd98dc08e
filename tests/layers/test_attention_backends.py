"""The fast attention backend against the pure-PyTorch reference on random mixed batches.

Batches mix fresh prefills, prefills after cached tokens (query_len < seq_len) and decodes,
in shuffled order, over scattered (non-contiguous, shuffled) block ids. The reference is
itself checked against dense causal attention on a single contiguous sequence.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from prefixserve.layers.attention_backends import (
    ATTENTION_BACKENDS,
    SdpaBackend,
    TorchRefBackend,
    get_attention_backend,
    write_kv,
)
from prefixserve.layers.attention_metadata import AttentionMetadata

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 6, 2, 16


def random_batch(
    seed: int, block_size: int, device: str = "cpu", num_blocks: int = 256
) -> tuple[torch.Tensor, ...]:
    """(q, k, v, key_cache, value_cache, metadata) for a random mix of sequence kinds."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    free = list(range(num_blocks))
    rng.shuffle(free)
    query_lens, seq_lens, tables = [], [], []
    for _ in range(rng.randint(1, 7)):
        kind = rng.choice(["fresh", "prefix", "decode"])
        seq_len = rng.randint(1, 50)
        query_len = {"fresh": seq_len, "decode": 1, "prefix": rng.randint(1, seq_len)}[kind]
        num = -(-seq_len // block_size)
        tables.append([free.pop() for _ in range(num)])
        query_lens.append(query_len)
        seq_lens.append(seq_len)
    md = AttentionMetadata.build(query_lens, seq_lens, tables, block_size, device=device)
    shape = (num_blocks, block_size, NUM_KV_HEADS, HEAD_DIM)
    key_cache = torch.randn(shape, generator=gen).to(device)  # older tokens: random history
    value_cache = torch.randn(shape, generator=gen).to(device)
    n = sum(query_lens)
    q = torch.randn(n, NUM_HEADS, HEAD_DIM, generator=gen).to(device)
    k = torch.randn(n, NUM_KV_HEADS, HEAD_DIM, generator=gen).to(device)
    v = torch.randn(n, NUM_KV_HEADS, HEAD_DIM, generator=gen).to(device)
    write_kv(k, v, key_cache, value_cache, md.slot_mapping)
    return q, k, v, key_cache, value_cache, md


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("seed", range(12))
def test_sdpa_matches_reference_on_mixed_batches(seed: int, block_size: int) -> None:
    q, k, v, key_cache, value_cache, md = random_batch(seed, block_size)
    scale = HEAD_DIM**-0.5
    want = TorchRefBackend().forward(q, k, v, key_cache, value_cache, md, scale)
    got = SdpaBackend().forward(q, k, v, key_cache, value_cache, md, scale)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_sdpa_ignores_garbage_in_unwritten_slots() -> None:
    """Caches come from torch.empty: slots past seq_len may hold NaN or inf."""
    q, k, v, key_cache, value_cache, md = random_batch(5, 8)
    written = torch.zeros(key_cache.shape[:2], dtype=torch.bool).view(-1)
    for i, seq_len in enumerate(md.seq_lens_list):
        for pos in range(seq_len):
            written[int(md.block_tables[i, pos // 8]) * 8 + pos % 8] = True
    unwritten = ~written.view(key_cache.shape[:2])
    key_cache[unwritten] = float("nan")
    value_cache[unwritten] = float("inf")
    want = TorchRefBackend().forward(q, k, v, key_cache, value_cache, md, 0.25)
    got = SdpaBackend().forward(q, k, v, key_cache, value_cache, md, 0.25)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_reference_matches_dense_causal_attention() -> None:
    seq_len, block_size = 29, 4
    table = [9, 2, 30, 17, 5, 11, 0, 23]
    md = AttentionMetadata.build([seq_len], [seq_len], [table], block_size)
    q = torch.randn(seq_len, NUM_HEADS, HEAD_DIM)
    k = torch.randn(seq_len, NUM_KV_HEADS, HEAD_DIM)
    v = torch.randn(seq_len, NUM_KV_HEADS, HEAD_DIM)
    key_cache = torch.zeros(32, block_size, NUM_KV_HEADS, HEAD_DIM)
    value_cache = torch.zeros_like(key_cache)
    write_kv(k, v, key_cache, value_cache, md.slot_mapping)
    got = TorchRefBackend().forward(q, k, v, key_cache, value_cache, md, HEAD_DIM**-0.5)
    group = NUM_HEADS // NUM_KV_HEADS
    dense = F.scaled_dot_product_attention(
        q.transpose(0, 1),
        k.repeat_interleave(group, 1).transpose(0, 1),
        v.repeat_interleave(group, 1).transpose(0, 1),
        is_causal=True,
    )
    torch.testing.assert_close(got, dense.transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_write_kv_stores_rows_at_their_slots() -> None:
    block_size = 4
    md = AttentionMetadata.build([3], [6], [[5, 1]], block_size)  # positions 3, 4, 5
    key_cache = torch.zeros(8, block_size, 1, 2)
    value_cache = torch.zeros_like(key_cache)
    k = torch.arange(6.0).view(3, 1, 2)
    write_kv(k, -k, key_cache, value_cache, md.slot_mapping)
    torch.testing.assert_close(key_cache[5, 3], k[0])
    torch.testing.assert_close(key_cache[1, 0], k[1])
    torch.testing.assert_close(value_cache[1, 1], -k[2])
    assert int((key_cache != 0).sum()) == 5  # k[0] holds a zero; nothing else was touched


def test_plan_is_built_once_per_step() -> None:
    q, k, v, key_cache, value_cache, md = random_batch(3, 4)
    backend = SdpaBackend()
    first = backend.plan(md)
    backend.forward(q, k, v, key_cache, value_cache, md, 0.25)
    assert backend.plan(md) is first


def test_backends_are_chosen_by_name() -> None:
    assert set(ATTENTION_BACKENDS) == {"torch_ref", "sdpa"}
    assert isinstance(get_attention_backend("torch_ref"), TorchRefBackend)
    assert isinstance(get_attention_backend(None, "cpu"), SdpaBackend)
    with pytest.raises(ValueError, match="unknown attention backend"):
        get_attention_backend("flash9")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("seed", range(4))
def test_sdpa_matches_reference_on_cuda(seed: int) -> None:
    q, k, v, key_cache, value_cache, md = random_batch(seed, 16, device="cuda")
    scale = HEAD_DIM**-0.5
    want = TorchRefBackend().forward(q, k, v, key_cache, value_cache, md, scale)
    got = get_attention_backend(None, "cuda").forward(q, k, v, key_cache, value_cache, md, scale)
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)  # TF32/flash kernels
