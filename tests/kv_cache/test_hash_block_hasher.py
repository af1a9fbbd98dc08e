"""Block hashing: chain definition, seed determinism, extra keys, incremental updates."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import xxhash

from prefixserve.kv_cache.block_hasher import (
    BlockHasher,
    block_extra_keys,
    hash_token_blocks,
    pack_tokens,
    root_hash,
)
from prefixserve.request import Request

ALGOS = ["sha256", "xxhash"]


@pytest.mark.parametrize("algo", ALGOS)
def test_chain_is_hash_of_parent_tokens_and_keys(algo):
    fn = {"sha256": lambda d: hashlib.sha256(d).digest(), "xxhash": xxhash.xxh3_128_digest}[algo]
    hashes = hash_token_blocks([5, 6, 7, 8, 9, 10, 11], block_size=3, hash_seed=7, hash_algo=algo)
    root = fn(b"prefixserve-root:7")
    h0 = fn(root + (5).to_bytes(4, "little") + (6).to_bytes(4, "little") + (7).to_bytes(4, "little"))
    h1 = fn(h0 + pack_tokens([8, 9, 10]))
    assert hashes == [h0, h1]  # the trailing partial block [11] is never hashed
    assert len(h0) == {"sha256": 32, "xxhash": 16}[algo]


@pytest.mark.parametrize("algo", ALGOS)
def test_changing_one_token_in_block_zero_changes_every_later_hash(algo):
    a = hash_token_blocks([1, 2, 3, 4, 5, 6], 2, hash_algo=algo)
    b = hash_token_blocks([1, 9, 3, 4, 5, 6], 2, hash_algo=algo)
    assert all(x != y for x, y in zip(a, b, strict=True))


def test_different_seeds_give_different_hashes_and_same_seed_same_hashes():
    tokens = list(range(8))
    assert hash_token_blocks(tokens, 4, hash_seed=1) != hash_token_blocks(tokens, 4, hash_seed=2)
    assert hash_token_blocks(tokens, 4, hash_seed=1) == hash_token_blocks(tokens, 4, hash_seed=1)
    assert root_hash("a") != root_hash("b")


def test_same_seed_gives_same_hashes_in_another_process():
    code = ("import json; from prefixserve.kv_cache.block_hasher import hash_token_blocks; "
            "print(json.dumps([h.hex() for h in hash_token_blocks(list(range(12)), 4, hash_seed=3, "
            "cache_salt='t')]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "random", "PATH": ""})
    here = [h.hex() for h in hash_token_blocks(list(range(12)), 4, hash_seed=3, cache_salt="t")]
    assert json.loads(out.stdout) == here


def test_salt_keys_only_the_first_block_and_the_chain_carries_it():
    assert block_extra_keys(0, 4, cache_salt="s") != b""
    assert block_extra_keys(4, 8, cache_salt="s") == b""
    plain = hash_token_blocks(list(range(8)), 4)
    salted = hash_token_blocks(list(range(8)), 4, cache_salt="s")
    other = hash_token_blocks(list(range(8)), 4, cache_salt="t")
    assert plain[1] != salted[1] != other[1]
    hasher = BlockHasher(4)
    assert salted[1] == hasher.hash_block(salted[0], [4, 5, 6, 7])  # no salt on block 1


def test_lora_id_keys_every_block():
    hasher = BlockHasher(2)
    plain = hasher.hash_tokens([1, 2, 3, 4])
    lora = hasher.hash_tokens([1, 2, 3, 4], lora_id=3)
    assert lora[0] != plain[0]
    assert lora[1] == hasher.hash_block(lora[0], [3, 4], block_extra_keys(2, 4, lora_id=3))
    assert lora[1] != hasher.hash_block(lora[0], [3, 4])


def test_multimodal_hashes_key_the_blocks_they_overlap_with_relative_offsets():
    item = ("img", 0, 5)
    assert block_extra_keys(0, 5, mm_hashes=[item]) != b""
    assert block_extra_keys(3, 8, mm_hashes=[item]) != block_extra_keys(0, 5, mm_hashes=[item])
    assert block_extra_keys(6, 10, mm_hashes=[item]) == b""
    two = block_extra_keys(0, 10, mm_hashes=[("a", 0, 2), ("b", 4, 2)])
    assert two.index(b"a") < two.index(b"b")
    hasher = BlockHasher(4)
    placeholder = [0] * 8
    at_0 = hasher.hash_tokens(placeholder, mm_hashes=[("img", 0, 4)])
    at_4 = hasher.hash_tokens(placeholder, mm_hashes=[("img", 4, 4)])
    assert at_0[1] != at_4[1]


def test_update_hashes_new_full_blocks_incrementally_without_recomputing():
    hasher = BlockHasher(3)
    req = Request("r", [1, 2, 3, 4, 5], cache_salt="s")
    assert hasher.update(req) == 1
    first = req.block_hashes[0]
    req.append_output_token_ids(6)
    assert hasher.update(req) == 1
    req.append_output_token_ids([7, 8])
    assert hasher.update(req) == 0
    assert req.block_hashes[0] is first
    assert req.block_hashes == hash_token_blocks([1, 2, 3, 4, 5, 6, 7, 8], 3, cache_salt="s")


def test_router_function_matches_request_hashes_with_all_options():
    req = Request("r", list(range(20)), cache_salt="tenant", lora_id=2)
    hasher = BlockHasher(4, "xxhash", hash_seed="prod")
    hasher.update(req)
    assert req.block_hashes == hash_token_blocks(list(range(20)), 4, "prod", "xxhash", "tenant", 2)


def test_invalid_algo_and_token_ids_are_rejected():
    with pytest.raises(ValueError, match="hash_algo"):
        BlockHasher(4, "md5")
    with pytest.raises(ValueError, match="token ids"):
        hash_token_blocks([-1, 2], 2)
