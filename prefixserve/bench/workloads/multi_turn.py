"""MultiTurn: concurrent chat conversations whose history grows with the real answers.

Turn t+1 of a conversation is sent only after the answer to turn t arrived: its messages are
turn t's messages, the assistant's answer, and a new user message. So each turn's prompt
extends the previous turn's prompt and answer, which a prefix cache should never recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixserve.bench.text import TextGenerator
from prefixserve.bench.workloads.workload import RequestSpec, Workload, option


@dataclass(kw_only=True)
class MultiTurn(Workload):
    name = "multi-turn"
    help = "C concurrent conversations, each turn sent after the previous answer arrives"
    num_conversations: int = option(0, "conversations (0: the run's concurrency, else 4)")
    system_words: int = option(80, "words in each conversation's system prompt")
    user_words: int = option(40, "words per user message")
    shared_system_prompt: bool = option(False, "one system prompt for all conversations")

    def conversations(self) -> int:
        return self.num_conversations or 4

    def turns(self, conv: int) -> int:
        """Turns of conversation `conv`: num_requests spread as evenly as possible."""
        base, extra = divmod(self.num_requests, self.conversations())
        return base + (1 if conv < extra else 0)

    def user_message(self, conv: int, turn: int) -> str:
        return TextGenerator(f"{self.seed}-user-{conv}-{turn}").sentence(self.user_words)

    def system_prompt(self, conv: int) -> str:
        key = "shared" if self.shared_system_prompt else str(conv)
        text = TextGenerator(f"{self.seed}-system-{key}").paragraph(self.system_words)
        return f"You are assistant {key}. {text}"

    def spec(
        self, conv: int, turn: int, messages: list[dict[str, str]], parent: str | None
    ) -> RequestSpec:
        return RequestSpec(
            request_id=f"conv-{conv}-turn-{turn}",
            messages=messages,
            max_tokens=self.max_tokens,
            group=f"conv-{conv}",
            turn=turn,
            parent_id=parent,
        )

    def start(self) -> list[RequestSpec]:
        specs = []
        for conv in range(self.conversations()):
            if self.turns(conv) == 0:
                continue
            messages = [
                {"role": "system", "content": self.system_prompt(conv)},
                {"role": "user", "content": self.user_message(conv, 0)},
            ]
            specs.append(self.spec(conv, 0, messages, None))
        return specs

    def next(self, spec: RequestSpec, answer: str) -> list[RequestSpec]:
        conv, turn = int(spec.group.split("-")[1]), spec.turn + 1
        if turn >= self.turns(conv):
            return []
        messages = list(spec.messages or []) + [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": self.user_message(conv, turn)},
        ]
        return [self.spec(conv, turn, messages, spec.request_id)]

    def expected_requests(self) -> int:
        return sum(self.turns(c) for c in range(self.conversations()))
