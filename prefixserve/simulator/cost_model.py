"""CostModel: how long one batched engine step takes, in milliseconds, without a model.

A worker runs continuous batching; one step prefills the requests admitted at its start and
decodes one token for every request already running:

    step_ms = step_overhead_ms + prefill_ms_per_token * uncached prompt tokens admitted
                               + decode_ms_per_token * running requests decoding

Cached prompt tokens cost nothing (their K/V is reused). The defaults are the figures
`prefixserve simulate --calibrate` measured for the default model (SmolLM2-135M-Instruct,
float32, CPU) on the development machine; pass your own with the CLI flags. This module
knows nothing about caches, policies or time beyond one step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Measured by `prefixserve simulate --calibrate` (see calibration.py) on the development
# machine (2 CPU cores, otherwise idle), SmolLM2-135M-Instruct in float32, prefix caching off.
DEFAULT_PREFILL_MS_PER_TOKEN = 1.415
DEFAULT_DECODE_MS_PER_TOKEN = 8.173
DEFAULT_STEP_OVERHEAD_MS = 45.03


@dataclass(frozen=True)
class CostModel:
    prefill_ms_per_token: float = DEFAULT_PREFILL_MS_PER_TOKEN
    decode_ms_per_token: float = DEFAULT_DECODE_MS_PER_TOKEN
    step_overhead_ms: float = DEFAULT_STEP_OVERHEAD_MS

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        if self.step_ms(0, 1) <= 0:
            raise ValueError("a decode step must take some time: set --step-overhead-ms or "
                             "--decode-ms-per-token above 0")

    def step_ms(self, prefill_tokens: int, decode_requests: int) -> float:
        return (self.step_overhead_ms + self.prefill_ms_per_token * prefill_tokens
                + self.decode_ms_per_token * decode_requests)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
