"""IncrementalDetokenizer: turn a stream of generated token ids into a stream of text pieces.

One per completion. Each `push(ids)` returns only the text those ids completed. A token
can end in the middle of a UTF-8 character (byte-level BPE splits emoji and CJK across
tokens); such text decodes to a trailing U+FFFD and is held back until the next token
completes it. The concatenation of all pieces (plus `flush()` at the end) equals
`tokenizer.decode(all_ids)`.

Cost per push is bounded: like vLLM, it decodes only a short window
`ids[prefix_offset:]` and subtracts the text of `ids[prefix_offset:read_offset]`, which
keeps decoders that strip or merge at the window start (SentencePiece's leading space)
consistent. Knows nothing about stop strings or requests.
"""

from __future__ import annotations

from prefixserve.loader.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
# With HF's clean_up_tokenization a later token can still change the last few characters
# (" ." -> "."), so that much text is held back until flush().
_CLEANUP_HOLDBACK = 4


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self.text = ""  # everything returned so far
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_ids: list[int] | int) -> str:
        """Append generated ids; return the newly completed text ("" if none yet)."""
        self.token_ids.extend([token_ids] if isinstance(token_ids, int) else token_ids)
        if self.tokenizer.clean_up_tokenization_spaces:
            return self._push_full(holdback=_CLEANUP_HOLDBACK)
        window = self._decode(self.token_ids[self.prefix_offset:])
        if window.endswith(_REPLACEMENT):
            return ""  # a multi-byte character is not complete yet
        done = self._decode(self.token_ids[self.prefix_offset:self.read_offset])
        if not window.startswith(done):  # a decoder rewrote the window's start: slow path
            return self._push_full(holdback=0)
        new = window[len(done):]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        self.text += new
        return new

    def _push_full(self, holdback: int) -> str:
        """Decode everything and return what was not returned before."""
        full = self._decode(self.token_ids)
        if full.endswith(_REPLACEMENT):
            return ""
        end = max(len(self.text), len(full) - holdback)
        new = full[len(self.text):end] if full.startswith(self.text) else ""
        self.text += new
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return new

    def flush(self) -> str:
        """At the end of the completion: any text still held back (an incomplete
        character decodes to U+FFFD, as `decode` does)."""
        full = self._decode(self.token_ids)
        new = full[len(self.text):] if full.startswith(self.text) else ""
        self.text += new
        return new
