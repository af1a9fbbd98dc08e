"""prefixserve: an LLM serving engine that never computes the same prefix twice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefixserve.sampling_params import SamplingParams

if TYPE_CHECKING:
    from prefixserve.entrypoints.llm import LLM

__all__ = ["LLM", "SamplingParams"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # LLM pulls in torch; import it only when asked for, so `prefixserve.router` stays light.
    if name == "LLM":
        from prefixserve.entrypoints.llm import LLM

        return LLM
    raise AttributeError(name)
