"""SelfConsistency: one chain-of-thought question sampled many times (majority voting).

Either as separate requests that share the whole prompt, or as one request per question with
the OpenAI `n` field, where the server itself should share the prompt between the samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import FIRST_NAMES, WORDS, TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class SelfConsistency(Workload):
    name = "self-consistency"
    help = "one chain-of-thought question sampled n times"
    num_questions: int = option(
        1, "different questions; samples per question = num_requests / this"
    )
    use_n_field: bool = option(
        False, "one request per question with n=samples instead of n requests"
    )
    temperature: float = option(0.7, "sampling temperature of every sample")
    context_words: int = option(160, "words of background story before each question")

    def question(self, gen: TextGenerator) -> str:
        who = gen.choice(FIRST_NAMES)
        thing = gen.choice(WORDS)
        a, b, c = gen.randint(10, 99), gen.randint(2, 9), gen.randint(2, 9)
        return (
            f"{gen.paragraph(self.context_words)}\n\n"
            f"{who} has {a} {thing} boxes. {who} gives away {b} boxes, then buys {c} times as "
            f"many boxes as were given away. How many {thing} boxes does {who} have now?\n"
            "Let's think step by step.\n"
        )

    def samples_per_question(self) -> int:
        return max(1, self.num_requests // max(1, self.num_questions))

    def start(self) -> list[RequestSpec]:
        gen = TextGenerator(self.seed)
        k = self.samples_per_question()
        specs = []
        for q in range(self.num_questions):
            prompt = self.question(gen)
            copies = (
                [(f"sc-{q}", k)] if self.use_n_field else [(f"sc-{q}-{i}", 1) for i in range(k)]
            )
            specs += [
                RequestSpec(
                    request_id=rid,
                    prompt=prompt,
                    max_tokens=self.max_tokens,
                    n=n,
                    temperature=self.temperature,
                    group=f"question-{q}",
                )
                for rid, n in copies
            ]
        return specs
