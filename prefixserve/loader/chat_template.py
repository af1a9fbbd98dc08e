"""ChatTemplate: render a model's Jinja chat template the way `transformers` does.

Same environment as HF's `apply_chat_template`: an immutable sandbox (templates come from
model files and are untrusted), `trim_blocks` + `lstrip_blocks`, the `loopcontrols`
extension, a `{% generation %}` block that renders its body, `raise_exception`,
`strftime_now`, and a `tojson` that does not escape HTML. The special tokens
(`bos_token`, `eos_token`, ...) are passed as variables. Knows nothing about token ids.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks;
    when only rendering, it is its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template plus the special-token variables it may read."""

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[_GenerationBlock, loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self._template = env.from_string(source)

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
        """Render a conversation; extra kwargs (e.g. `enable_thinking`) reach the template."""
        for m in messages:
            if not isinstance(m, dict):
                raise TypeError(f"chat messages must be dicts, got {type(m).__name__}: {m!r}")
        variables = {**self.special_tokens, **kwargs}
        return self._template.render(messages=messages, tools=tools, documents=None,
                                     add_generation_prompt=add_generation_prompt, **variables)
