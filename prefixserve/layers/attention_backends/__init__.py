"""Paged-attention backends behind one interface, chosen by name.

`get_attention_backend(None, device)` picks the fastest correct backend for the device;
today that is "sdpa" everywhere, with "torch_ref" as the reference implementation.
"""

from __future__ import annotations

import torch

from prefixserve.layers.attention_backends.base import AttentionBackend, write_kv
from prefixserve.layers.attention_backends.sdpa import SdpaBackend
from prefixserve.layers.attention_backends.torch_ref import TorchRefBackend

ATTENTION_BACKENDS: dict[str, type[AttentionBackend]] = {
    TorchRefBackend.name: TorchRefBackend,
    SdpaBackend.name: SdpaBackend,
}


def default_backend_name(device: torch.device | str | None = None) -> str:
    """The fastest correct backend for `device`."""
    return SdpaBackend.name


def get_attention_backend(
    name: str | None = None, device: torch.device | str | None = None
) -> AttentionBackend:
    name = name or default_backend_name(device)
    if name not in ATTENTION_BACKENDS:
        raise ValueError(
            f"unknown attention backend {name!r}; choose one of {', '.join(ATTENTION_BACKENDS)}"
        )
    return ATTENTION_BACKENDS[name]()


__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionBackend",
    "SdpaBackend",
    "TorchRefBackend",
    "default_backend_name",
    "get_attention_backend",
    "write_kv",
]
