"""Sampler: turn a batch of last-position logits into next tokens, one row per sequence.

Greedy rows (temperature 0) take the argmax. Other rows apply temperature, then top-k,
top-p and min-p filtering, then draw from the distribution: rows with a seed draw with
their own torch.Generator (so a seeded request gives the same tokens whatever it is
batched with), the rest share one engine generator. Knows nothing about requests or
tokenizers: the engine hands it logits and one SamplingParams per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prefixserve.sampling_params import SamplingParams


@dataclass
class SampleResult:
    token_ids: list[int]
    # per row: (logprob of the chosen token, top-k (token, logprob) pairs) when asked for
    logprobs: list[tuple[float, list[tuple[int, float]]] | None]


class Sampler:
    def __init__(self, seed: int = 0, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> SampleResult:
        """logits: [N, vocab] float32; params/generators: one per row."""
        logits = logits.float()
        tokens = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        greedy = [i for i, p in enumerate(params) if p.greedy]
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if greedy:
            idx = torch.tensor(greedy, device=logits.device)
            tokens[idx] = logits[idx].argmax(dim=-1)
        if sampled:
            idx = torch.tensor(sampled, device=logits.device)
            probs = _filtered_probs(logits[idx], [params[i] for i in sampled])
            tokens[idx] = self._draw(probs, [generators[i] for i in sampled])
        token_list = tokens.tolist()
        return SampleResult(token_list, _logprobs(logits, token_list, params))

    def _draw(self, probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
        # Exponential race: argmax(p / E) with E ~ Exp(1) samples from p, and lets each seeded
        # row draw its noise from its own generator.
        noise = torch.empty_like(probs)
        shared = [i for i, g in enumerate(generators) if g is None]
        if shared:
            noise[shared] = torch.empty(len(shared), probs.shape[1], device=probs.device).exponential_(
                generator=self.generator)
        for i, g in enumerate(generators):
            if g is not None:
                noise[i] = torch.empty(probs.shape[1], device=probs.device).exponential_(generator=g)
        return (probs / noise).argmax(dim=-1)


def _filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """[n, vocab] probabilities after temperature, top-k, top-p and min-p."""
    temps = torch.tensor([p.temperature for p in params], device=logits.device).unsqueeze(1)
    logits = logits / temps
    top_k = [p.top_k for p in params]
    if any(k > 0 for k in top_k):
        vocab = logits.shape[1]
        ks = torch.tensor([k if k > 0 else vocab for k in top_k], device=logits.device)
        kth = logits.sort(dim=-1, descending=True).values.gather(1, (ks.clamp(max=vocab) - 1).unsqueeze(1))
        logits = logits.masked_fill(logits < kth, float("-inf"))
    top_p = [p.top_p for p in params]
    if any(p < 1.0 for p in top_p):
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly before each token
        ps = torch.tensor(top_p, device=logits.device).unsqueeze(1)
        drop_sorted = before >= ps  # the top token always survives (before == 0 < p)
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    min_p = [p.min_p for p in params]
    if any(m > 0 for m in min_p):
        ms = torch.tensor(min_p, device=logits.device).unsqueeze(1)
        probs = probs.masked_fill(probs < ms * probs.max(dim=-1, keepdim=True).values, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def _logprobs(
    logits: torch.Tensor, tokens: list[int], params: list[SamplingParams]
) -> list[tuple[float, list[tuple[int, float]]] | None]:
    rows = [i for i, p in enumerate(params) if p.logprobs is not None]
    out: list[tuple[float, list[tuple[int, float]]] | None] = [None] * len(params)
    if not rows:
        return out
    logp = logits[rows].log_softmax(dim=-1)
    k = max(params[i].logprobs or 0 for i in rows)
    top_v, top_i = logp.topk(max(k, 1), dim=-1)
    chosen = logp.gather(1, torch.tensor([[tokens[i]] for i in rows], device=logits.device))
    for j, i in enumerate(rows):
        n = params[i].logprobs or 0
        pairs = list(zip(top_i[j, :n].tolist(), top_v[j, :n].tolist(), strict=True))
        out[i] = (chosen[j, 0].item(), pairs)
    return out
