"""Rebuild a HF `tokenizer.json` + `tokenizer_config.json` from a GGUF file's `tokenizer.*` metadata.

A GGUF carries no tokenizer.json: llama.cpp stores the vocabulary, merges, token types and
special ids as metadata and picks the pre-tokenizer split by the `tokenizer.ggml.pre` name.
This module turns that back into a `tokenizers.Tokenizer` that splits text the way llama.cpp
(and the model's original HF tokenizer) does. Two vocabulary models are supported:

- `gpt2`:  byte-level BPE with merges (SmolLM2, Qwen2/3, Llama 3).
- `llama`: SentencePiece-style BPE with byte fallback; merges from the file, or recovered
           from the token scores when the file has none (Llama 2, Mistral, TinyLlama).

It knows nothing about weights, config.json or where files are written.
"""

from __future__ import annotations

import logging
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

logger = logging.getLogger(__name__)

# llama.cpp token types (llama_token_type)
_CONTROL, _USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# `tokenizer.ggml.pre` -> (split regex or None for GPT-2's own, split digits one by one, ignore_merges)
_PRE_TOKENIZERS: dict[str, tuple[str | None, bool, bool]] = {
    "default": (None, False, False),
    "gpt2": (None, False, False),
    "gpt-2": (None, False, False),
    "smollm": (None, True, False),
    "starcoder": (None, True, False),
    "refact": (None, True, False),
    "command-r": (None, True, False),
    "codeshell": (None, True, False),
    "llama3": (_LLAMA3_SPLIT, False, True),
    "llama-v3": (_LLAMA3_SPLIT, False, True),
    "llama-bpe": (_LLAMA3_SPLIT, False, True),
    "smaug-bpe": (_LLAMA3_SPLIT, False, False),
    "falcon3": (_LLAMA3_SPLIT, False, False),
    "qwen2": (_QWEN2_SPLIT, False, False),
    "deepseek-r1-qwen": (_QWEN2_SPLIT, False, False),
}


def build_tokenizer(meta: dict[str, Any], source: str) -> tuple[HFTokenizer, dict[str, Any]]:
    """Build `(tokenizer, tokenizer_config)` from GGUF metadata; `source` names the file in errors."""
    kind = meta.get("tokenizer.ggml.model")
    tokens: list[str] | None = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ValueError(f"{source}: GGUF has no tokenizer.ggml.tokens; cannot build a tokenizer")
    if kind == "gpt2":
        tok = _byte_level_bpe(meta, tokens)
    elif kind == "llama":
        tok = _sentencepiece_bpe(meta, tokens)
    else:
        raise ValueError(
            f"{source}: unsupported GGUF tokenizer model {kind!r} (tokenizer.ggml.model); "
            "supported: 'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE)")
    _add_special_tokens(tok, meta, tokens)
    config = _tokenizer_config(meta, tokens, kind)
    if config.get("add_bos_token") and config.get("bos_token") is not None:
        _prepend_bos(tok, config["bos_token"], int(meta["tokenizer.ggml.bos_token_id"]), kind)
    return tok, config


def _byte_level_bpe(meta: dict[str, Any], tokens: list[str]) -> HFTokenizer:
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    spell = _bytes_to_unicode()
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab: dict[str, int] = {}
    for i, (t, ty) in enumerate(zip(tokens, types, strict=False)):
        # Added tokens keep their raw text; a plain token outside the byte alphabet is respelled.
        if ty not in (_CONTROL, _USER_DEFINED) and not set(t) <= alphabet:
            t = "".join(spell[b] for b in t.encode("utf-8"))
        vocab.setdefault(t, i)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS:
        logger.warning("unknown GGUF pre-tokenizer %r; splitting text with GPT-2's regex", pre)
    split, digits, ignore_merges = _PRE_TOKENIZERS.get(pre, (None, False, False))
    tok = HFTokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False,
                                 ignore_merges=ignore_merges))
    steps: list[pre_tokenizers.PreTokenizer] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if split is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps.append(pre_tokenizers.Split(Regex(split), behavior="isolated"))
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    if pre in ("qwen2", "deepseek-r1-qwen"):
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _sentencepiece_bpe(meta: dict[str, Any], tokens: list[str]) -> HFTokenizer:
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    if meta.get("tokenizer.ggml.merges"):
        merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    else:
        scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        merges = _merges_from_scores(vocab, dict(zip(tokens, scores, strict=False)))
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if unk_id is not None else None
    tok = HFTokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first" if prefix else "never", split=False)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _merges_from_scores(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """SentencePiece files list no merges: every split of a token into two vocabulary pieces is a
    merge, ranked by the merged token's score (higher first), ties by piece lengths and ids."""
    ranked: list[tuple[float, int, int, int, int, str, str]] = []
    for piece, score in scores.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((-score, len(left), len(right), vocab[left], vocab[right], left, right))
    ranked.sort()
    return [(r[5], r[6]) for r in ranked]


def _add_special_tokens(tok: HFTokenizer, meta: dict[str, Any], tokens: list[str]) -> None:
    types = meta.get("tokenizer.ggml.token_type") or []
    special = [AddedToken(t, special=True, normalized=False)
               for t, ty in zip(tokens, types, strict=False) if ty == _CONTROL]
    # Always keep the named special tokens whole, even where the file forgot to mark them.
    for key in ("bos", "eos", "unknown", "padding", "eot", "eom"):
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        if i is not None and 0 <= i < len(tokens) and all(a.content != tokens[i] for a in special):
            special.append(AddedToken(tokens[i], special=True, normalized=False))
    user = [AddedToken(t, special=False, normalized=False)
            for t, ty in zip(tokens, types, strict=False) if ty == _USER_DEFINED]
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


def _prepend_bos(tok: HFTokenizer, bos: str, bos_id: int, kind: str) -> None:
    template = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)])
    if kind == "gpt2":
        tok.post_processor = processors.Sequence(
            [processors.ByteLevel(trim_offsets=False), template])
    else:
        tok.post_processor = template


def _tokenizer_config(meta: dict[str, Any], tokens: list[str], kind: str) -> dict[str, Any]:
    def token(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[i] if i is not None and 0 <= i < len(tokens) else None

    # llama.cpp adds BOS to a SentencePiece vocabulary unless the file says otherwise.
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", kind == "llama"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta.get(f"{meta.get('general.architecture')}.context_length", 2048)),
    }
    if meta.get("tokenizer.chat_template"):
        config["chat_template"] = meta["tokenizer.chat_template"]
    return {k: v for k, v in config.items() if v is not None}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table
