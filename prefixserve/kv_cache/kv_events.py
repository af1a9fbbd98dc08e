"""KV cache events: what a worker tells an external router about its prefix cache.

`BlockStored` (full blocks became hittable), `BlockRemoved` (cached blocks were evicted) and
`AllBlocksCleared` (reset), each with a sequence number that increases by one per event.
`KVEventLog` keeps the latest events in a bounded ring (`events_since(seq)` for pollers,
`None` when the poller fell behind the ring), calls subscribers synchronously, and keeps a
live `KVEventIndex` of its own events so `snapshot()` can hand a late subscriber the whole
cached state (which vLLM lacks, issue #40363). `KVEventIndex` is the replayer a router uses.

Hashes are opaque values (bytes in process; `to_dict()` writes bytes as hex strings and
`event_from_dict` reads them back). This module has no dependencies and knows nothing about
blocks ids, requests or how the hashes were computed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BlockHash = bytes | int


def encode_hash(h: BlockHash | None) -> str | int | None:
    return h.hex() if isinstance(h, bytes) else h


def decode_hash(h: str | int | None) -> BlockHash | None:
    return bytes.fromhex(h) if isinstance(h, str) else h


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Consecutive full blocks of one chain became cached; `token_ids` spans all of them."""

    seq: int
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    cache_salt: str | None = None
    lora_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "BlockStored", "seq": self.seq,
                "block_hashes": [encode_hash(h) for h in self.block_hashes],
                "parent_block_hash": encode_hash(self.parent_block_hash),
                "token_ids": list(self.token_ids), "block_size": self.block_size,
                "cache_salt": self.cache_salt, "lora_id": self.lora_id}


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """These cached blocks were evicted (their KV is gone)."""

    seq: int
    block_hashes: list[BlockHash]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "BlockRemoved", "seq": self.seq,
                "block_hashes": [encode_hash(h) for h in self.block_hashes]}


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""

    seq: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": "AllBlocksCleared", "seq": self.seq}


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def event_from_dict(d: dict[str, Any]) -> KVEvent:
    kind = d["type"]
    if kind == "BlockStored":
        return BlockStored(d["seq"], [decode_hash(h) for h in d["block_hashes"]],
                           decode_hash(d["parent_block_hash"]), list(d["token_ids"]),
                           d["block_size"], d.get("cache_salt"), d.get("lora_id"))
    if kind == "BlockRemoved":
        return BlockRemoved(d["seq"], [decode_hash(h) for h in d["block_hashes"]])
    if kind == "AllBlocksCleared":
        return AllBlocksCleared(d["seq"])
    raise ValueError(f"unknown KV event type {kind!r}")


@dataclass(frozen=True, slots=True)
class BlockRecord:
    """One cached block as a router sees it."""

    block_hash: BlockHash
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    cache_salt: str | None = None
    lora_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"block_hash": encode_hash(self.block_hash),
                "parent_block_hash": encode_hash(self.parent_block_hash),
                "token_ids": list(self.token_ids), "cache_salt": self.cache_salt,
                "lora_id": self.lora_id}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlockRecord:
        return cls(decode_hash(d["block_hash"]), decode_hash(d["parent_block_hash"]),
                   tuple(d["token_ids"]), d.get("cache_salt"), d.get("lora_id"))


@dataclass(frozen=True)
class KVSnapshot:
    """Every cached block at sequence number `seq`: load it, then apply events after `seq`."""

    seq: int
    blocks: list[BlockRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "blocks": [b.to_dict() for b in self.blocks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KVSnapshot:
        return cls(d["seq"], [BlockRecord.from_dict(b) for b in d["blocks"]])


class KVEventIndex:
    """Replays events (or loads a snapshot) into the set of cached block hashes."""

    def __init__(self) -> None:
        self.blocks: dict[BlockHash, BlockRecord] = {}
        self.seq = 0

    @property
    def hashes(self) -> set[BlockHash]:
        return set(self.blocks)

    def __contains__(self, block_hash: BlockHash) -> bool:
        return block_hash in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def apply(self, event: KVEvent | dict[str, Any]) -> None:
        if isinstance(event, dict):
            event = event_from_dict(event)
        if isinstance(event, BlockStored):
            bs, parent = event.block_size, event.parent_block_hash
            for i, h in enumerate(event.block_hashes):
                tokens = tuple(event.token_ids[i * bs:(i + 1) * bs])
                self.blocks[h] = BlockRecord(h, parent, tokens, event.cache_salt, event.lora_id)
                parent = h
        elif isinstance(event, BlockRemoved):
            for h in event.block_hashes:
                self.blocks.pop(h, None)
        else:
            self.blocks.clear()
        self.seq = event.seq

    def apply_all(self, events: list[KVEvent] | list[dict[str, Any]]) -> None:
        for event in events:
            self.apply(event)

    def load_snapshot(self, snapshot: KVSnapshot | dict[str, Any]) -> None:
        if isinstance(snapshot, dict):
            snapshot = KVSnapshot.from_dict(snapshot)
        self.blocks = {b.block_hash: b for b in snapshot.blocks}
        self.seq = snapshot.seq

    def snapshot(self) -> KVSnapshot:
        return KVSnapshot(self.seq, list(self.blocks.values()))


class KVEventLog:
    """Numbers events, keeps the last `ring_size` of them, and notifies subscribers."""

    def __init__(self, ring_size: int = 10_000) -> None:
        if ring_size < 1:
            raise ValueError(f"kv event ring_size must be >= 1, got {ring_size}")
        self._ring: deque[KVEvent] = deque(maxlen=ring_size)
        self._subscribers: list[Callable[[KVEvent], None]] = []
        self._index = KVEventIndex()
        self.seq = 0

    def block_stored(self, block_hashes: list[BlockHash], parent_block_hash: BlockHash | None,
                     token_ids: list[int], block_size: int, cache_salt: str | None = None,
                     lora_id: int | None = None) -> None:
        self._emit(BlockStored(self.seq + 1, block_hashes, parent_block_hash, token_ids,
                               block_size, cache_salt, lora_id))

    def block_removed(self, block_hashes: list[BlockHash]) -> None:
        self._emit(BlockRemoved(self.seq + 1, block_hashes))

    def all_cleared(self) -> None:
        self._emit(AllBlocksCleared(self.seq + 1))

    def subscribe(self, fn: Callable[[KVEvent], None]) -> Callable[[], None]:
        """Call `fn(event)` for every future event; returns an unsubscribe function."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn)

    def events_since(self, seq: int) -> list[KVEvent] | None:
        """Events with sequence number > seq, or None if some were already dropped."""
        if seq >= self.seq:
            return []
        oldest = self._ring[0].seq if self._ring else self.seq + 1
        if seq + 1 < oldest:
            return None
        return [e for e in self._ring if e.seq > seq]

    def snapshot(self) -> KVSnapshot:
        """All currently cached blocks and the sequence number they are current at."""
        return self._index.snapshot()

    def _emit(self, event: KVEvent) -> None:
        self.seq = event.seq
        self._ring.append(event)
        self._index.apply(event)
        for fn in list(self._subscribers):
            fn(event)
