"""TableQA: a long markdown table of people shared by different questions about it."""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import COUNTRIES, JOBS, TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option

COLUMNS = ["id", "name", "age", "job", "country", "city", "email", "phone", "start date", "salary"]
ASKABLE = COLUMNS[2:]


@dataclass(kw_only=True)
class TableQA(Workload):
    name = "table-qa"
    help = "a long markdown table of people + different questions about it"
    num_rows: int = option(30, "rows in the shared table (~70 tokens each)")

    def people(self) -> list[dict[str, str]]:
        gen = TextGenerator(self.seed)
        rows = []
        for i, full in enumerate(gen.full_names(self.num_rows)):
            first, last = full.split()
            rows.append({
                "id": str(1000 + i),
                "name": full,
                "age": str(gen.randint(19, 78)),
                "job": gen.choice(JOBS),
                "country": gen.choice(COUNTRIES),
                "city": gen.words(1).capitalize() + gen.choice(["ton", "ville", "burg", " Falls"]),
                "email": f"{first.lower()}.{last.lower()}{gen.randint(1, 99)}@example.com",
                "phone": f"+{gen.randint(1, 99)} {gen.randint(100, 999)} {gen.randint(1000, 9999)}",
                "start date": f"{gen.randint(1995, 2024)}-{gen.randint(1, 12):02d}-{gen.randint(1, 28):02d}",
                "salary": f"${gen.randint(30, 250)},{gen.randint(0, 9)}00",
            })  # fmt: skip
        return rows

    def table(self, people: list[dict[str, str]]) -> str:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(p[c] for c in COLUMNS) + " |" for p in people]
        return "\n".join(lines)

    def start(self) -> list[RequestSpec]:
        people = self.people()
        header = (
            "The table below lists the people in our directory.\n\n"
            f"{self.table(people)}\n\n"
            "Answer the question using only the table.\n"
        )
        gen = TextGenerator(self.seed + 1)
        specs = []
        for i in range(self.num_requests):
            person = people[gen.randint(0, len(people) - 1)]
            column = gen.choice(ASKABLE)
            specs.append(
                RequestSpec(
                    request_id=f"table-qa-{i}",
                    prompt=f"{header}Question: what is the {column} of {person['name']}?\nAnswer:",
                    max_tokens=self.max_tokens,
                    group="table",
                )
            )
        return specs
