"""RandomPrompts: prompts that share nothing, not even their first word (the zero-overhead control)."""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class RandomPrompts(Workload):
    name = "random"
    help = "no sharing: every prompt distinct from its first word"
    prompt_words: int = option(240, "words per prompt")

    def start(self) -> list[RequestSpec]:
        gen = TextGenerator(self.seed)
        firsts = gen.distinct_words(self.num_requests)
        return [
            RequestSpec(
                request_id=f"random-{i}",
                prompt=f"{first.capitalize()} {gen.words(self.prompt_words - 1)}",
                max_tokens=self.max_tokens,
                group=f"random-{i}",
            )
            for i, first in enumerate(firsts)
        ]
