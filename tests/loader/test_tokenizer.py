"""Tokenizer, ChatTemplate and IncrementalDetokenizer on tiny GGUF vocabularies (byte-level BPE
and SentencePiece), checked against transformers on the same files."""

from __future__ import annotations

import jinja2
import pytest
from transformers import AutoTokenizer

from prefixserve.loader import IncrementalDetokenizer, Tokenizer, load_checkpoint

TEXTS = ["the world and", " the", "  two  spaces", "héllo\nworld 😀", "", "<s>the</s>", "wor ld",
         "tab\there", "你好"]


@pytest.fixture
def spm(tiny_gguf):
    """A SentencePiece-vocabulary GGUF: (our tokenizer, transformers' GGUF tokenizer)."""
    path, _ = tiny_gguf("llama", tokenizer_model="llama")
    ours = load_checkpoint(path).tokenizer
    return ours, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture
def byte_level(tiny_gguf) -> Tokenizer:
    path, _ = tiny_gguf("qwen2")
    return load_checkpoint(path).tokenizer


def test_sentencepiece_gguf_encodes_like_transformers(spm):
    ours, ref = spm
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref(text)["input_ids"], repr(text)
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), repr(text)


def test_sentencepiece_adds_bos_unless_asked_not_to(spm):
    ours, _ = spm
    assert ours.encode("the")[0] == ours.bos_token_id == 1
    assert ours.encode("the", add_special_tokens=False)[0] != 1


def test_byte_level_gguf_adds_no_bos(byte_level):
    assert byte_level.encode(" the") == byte_level.encode(" the", add_special_tokens=False)


def test_decode_skips_special_tokens_only_when_asked(byte_level):
    ids = byte_level.encode("<|im_start|>hi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert byte_level.decode(ids) == "hi"
    assert byte_level.decode(ids, skip_special_tokens=False) == "<|im_start|>hi<|im_end|>"


@pytest.mark.parametrize("fixture", ["spm", "byte_level"])
def test_incremental_detokenizer_concatenation_equals_decode(request, fixture):
    tok = request.getfixturevalue(fixture)
    tok = tok[0] if isinstance(tok, tuple) else tok
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        detok = IncrementalDetokenizer(tok)
        pieces = [detok.push(i) for i in ids]
        assert all("\ufffd" not in p for p in pieces), (text, pieces)
        assert "".join(pieces) + detok.flush() == tok.decode(ids), repr(text)


def test_incremental_detokenizer_holds_back_a_split_character(byte_level):
    ids = byte_level.encode("😀", add_special_tokens=False)
    assert len(ids) == 4  # one token per UTF-8 byte in this tiny vocabulary
    detok = IncrementalDetokenizer(byte_level)
    assert [detok.push(i) for i in ids] == ["", "", "", "😀"]


def test_incremental_detokenizer_flush_returns_an_unfinished_character(byte_level):
    ids = byte_level.encode("a😀", add_special_tokens=False)[:-1]
    detok = IncrementalDetokenizer(byte_level)
    assert "".join(detok.push(i) for i in ids) == "a"
    assert detok.flush() == byte_level.decode(ids)[1:] == "\ufffd"


def _tokenizer_with_template(tok: Tokenizer, template: str) -> Tokenizer:
    return Tokenizer(tok.backend, {**tok.config, "chat_template": template})


def test_chat_template_raise_exception_is_a_template_error(byte_level):
    tok = _tokenizer_with_template(
        byte_level, "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}")
    with pytest.raises(jinja2.TemplateError, match="user first"):
        tok.apply_chat_template([{"role": "assistant", "content": "x"}])


def test_chat_template_sees_special_tokens_and_strftime(byte_level):
    tok = _tokenizer_with_template(
        byte_level, "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ eos_token }}")
    assert tok.apply_chat_template([]) == "<|im_start|>4<|im_end|>"


def test_chat_template_is_sandboxed(byte_level):
    tok = _tokenizer_with_template(byte_level, "{{ messages.__class__.__mro__ }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        tok.apply_chat_template([])


def test_chat_template_whitespace_control_matches_transformers(tiny_gguf):
    path, _ = tiny_gguf("qwen2")
    ckpt = load_checkpoint(path)
    template = (
        "{% for m in messages %}\n"
        "    {% if m['role'] == 'system' %}\n"
        "<<SYS>>{{ m['content'] | trim }}<</SYS>>\n"
        "    {% else %}\n"
        "[{{ m['role'] }}] {{ m['content'] | tojson }}\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "{% generation %}{% if add_generation_prompt %}[assistant]{% endif %}{% endgeneration %}")
    ours = _tokenizer_with_template(ckpt.tokenizer, template)
    ref = AutoTokenizer.from_pretrained(ckpt.path)
    messages = [{"role": "system", "content": "  be <b>brief</b> "},
                {"role": "user", "content": "héllo \"q\" 😀"}]
    for gen in (True, False):
        expected = ref.apply_chat_template(messages, chat_template=template, tokenize=False,
                                           add_generation_prompt=gen)
        assert ours.apply_chat_template(messages, add_generation_prompt=gen) == expected


def test_no_chat_template_is_a_value_error(byte_level):
    tok = Tokenizer(byte_level.backend, {k: v for k, v in byte_level.config.items()
                                         if k != "chat_template"})
    assert tok.chat_template is None
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])
