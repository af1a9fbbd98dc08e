"""Tokenizer: text <-> token ids and chat rendering for one checkpoint directory.

Wraps a `tokenizers.Tokenizer` (tokenizer.json) with the facts HF keeps beside it in
tokenizer_config.json and generation_config.json: special tokens, whether to add BOS,
the chat template, and every id that ends generation. Encodes and decodes exactly as
`transformers.AutoTokenizer` does for the same directory. Knows nothing about models,
weights or requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from prefixserve.loader.chat_template import ChatTemplate

_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: invalid JSON: {e}") from e


def _token_text(value: Any) -> str | None:
    """tokenizer_config spells a special token as a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _as_ids(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list) else {int(value)}


def _clean_up_spaces(text: str) -> str:
    """HF's `clean_up_tokenization`: drop the space before punctuation and contractions."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


class Tokenizer:
    """Text <-> ids for one model. Build with `Tokenizer.from_dir(path)`."""

    def __init__(self, backend: HFTokenizer, config: dict[str, Any] | None = None,
                 generation_config: dict[str, Any] | None = None,
                 chat_template: str | None = None) -> None:
        self.backend = backend
        self.config = dict(config or {})
        self.special_tokens = {k: t for k in _SPECIAL_NAMES
                               if (t := _token_text(self.config.get(k))) is not None}
        self.bos_token_id = self._id_of("bos_token")
        self.eos_token_id = self._id_of("eos_token")
        self.pad_token_id = self._id_of("pad_token")
        self.unk_token_id = self._id_of("unk_token")
        gen_eos = _as_ids((generation_config or {}).get("eos_token_id"))
        self.eos_token_ids: set[int] = gen_eos | _as_ids(self.eos_token_id)
        self.clean_up_tokenization_spaces = bool(self.config.get("clean_up_tokenization_spaces", False))
        template = chat_template if chat_template is not None else self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t["name"]: t["template"] for t in template}
            template = named.get("default")
        self._chat_template = ChatTemplate(template, self.special_tokens) if template else None
        # tokenizer_config's add_bos/add_eos flags win over what the post-processor adds, as in HF.
        added = backend.encode("", add_special_tokens=True).ids
        post_bos = self.bos_token_id is not None and added[:1] == [self.bos_token_id]
        post_eos = (self.eos_token_id is not None and len(added) > int(post_bos)
                    and added[-1] == self.eos_token_id)
        want_bos, want_eos = self.config.get("add_bos_token"), self.config.get("add_eos_token")
        self._prepend_bos = bool(want_bos) and not post_bos and self.bos_token_id is not None
        self._strip_bos = want_bos is False and post_bos
        self._append_eos = bool(want_eos) and not post_eos and self.eos_token_id is not None
        self._strip_eos = want_eos is False and post_eos

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        file = path / "tokenizer.json"
        if not file.is_file():
            raise ValueError(f"{path}: no tokenizer.json (only fast tokenizers are supported)")
        try:
            backend = HFTokenizer.from_file(str(file))
        except Exception as e:
            raise ValueError(f"{file}: cannot load tokenizer: {e}") from e
        jinja = path / "chat_template.jinja"
        template = jinja.read_text(encoding="utf-8") if jinja.is_file() else None
        return cls(backend, _read_json(path / "tokenizer_config.json"),
                   _read_json(path / "generation_config.json"), template)

    def _id_of(self, name: str) -> int | None:
        text = self.special_tokens.get(name)
        return None if text is None else self.backend.token_to_id(text)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def chat_template(self) -> str | None:
        return self._chat_template.source if self._chat_template else None

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        if not add_special_tokens:
            return ids
        if self._strip_bos:
            ids = ids[1:]
        if self._strip_eos:
            ids = ids[:-1]
        if self._prepend_bos:
            ids = [self.bos_token_id, *ids]
        if self._append_eos:
            ids = [*ids, self.eos_token_id]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text = self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return _clean_up_spaces(text) if self.clean_up_tokenization_spaces else text

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]:
        return [self.backend.id_to_token(i) for i in ids]

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
        """Render `messages` to the prompt string (tokenize it with `encode(..., False)`
        when the template already writes BOS)."""
        if self._chat_template is None:
            raise ValueError("this tokenizer has no chat template (tokenizer_config.json "
                             "has no chat_template and there is no chat_template.jinja)")
        return self._chat_template.render(messages, add_generation_prompt, tools, **kwargs)

    def encode_chat(self, messages: list[dict[str, Any]],
                    add_generation_prompt: bool = True) -> dict[str, Any]:
        """The engine prompt for a conversation: the rendered text and its token ids (the
        template writes any BOS itself, so no special tokens are added)."""
        text = self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
        return {"prompt": text, "prompt_token_ids": self.encode(text, add_special_tokens=False)}
