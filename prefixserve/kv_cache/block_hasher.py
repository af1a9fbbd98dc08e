"""Block hashing: the chained, seeded content key of every full KV block.

    hash[i] = H(hash[i-1] | uint32-LE token ids of block i | extra keys of block i)
    hash[-1] = root = H("prefixserve-root:" + str(hash_seed))

H is SHA-256 ("sha256", 32-byte digests, the default) or xxh3-128 ("xxhash", 16 bytes, not
cryptographic). Every hash therefore commits to the whole prefix. The payload is plain
bytes (fixed-length parent and tokens, then tagged length-prefixed extra keys), so any
process, in any language, given the seed, block size, algorithm and salt, computes the
same hashes: `hash_token_blocks` is the function an external router calls.

Extra keys: `cache_salt` on the first block only (the chain carries it to every later
block), `lora_id` on every block, and multimodal hashes from `request.mm_hashes`: an entry
`(mm_hash, offset, length)` keys every block its placeholder tokens overlap with
`(mm_hash, offset - block_start)`; a bare `mm_hash` keys the first block.

`BlockHasher.update(request)` appends the hashes of the request's newly full blocks (prompt
or generated tokens) to `request.block_hashes`; hashes are never recomputed. This module
knows nothing about blocks ids or caches.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import xxhash

if TYPE_CHECKING:
    from prefixserve.request import Request

_HASH_FNS: dict[str, Callable[[bytes], bytes]] = {
    "sha256": lambda data: hashlib.sha256(data).digest(),
    "xxhash": xxhash.xxh3_128_digest,
}
_TAG_SALT, _TAG_LORA, _TAG_MM = b"\x01", b"\x02", b"\x03"


def get_hash_fn(hash_algo: str) -> Callable[[bytes], bytes]:
    if hash_algo not in _HASH_FNS:
        raise ValueError(f"hash_algo must be one of {sorted(_HASH_FNS)}, got {hash_algo!r}")
    return _HASH_FNS[hash_algo]


def root_hash(hash_seed: int | str | bytes, hash_algo: str = "sha256") -> bytes:
    """The parent of every first block: a pure function of the seed and algorithm."""
    seed = hash_seed if isinstance(hash_seed, bytes) else str(hash_seed).encode()
    return get_hash_fn(hash_algo)(b"prefixserve-root:" + seed)


def pack_tokens(token_ids: list[int]) -> bytes:
    """Token ids as little-endian uint32 bytes (the hashed form)."""
    try:
        packed = array("I", token_ids)
    except OverflowError:
        raise ValueError("block hashing needs token ids in [0, 2**32)") from None
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _key(tag: bytes, value: Any) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return tag + len(data).to_bytes(4, "little") + data


def block_extra_keys(start: int, end: int, cache_salt: str | None = None,
                     lora_id: int | None = None, mm_hashes: list[Any] | None = None) -> bytes:
    """The extra-key bytes of the block covering tokens [start, end)."""
    out = b""
    if cache_salt is not None and start == 0:
        out += _key(_TAG_SALT, cache_salt)
    if lora_id is not None:
        out += _key(_TAG_LORA, lora_id)
    for item in mm_hashes or ():
        if isinstance(item, (tuple, list)):
            mm_hash, offset, length = item
            if offset < end and offset + length > start:
                out += _key(_TAG_MM, mm_hash) + (offset - start).to_bytes(8, "little", signed=True)
        elif start == 0:
            out += _key(_TAG_MM, item)
    return out


class BlockHasher:
    """Computes chained block hashes for one (block_size, hash_algo, hash_seed)."""

    def __init__(self, block_size: int, hash_algo: str = "sha256",
                 hash_seed: int | str | bytes = 0) -> None:
        self.block_size = block_size
        self.hash_algo = hash_algo
        self.hash_fn = get_hash_fn(hash_algo)
        self.root = root_hash(hash_seed, hash_algo)

    def hash_block(self, parent: bytes | None, token_ids: list[int], extra: bytes = b"") -> bytes:
        return self.hash_fn((parent or self.root) + pack_tokens(token_ids) + extra)

    def hash_tokens(self, token_ids: list[int], parent: bytes | None = None, start_block: int = 0,
                    cache_salt: str | None = None, lora_id: int | None = None,
                    mm_hashes: list[Any] | None = None) -> list[bytes]:
        """Hashes of the full blocks of token_ids, which begin at block `start_block`."""
        bs = self.block_size
        n = len(token_ids) // bs
        data = pack_tokens(token_ids[:n * bs])
        step = 4 * bs
        parent = parent or self.root
        out: list[bytes] = []
        append = out.append
        if cache_salt is not None and start_block == 0 and n and not mm_hashes:
            # The salt keys only block 0: hash it alone, then the rest on the fast path.
            first = self.hash_fn(parent + data[:step] + block_extra_keys(0, bs, cache_salt, lora_id))
            return [first] + self.hash_tokens(token_ids[bs:n * bs], first, 1, None, lora_id)
        if mm_hashes:
            for i in range(n):  # slow path: keys differ per block
                lo = (start_block + i) * bs
                extra = block_extra_keys(lo, lo + bs, cache_salt, lora_id, mm_hashes)
                parent = self.hash_fn(parent + data[i * step:(i + 1) * step] + extra)
                append(parent)
            return out
        # Fast path: the same (possibly empty) suffix on every block; no per-block calls.
        suffix = b"" if lora_id is None else _key(_TAG_LORA, lora_id)
        if self.hash_algo == "sha256":
            sha = hashlib.sha256
            for off in range(0, n * step, step):
                parent = sha(parent + data[off:off + step] + suffix).digest()
                append(parent)
        else:
            xxh = xxhash.xxh3_128_digest
            for off in range(0, n * step, step):
                parent = xxh(parent + data[off:off + step] + suffix)
                append(parent)
        return out

    def update(self, request: Request) -> int:
        """Append hashes for the request's full blocks not hashed yet; return how many."""
        hashes = request.block_hashes
        start = len(hashes)
        end = len(request.all_token_ids) // self.block_size
        if end <= start:
            return 0
        bs = self.block_size
        hashes.extend(self.hash_tokens(request.all_token_ids[start * bs:end * bs],
                                       hashes[-1] if hashes else None, start,
                                       request.cache_salt, request.lora_id, request.mm_hashes))
        return end - start


def hash_token_blocks(token_ids: list[int], block_size: int, hash_seed: int | str | bytes = 0,
                      hash_algo: str = "sha256", cache_salt: str | None = None,
                      lora_id: int | None = None) -> list[bytes]:
    """The block hashes a worker with these settings gives this token list (router use)."""
    return BlockHasher(block_size, hash_algo, hash_seed).hash_tokens(
        list(token_ids), cache_salt=cache_salt, lora_id=lora_id)
