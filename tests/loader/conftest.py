"""Fixtures for loader tests: tiny random HF models written out as GGUF files the way
llama.cpp's converter writes them (names, metadata, Q/K permutation for llama)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from prefixserve.loader.gguf_tokenizer import _bytes_to_unicode

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġa n", "Ġan d", "o u", "Ġ w"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_level_vocab() -> tuple[list[str], list[int], list[str]]:
    """A small byte-level BPE vocabulary: specials, the 256 byte symbols, then merged tokens."""
    byte_tokens = [_bytes_to_unicode()[b] for b in range(256)]
    merged = [m.replace(" ", "") for m in MERGES]
    tokens = SPECIALS + byte_tokens + merged
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, MERGES


SPM_PIECES = ["\u2581", "t", "h", "e", "a", "n", "d", "w", "o", "r", "l", "\u2581t", "he",
              "\u2581the", "an", "\u2581a", "\u2581an", "\u2581and", "\u2581w", "or", "ld", "\u2581wor",
              "\u2581world", "\u2581\u2581"]


def sentencepiece_vocab() -> tuple[list[str], list[int], list[float]]:
    """A small SentencePiece-style vocabulary: unk/bos/eos, 256 byte-fallback tokens, pieces
    scored best-first (the file has no merges; they are implied by the scores)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    scores = [0.0] * 259 + [-float(i) for i in range(len(SPM_PIECES))]
    return tokens, types, scores


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's Q/K permutation (HF halves -> interleaved pairs)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in _GGUF_NAMES:
        return _GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{_LAYER_NAMES[module]}.{kind}"


def tiny_hf_model(arch: str, vocab_size: int, tie: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=10000.0))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1000000.0))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=32, rope_theta=1000000.0))
    with torch.no_grad():  # norms init to 1; make them random so a mix-up would show
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(1.0 if "norm" in name else 0.0, 0.1)
    return model.eval()


def write_gguf(path: Path, arch: str, model: torch.nn.Module, quantize_embeddings: bool = False,
               tokenizer_model: str = "gpt2") -> None:
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    if arch == "qwen3":
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_tokenizer_model(tokenizer_model)
    if tokenizer_model == "llama":
        tokens, types, scores = sentencepiece_vocab()
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_scores(scores)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
    else:
        tokens, types, merges = byte_level_vocab()
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_add_bos_token(False)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = tensor.numpy().astype(np.float32)
        if arch == "llama" and ".q_proj." in name:
            data = llama_permute(data, cfg.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            data = llama_permute(data, cfg.num_key_value_heads)
        if quantize_embeddings and name == "model.embed_tokens.weight":
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gguf_name(name), q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name(name), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty prefixserve cache dir."""
    d = tmp_path / "cache"
    monkeypatch.setenv("PREFIXSERVE_CACHE", str(d))
    return d


@pytest.fixture
def tiny_gguf(tmp_path: Path, cache: Path) -> Callable[..., tuple[Path, torch.nn.Module]]:
    """Factory: `tiny_gguf(arch, tie=..., quantize_embeddings=...)` -> (gguf path, HF model)."""
    def make(arch: str, tie: bool = False, quantize_embeddings: bool = False,
             tokenizer_model: str = "gpt2") -> tuple[Path, torch.nn.Module]:
        vocab = sentencepiece_vocab() if tokenizer_model == "llama" else byte_level_vocab()
        model = tiny_hf_model(arch, len(vocab[0]), tie)
        path = tmp_path / f"tiny-{arch}.gguf"
        write_gguf(path, arch, model, quantize_embeddings, tokenizer_model)
        return path, model
    return make
