"""FewShot: one k-shot header shared by many different questions (the in-context-learning case)."""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class FewShot(Workload):
    name = "few-shot"
    help = "one k-shot header + many different questions"
    num_examples: int = option(8, "examples in the shared header")
    question_words: int = option(20, "words per question")
    answer_words: int = option(10, "words per example answer")

    def header(self) -> str:
        gen = TextGenerator(self.seed)
        lines = ["Answer each question in one short sentence, as in the examples.\n"]
        for _ in range(self.num_examples):
            lines.append(f"Question: {gen.sentence(self.question_words)[:-1]}?")
            lines.append(f"Answer: {gen.sentence(self.answer_words)}\n")
        return "\n".join(lines) + "\n"

    def start(self) -> list[RequestSpec]:
        header = self.header()
        gen = TextGenerator(self.seed + 1)
        return [
            RequestSpec(
                request_id=f"few-shot-{i}",
                prompt=f"{header}Question: {gen.sentence(self.question_words)[:-1]}?\nAnswer:",
                max_tokens=self.max_tokens,
                group="header",
            )
            for i in range(self.num_requests)
        ]
