"""Our models against transformers on the same tiny random weights: logits must agree.

Every scenario runs through the paged KV cache with scattered, shuffled block ids: a full
prefill, decode steps after it, a prefill that starts after cached tokens, and several
sequences of all three kinds mixed in one forward.
"""

from __future__ import annotations

import random

import pytest
import torch
import transformers

from prefixserve.layers.attention_metadata import AttentionMetadata
from prefixserve.model_config import ModelConfig
from prefixserve.models import build_model

TOL = 1e-4
BLOCK_SIZE = 4
SMALL = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=112,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
VARIANTS = {
    "llama": (transformers.LlamaConfig, "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "llama_tied": (transformers.LlamaConfig, "LlamaForCausalLM", dict(tie_word_embeddings=True)),
    "llama3_rope": (
        transformers.LlamaConfig,
        "LlamaForCausalLM",
        dict(tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE),
    ),
    "mistral": (transformers.MistralConfig, "MistralForCausalLM", dict(tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, "Qwen2ForCausalLM", dict(tie_word_embeddings=True)),
    "qwen3": (transformers.Qwen3Config, "Qwen3ForCausalLM", dict(tie_word_embeddings=False)),
}


def make_pair(variant: str, backend: str = "sdpa") -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers model, our model) with identical random weights."""
    config_cls, arch, extra = VARIANTS[variant]
    hf_config = config_cls(**SMALL, **extra, architectures=[arch], attn_implementation="eager")
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    with torch.no_grad():  # non-trivial norms and biases so every weight matters
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    config = ModelConfig.from_hf_config(hf_config.to_dict())
    ours = build_model(config, torch.float32, torch.device("cpu"), attention_backend=backend)
    ours.load_weights(hf.state_dict().items())
    return hf, ours


def hf_logits(hf: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0].float()


class PagedRunner:
    """Drives our model like the engine does: paged K/V in shuffled blocks, one step at a time."""

    def __init__(self, model: torch.nn.Module, num_blocks: int = 96, seed: int = 0) -> None:
        cfg = model.config
        shape = (num_blocks, BLOCK_SIZE, cfg.num_key_value_heads, cfg.head_dim)
        self.model = model
        self.kv_caches = [
            (torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.num_hidden_layers)
        ]
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)
        self.tables: dict[str, list[int]] = {}
        self.computed: dict[str, int] = {}

    def step(self, batch: list[tuple[str, list[int]]]) -> list[torch.Tensor]:
        """Run each sequence's next tokens in one forward; logits for every query row, per sequence."""
        query_lens, seq_lens, tables, input_ids = [], [], [], []
        for seq, tokens in batch:
            start = self.computed.get(seq, 0)
            table = self.tables.setdefault(seq, [])
            while len(table) * BLOCK_SIZE < start + len(tokens):
                table.append(self.free.pop())
            query_lens.append(len(tokens))
            seq_lens.append(start + len(tokens))
            tables.append(table)
            input_ids.extend(tokens)
            self.computed[seq] = start + len(tokens)
        md = AttentionMetadata.build(query_lens, seq_lens, tables, BLOCK_SIZE)
        with torch.inference_mode():
            hidden = self.model(torch.tensor(input_ids), md.positions(), md, self.kv_caches)
            logits = self.model.compute_logits(hidden)
        assert logits.dtype == torch.float32
        return list(logits.split(query_lens))


def random_tokens(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, SMALL["vocab_size"], (n,), generator=g).tolist()


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, torch.nn.Module]:
    return make_pair(request.param)


def test_full_prefill_matches_transformers(pair) -> None:
    hf, ours = pair
    tokens = random_tokens(37, seed=1)
    (logits,) = PagedRunner(ours).step([("a", tokens)])
    torch.testing.assert_close(logits, hf_logits(hf, tokens), atol=TOL, rtol=0)


def test_decode_steps_after_prefill_match_transformers(pair) -> None:
    hf, ours = pair
    tokens = random_tokens(30, seed=2)
    expected = hf_logits(hf, tokens)
    runner = PagedRunner(ours)
    (prefill,) = runner.step([("a", tokens[:25])])
    torch.testing.assert_close(prefill[-1], expected[24], atol=TOL, rtol=0)
    for pos in range(25, 30):
        (logits,) = runner.step([("a", [tokens[pos]])])
        torch.testing.assert_close(logits[0], expected[pos], atol=TOL, rtol=0)


@pytest.mark.parametrize("cached", [8, 13])  # block-aligned and mid-block
def test_prefill_after_cached_tokens_matches_transformers(pair, cached: int) -> None:
    hf, ours = pair
    tokens = random_tokens(41, seed=3)
    runner = PagedRunner(ours)
    runner.step([("a", tokens[:cached])])
    (logits,) = runner.step([("a", tokens[cached:])])  # query_len < seq_len
    torch.testing.assert_close(logits, hf_logits(hf, tokens)[cached:], atol=TOL, rtol=0)


def test_mixed_batch_matches_transformers(pair) -> None:
    hf, ours = pair
    seqs = {
        name: random_tokens(n, seed=10 + i)
        for i, (name, n) in enumerate(
            [("fresh", 23), ("prefix", 34), ("decode1", 19), ("decode2", 9), ("fresh1", 1)]
        )
    }
    runner = PagedRunner(ours, seed=7)
    runner.step([("prefix", seqs["prefix"][:16]), ("decode1", seqs["decode1"][:-1])])
    runner.step([("decode2", seqs["decode2"][:-1])])
    batch = [
        ("decode1", seqs["decode1"][-1:]),
        ("fresh", seqs["fresh"]),
        ("decode2", seqs["decode2"][-1:]),
        ("prefix", seqs["prefix"][16:]),
        ("fresh1", seqs["fresh1"]),
    ]
    results = runner.step(batch)
    for (name, _), logits in zip(batch, results, strict=True):
        want = hf_logits(hf, seqs[name])[-logits.shape[0] :]
        torch.testing.assert_close(logits, want, atol=TOL, rtol=0, msg=name)


def test_reference_backend_matches_transformers() -> None:
    hf, ours = make_pair("qwen3", backend="torch_ref")
    tokens = random_tokens(21, seed=4)
    runner = PagedRunner(ours)
    runner.step([("a", tokens[:9])])
    (logits,) = runner.step([("a", tokens[9:])])
    torch.testing.assert_close(logits, hf_logits(hf, tokens)[9:], atol=TOL, rtol=0)


def test_load_weights_rejects_incomplete_checkpoint() -> None:
    hf, ours = make_pair("llama")
    partial = [(n, t) for n, t in hf.state_dict().items() if "layers.1.mlp.up_proj" not in n]
    with pytest.raises(ValueError, match="gate_up_proj"):
        ours.load_weights(partial)


def test_load_weights_rejects_unknown_tensor() -> None:
    hf, ours = make_pair("llama")
    weights = list(hf.state_dict().items()) + [("model.layers.0.mystery.weight", torch.zeros(2))]
    with pytest.raises(ValueError, match="mystery"):
        ours.load_weights(weights)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_model_runs_on_cuda_and_matches_transformers() -> None:
    hf, ours = make_pair("qwen3")
    cuda = torch.device("cuda")
    config = ours.config
    model = build_model(config, torch.float32, cuda)
    model.load_weights(hf.state_dict().items())
    tokens = random_tokens(33, seed=5)
    shape = (16, BLOCK_SIZE, config.num_key_value_heads, config.head_dim)
    kv = [(torch.zeros(shape, device=cuda), torch.zeros(shape, device=cuda)) for _ in range(2)]
    table = [11, 3, 7, 0, 14, 5, 9, 1, 12]
    md = AttentionMetadata.build([20], [20], [table], BLOCK_SIZE, device=cuda)
    with torch.inference_mode():
        model(torch.tensor(tokens[:20], device=cuda), md.positions(cuda), md, kv)
        md = AttentionMetadata.build([13], [33], [table], BLOCK_SIZE, device=cuda)
        hidden = model(torch.tensor(tokens[20:], device=cuda), md.positions(cuda), md, kv)
        logits = model.compute_logits(hidden).cpu()
    torch.testing.assert_close(logits, hf_logits(hf, tokens)[20:], atol=2e-3, rtol=2e-3)
