"""Which worker caches which KV block, replayed from the workers' KV events.

Engine block hashes are opaque to the router (any seed, sha256 or xxhash). Like llm-d's
indexer after its PR #1290, the index recomputes its *own* chained key for every stored block
from the event's `token_ids` and its parent's key, and keeps engine hash -> key per worker to
apply removals. A prompt is keyed the same way, so the router needs only the block size,
never the workers' hash seed or algorithm:

    key(block 0) = hash((root(salt), tokens[0:B]))      key(block i) = hash((key(i-1), tokens))

Python's tuple hash is deterministic within one process, which is all the router needs.
Speculative entries (the chosen worker will cache these blocks) expire after a TTL unless an
event confirms them first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

EngineHash = Any  # hex string from JSON, or bytes/int in process


def root_key(cache_salt: str | None, lora_id: int | None = None) -> int:
    return hash(("prefixserve-root", cache_salt or None, lora_id))


def prompt_block_keys(token_ids: list[int], block_size: int, cache_salt: str | None = None,
                      max_blocks: int | None = None) -> list[int]:
    """Keys of the prompt's full blocks, leaving out the last token (workers recompute it)."""
    n = (len(token_ids) - 1) // block_size if token_ids else 0
    if max_blocks is not None:
        n = min(n, max_blocks)
    keys, parent = [], root_key(cache_salt)
    for i in range(n):
        parent = hash((parent, tuple(token_ids[i * block_size:(i + 1) * block_size])))
        keys.append(parent)
    return keys


class KVBlockIndex:
    def __init__(self) -> None:
        self.holders: dict[int, set[str]] = {}  # block key -> workers caching it
        self.engine_keys: dict[str, dict[EngineHash, int]] = {}  # worker -> engine hash -> key
        self.speculative: dict[int, dict[str, float]] = {}  # key -> worker -> expiry
        self._spec_expiries: deque[tuple[float, str, list[int]]] = deque()
        self.block_size_seen: int | None = None

    def num_blocks(self, worker: str) -> int:
        return len(self.engine_keys.get(worker, ()))

    # write path ---------------------------------------------------------------------
    def apply_events(self, worker: str, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            kind = event["type"]
            if kind == "BlockStored":
                self._stored(worker, event)
            elif kind == "BlockRemoved":
                self._removed(worker, event["block_hashes"])
            elif kind == "AllBlocksCleared":
                self.clear_worker(worker)

    def load_snapshot(self, worker: str, snapshot: dict[str, Any]) -> None:
        """Replace the worker's blocks with a snapshot `{"seq", "blocks": [BlockRecord...]}`."""
        self.clear_worker(worker)
        records = {b["block_hash"]: b for b in snapshot.get("blocks", [])}
        keys = self.engine_keys.setdefault(worker, {})

        def resolve(h: EngineHash) -> int:
            chain = []
            while h not in keys and h in records:  # walk up to a resolved ancestor
                chain.append(records[h])
                h = records[h]["parent_block_hash"]
                if h is None:
                    break
            for rec in reversed(chain):
                parent = rec["parent_block_hash"]
                base = (keys.get(parent, hash(("orphan", parent))) if parent is not None
                        else root_key(rec.get("cache_salt"), rec.get("lora_id")))
                self._add(worker, rec["block_hash"], hash((base, tuple(rec["token_ids"]))))
            return keys.get(h, 0)

        for h in records:
            resolve(h)

    def clear_worker(self, worker: str) -> None:
        for key in self.engine_keys.pop(worker, {}).values():
            self._drop_holder(key, worker)

    def insert_speculative(self, worker: str, keys: list[int], expiry: float) -> None:
        for key in keys:
            self.speculative.setdefault(key, {})[worker] = expiry
        self._spec_expiries.append((expiry, worker, keys))

    def expire(self, now: float) -> None:
        while self._spec_expiries and self._spec_expiries[0][0] <= now:
            _, worker, keys = self._spec_expiries.popleft()
            for key in keys:
                entry = self.speculative.get(key)
                if entry is not None and entry.get(worker, now + 1) <= now:
                    del entry[worker]
                    if not entry:
                        del self.speculative[key]

    # read path ----------------------------------------------------------------------
    def longest_runs(self, keys: list[int], eligible: Collection[str] | None,
                     now: float) -> dict[str, int]:
        """worker -> number of leading prompt blocks it caches (only workers with >= 1)."""
        runs: dict[str, int] = {}
        alive: set[str] | None = None
        for i, key in enumerate(keys):
            holding = self._holding(key, now)
            if eligible is not None:
                holding = {w for w in holding if w in eligible}
            alive = holding if alive is None else alive & holding
            if not alive:
                break
            for w in alive:
                runs[w] = i + 1
        return runs

    def _holding(self, key: int, now: float) -> set[str]:
        real = self.holders.get(key)
        spec = self.speculative.get(key)
        if not spec:
            return set(real) if real else set()
        out = set(real) if real else set()
        out.update(w for w, exp in spec.items() if exp > now)
        return out

    def _stored(self, worker: str, event: dict[str, Any]) -> None:
        bs = event.get("block_size") or self.block_size_seen or 1
        self.block_size_seen = bs
        keys = self.engine_keys.setdefault(worker, {})
        parent = event.get("parent_block_hash")
        if parent is None:
            base = root_key(event.get("cache_salt"), event.get("lora_id"))
        else:
            base = keys.get(parent, hash(("orphan", parent)))
        tokens = event["token_ids"]
        for i, h in enumerate(event["block_hashes"]):
            base = hash((base, tuple(tokens[i * bs:(i + 1) * bs])))
            self._add(worker, h, base)

    def _removed(self, worker: str, hashes: list[EngineHash]) -> None:
        keys = self.engine_keys.get(worker, {})
        for h in hashes:
            key = keys.pop(h, None)
            if key is not None:
                self._drop_holder(key, worker)

    def _add(self, worker: str, engine_hash: EngineHash, key: int) -> None:
        self.engine_keys.setdefault(worker, {})[engine_hash] = key
        self.holders.setdefault(key, set()).add(worker)
        spec = self.speculative.get(key)
        if spec is not None:
            spec.pop(worker, None)  # confirmed by an event

    def _drop_holder(self, key: int, worker: str) -> None:
        holders = self.holders.get(key)
        if holders is not None:
            holders.discard(worker)
            if not holders:
                del self.holders[key]
