"""Model code, built from a ModelConfig by architecture name.

`build_model(config, dtype, device)` returns an nn.Module with `forward(input_ids, positions,
attn_metadata, kv_caches)`, `compute_logits(hidden_rows)` and `load_weights(weights)`.
Llama, Mistral, Qwen2 and Qwen3 share one implementation whose variants are config flags.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from prefixserve.layers.attention_backends import get_attention_backend
from prefixserve.model_config import ModelConfig
from prefixserve.models.llama import LlamaForCausalLM

MODEL_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": LlamaForCausalLM,
    "Qwen2ForCausalLM": LlamaForCausalLM,
    "Qwen3ForCausalLM": LlamaForCausalLM,
}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(
    config: ModelConfig,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    attention_backend: str | None = None,
) -> nn.Module:
    """A randomly initialised model for `config` on `device`; call `load_weights` next."""
    if config.architecture not in MODEL_REGISTRY:
        raise ValueError(
            f"no model code for {config.architecture!r}; supported: {', '.join(MODEL_REGISTRY)}"
        )
    device = torch.device(device)
    backend = get_attention_backend(attention_backend, device)
    with torch.device(device), _default_dtype(dtype):
        model = MODEL_REGISTRY[config.architecture](config, backend)
    return model.eval().requires_grad_(False)


__all__ = ["MODEL_REGISTRY", "build_model"]
