"""Turns a request into the token ids a worker would compute, without torch or transformers.

Loads `tokenizer.json` with the `tokenizers` library (a file, or a model directory holding
one). Chat requests are rendered with the chat template from `tokenizer_config.json` in the
same directory (jinja2, as Hugging Face does) and encoded without extra special tokens;
completions are encoded with the tokenizer's own special tokens, as the engine does. The
router needs this only for the `kv_events` policy with text prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from tokenizers import Tokenizer

from prefixserve.router.request_info import RequestInfo


class PromptTokenizer:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        tok_file = path / "tokenizer.json" if path.is_dir() else path
        if not tok_file.is_file():
            raise FileNotFoundError(f"--tokenizer: no tokenizer.json at {path}")
        self.tokenizer = Tokenizer.from_file(str(tok_file))
        self.special: dict[str, str] = {}
        self._template: jinja2.Template | None = None
        config_file = tok_file.parent / "tokenizer_config.json"
        if config_file.is_file():
            config = json.loads(config_file.read_text())
            for name in ("bos_token", "eos_token"):
                value = config.get(name)
                if isinstance(value, dict):
                    value = value.get("content")
                if value:
                    self.special[name] = value
            if isinstance(config.get("chat_template"), str):
                env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
                env.globals["raise_exception"] = _raise
                self._template = env.from_string(config["chat_template"])

    def encode(self, request_info: RequestInfo) -> list[int]:
        if request_info.token_ids is not None:
            return request_info.token_ids
        if request_info.messages is not None and self._template is not None:
            text = self._template.render(messages=request_info.messages,
                                         add_generation_prompt=True, **self.special)
            return self.tokenizer.encode(text, add_special_tokens=False).ids
        text = request_info.text
        if request_info.cache_salt:  # the salt marker is routing-only, not prompt text
            text = text.split("\x00", 2)[-1]
        return self.tokenizer.encode(text).ids


def _raise(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(str(message))
