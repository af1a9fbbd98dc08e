"""SharedPrefix: SGLang's generated-shared-prefix workload, counted in words.

`num_groups` system prompts, each followed by `prompts_per_group` different questions; all
requests shuffled so that groups interleave (what a cache's eviction policy must cope with).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from prefixserve.bench.text import TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class SharedPrefix(Workload):
    name = "shared-prefix"
    help = "SGLang generated-shared-prefix: groups x prompts per group, shuffled"
    num_groups: int = option(4, "groups, each with its own system prompt")
    prompts_per_group: int = option(0, "questions per group (0: num_requests / num_groups)")
    system_prompt_words: int = option(200, "words per system prompt")
    question_words: int = option(32, "words per question")

    def per_group(self) -> int:
        return self.prompts_per_group or max(1, self.num_requests // self.num_groups)

    def start(self) -> list[RequestSpec]:
        gen = TextGenerator(self.seed)
        specs = []
        for g in range(self.num_groups):
            system = f"System {g}: {gen.paragraph(self.system_prompt_words)}\n\n"
            specs += [
                RequestSpec(
                    request_id=f"shared-prefix-{g}-{i}",
                    prompt=f"{system}Question: {gen.sentence(self.question_words)}\nAnswer:",
                    max_tokens=self.max_tokens,
                    group=f"group-{g}",
                )
                for i in range(self.per_group())
            ]
        random.Random(self.seed).shuffle(specs)
        return specs
