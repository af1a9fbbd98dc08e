"""WordTokenizer: a cheap, deterministic stand-in for the model's tokenizer.

One token id per whitespace-separated word, the id a stable hash (CRC-32) of the word into a
vocabulary, memoised per word. The benchmark workloads are built from common English words,
which the real tokenizer turns into about one token each, so prompt lengths and, above all,
which prompts share a prefix come out as the engine would see them, at a few microseconds
per prompt and without torch or a tokenizer file.

Chat prompts are encoded append-only, as a chat template does: every message is
`<|role|> words... <|end|>`, then the generation prompt `<|assistant|>`; an assistant answer
is its words then `<|end|>`, so turn t+1 extends turn t's prompt and answer exactly. It
knows nothing of caches or routing.
"""

from __future__ import annotations

import zlib

DEFAULT_VOCAB_SIZE = 49152  # SmolLM2's vocabulary


class _Vocab(dict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __missing__(self, word: str) -> int:
        token = self[word] = zlib.crc32(word.encode()) % self.size
        return token


class WordTokenizer:
    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if vocab_size < 8:
            raise ValueError(f"vocab_size must be >= 8, got {vocab_size}")
        self._vocab = _Vocab(vocab_size)
        self._known_get = self._vocab.get
        self.end_id = self._vocab["<|end|>"]
        self.generation_prompt_id = self._vocab["<|assistant|>"]

    def encode(self, text: str) -> list[int]:
        return self.encode_words(text.split())

    def encode_words(self, words: list[str]) -> list[int]:
        ids = list(map(self._known_get, words))  # C-speed lookups; new words take the slow path
        if None in ids:
            ids = [self._vocab[w] for w in words]
        return ids

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        ids: list[int] = []
        vocab = self._vocab
        for m in messages:
            ids.append(vocab[f"<|{m['role']}|>"])
            ids.extend(map(vocab.__getitem__, m["content"].split()))
            ids.append(self.end_id)
        ids.append(self.generation_prompt_id)
        return ids

    def encode_answer(self, answer_words: list[str], chat: bool) -> list[int]:
        ids = self.encode_words(answer_words)
        if chat:
            ids.append(self.end_id)
        return ids
