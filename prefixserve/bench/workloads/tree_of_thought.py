"""TreeOfThought: a question expanded breadth-first, `branches` children per node, `depth` levels.

A child's prompt is its parent's prompt, the parent's answer, then a short per-branch
thought, so siblings share everything up to their branch and every node extends its parent.

    root: Q                      depth 0
    ├── Q + A0 + "Thought 1.0"   depth 1
    └── Q + A0 + "Thought 1.1"   depth 1 ...
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class TreeOfThought(Workload):
    name = "tree-of-thought"
    help = "a question expanded breadth-first: b branches per node, d levels"
    branches: int = option(2, "children per node")
    depth: int = option(4, "levels, the root included")
    question_words: int = option(120, "words in the root question")
    thought_words: int = option(8, "words in each branch's thought prompt")
    temperature: float = option(0.0, "sampling temperature")

    def nodes_per_tree(self) -> int:
        return sum(self.branches**level for level in range(self.depth))

    def num_trees(self) -> int:
        return max(1, self.num_requests // self.nodes_per_tree())

    def node(
        self, tree: int, path: str, prompt: str, depth: int, parent: str | None
    ) -> RequestSpec:
        return RequestSpec(
            request_id=f"tot-{tree}-{path}",
            prompt=prompt,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            group=f"tree-{tree}",
            turn=depth,
            parent_id=parent,
        )

    def start(self) -> list[RequestSpec]:
        specs = []
        for tree in range(self.num_trees()):
            gen = TextGenerator(f"{self.seed}-tree-{tree}")
            prompt = (
                f"Problem: {gen.paragraph(self.question_words)}\n"
                "Explore several lines of thought, one step at a time.\n"
            )
            specs.append(self.node(tree, "0", prompt, 0, None))
        return specs

    def next(self, spec: RequestSpec, answer: str) -> list[RequestSpec]:
        depth = spec.turn + 1
        if depth >= self.depth:
            return []
        tree, path = spec.group.split("-")[1], spec.request_id.split("-", 2)[2]
        children = []
        for b in range(self.branches):
            thought = TextGenerator(f"{self.seed}-{spec.request_id}-{b}").sentence(
                self.thought_words
            )
            prompt = f"{spec.prompt}{answer}\nThought {depth}.{b}: {thought}\n"
            children.append(self.node(int(tree), f"{path}.{b}", prompt, depth, spec.request_id))
        return children

    def expected_requests(self) -> int:
        return self.num_trees() * self.nodes_per_tree()
