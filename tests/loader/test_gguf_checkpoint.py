"""GGUF -> HF conversion: tiny random llama/qwen2/qwen3 models written as GGUF (llama with
llama.cpp's Q/K permutation) must come back tensor-for-tensor equal and load in transformers."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from prefixserve.loader import load_checkpoint


@pytest.mark.parametrize("arch,tie", [("llama", False), ("llama", True), ("qwen2", True),
                                      ("qwen3", False)])
def test_converted_weights_equal_the_originals(tiny_gguf, arch, tie):
    path, model = tiny_gguf(arch, tie=tie)
    ckpt = load_checkpoint(path)
    ours = dict(ckpt.weights())
    expected = {k: v for k, v in model.state_dict().items() if not (tie and k == "lm_head.weight")}
    assert set(ours) == set(expected)
    for name, tensor in expected.items():
        assert ours[name].dtype == torch.float32
        assert torch.equal(ours[name], tensor), name
    assert ckpt.config.architecture == type(model).__name__
    assert ckpt.config.tie_word_embeddings is tie


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_converted_dir_loads_in_transformers_with_identical_logits(tiny_gguf, arch):
    path, model = tiny_gguf(arch)
    ckpt = load_checkpoint(path)
    loaded = AutoModelForCausalLM.from_pretrained(ckpt.path).eval()
    ids = torch.tensor([[5, 70, 100, 200, 3, 17, 250, 9]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-5)
    cfg, ref = loaded.config, model.config
    ref_head_dim = getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads
    assert (cfg.num_key_value_heads, cfg.head_dim) == (ref.num_key_value_heads, ref_head_dim)
    assert cfg.rope_parameters["rope_theta"] == ref.rope_parameters["rope_theta"]


def test_permuted_weights_differ_without_unpermute(tiny_gguf):
    """Guards the fixture: the GGUF really holds llama.cpp's permuted Q, not HF's."""
    path, model = tiny_gguf("llama")
    reader = gguf.GGUFReader(path)
    stored = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    original = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].numpy()
    assert not np.array_equal(np.asarray(stored.data), original)


def test_quantized_tensors_are_dequantized_like_gguf(tiny_gguf):
    path, model = tiny_gguf("llama", quantize_embeddings=True)
    embed = dict(load_checkpoint(path).weights())["model.embed_tokens.weight"]
    original = model.state_dict()["model.embed_tokens.weight"].numpy()
    q8 = gguf.quants.quantize(original, gguf.GGMLQuantizationType.Q8_0)
    expected = gguf.quants.dequantize(q8, gguf.GGMLQuantizationType.Q8_0)
    assert torch.equal(embed, torch.from_numpy(expected))
    assert not torch.equal(embed, torch.from_numpy(original))


def test_converted_tokenizer_matches_transformers_gguf_tokenizer(tiny_gguf):
    path, _ = tiny_gguf("qwen2")
    ckpt = load_checkpoint(path)
    reference = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in ["the and then", "Hello world 123", " leading", "émoji 😀 你好",
                 "<|im_start|>user\nhi<|im_end|>", "tabs\tand\n\nnewlines  ", ""]:
        assert ckpt.tokenizer.encode(text) == reference(text)["input_ids"], text
        assert ckpt.tokenizer.decode(ckpt.tokenizer.encode(text), False) == text


def test_converted_dir_has_hf_side_files(tiny_gguf):
    path, _ = tiny_gguf("llama")
    ckpt = load_checkpoint(path)
    tok_cfg = json.loads((ckpt.path / "tokenizer_config.json").read_text())
    gen_cfg = json.loads((ckpt.path / "generation_config.json").read_text())
    assert tok_cfg["chat_template"].startswith("{% for m in messages %}")
    assert (tok_cfg["bos_token"], tok_cfg["eos_token"]) == ("<|im_start|>", "<|im_end|>")
    assert gen_cfg["eos_token_id"] == 2
    assert ckpt.tokenizer.eos_token_ids == {2}
    hf_tok = AutoTokenizer.from_pretrained(ckpt.path)
    messages = [{"role": "user", "content": "hi"}]
    assert ckpt.tokenizer.apply_chat_template(messages) == hf_tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


def test_each_gguf_is_converted_once(tiny_gguf, cache):
    path, _ = tiny_gguf("llama")
    first = load_checkpoint(path).path
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    second = load_checkpoint(path).path
    assert first == second and first.parent == cache / "models"
    assert first.name.startswith("gguf-")
    assert (second / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in (cache / "models").iterdir()] == [first.name]  # no temp dirs left
