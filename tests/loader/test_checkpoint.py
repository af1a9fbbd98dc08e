"""load_checkpoint on HF directories: sharded and unsharded weights, and every way a path can
be wrong gives a ValueError that names the offending file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import save_file

from prefixserve.loader import load_checkpoint


@pytest.fixture
def hf_dir(tiny_gguf, tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    """A plain HF checkpoint dir (the converted tiny llama, copied out of the cache)."""
    path, model = tiny_gguf("llama")
    d = tmp_path / "hf"
    shutil.copytree(load_checkpoint(path).path, d)
    return d, model


def _shard(d: Path) -> dict[str, torch.Tensor]:
    """Split model.safetensors into three shards plus an index, as HF's save_pretrained does."""
    tensors = dict(load_checkpoint(d).weights())
    (d / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for i in range(3):
        shard = f"model-{i + 1:05d}-of-00003.safetensors"
        part = {n: tensors[n].contiguous() for n in names[i::3]}
        save_file(part, str(d / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return tensors


def test_sharded_and_unsharded_checkpoints_yield_the_same_weights(hf_dir):
    d, model = hf_dir
    unsharded = dict(load_checkpoint(d).weights())
    _shard(d)
    ckpt = load_checkpoint(d)
    assert len(ckpt.weight_files) == 3
    sharded = dict(ckpt.weights())
    assert sharded.keys() == unsharded.keys() == model.state_dict().keys()
    for name, tensor in unsharded.items():
        assert torch.equal(sharded[name], tensor)


def test_checkpoint_carries_config_and_tokenizer(hf_dir):
    d, model = hf_dir
    ckpt = load_checkpoint(str(d))
    assert ckpt.path == d
    assert ckpt.config.num_hidden_layers == model.config.num_hidden_layers
    assert ckpt.config.vocab_size == ckpt.tokenizer.vocab_size
    assert ckpt.tokenizer.encode(" the") == [3 + 256 + 2]  # "Ġthe": specials, bytes, 3rd merge


def test_missing_path_is_a_value_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=f"{re.escape(str(missing))}: no such file"):
        load_checkpoint(missing)


def test_dir_without_config_is_a_value_error(hf_dir):
    d, _ = hf_dir
    (d / "config.json").unlink()
    with pytest.raises(ValueError, match=f"{re.escape(str(d))}: .*no config.json"):
        load_checkpoint(d)


def test_dir_without_weights_is_a_value_error(hf_dir):
    d, _ = hf_dir
    (d / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=f"{re.escape(str(d))}: no weights"):
        load_checkpoint(d)


def test_index_naming_a_missing_shard_is_a_value_error(hf_dir):
    d, _ = hf_dir
    _shard(d)
    (d / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors.index.json: .*model-00002-of-00003"):
        load_checkpoint(d)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_safetensors_is_a_value_error(hf_dir, damage):
    d, _ = hf_dir
    file = d / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(b"\x00" * 64 if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(ValueError, match=f"{re.escape(str(file))}: corrupt safetensors"):
        load_checkpoint(d)


def test_unknown_architecture_in_config_is_a_value_error(hf_dir):
    d, _ = hf_dir
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"{re.escape(str(d / 'config.json'))}: unsupported architecture"):
        load_checkpoint(d)


def test_file_that_is_not_gguf_is_a_value_error(tmp_path, cache):
    f = tmp_path / "model.bin"
    f.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ValueError, match=f"{re.escape(str(f))}: not a GGUF file"):
        load_checkpoint(f)
    assert not any((cache / "models").iterdir())  # the failed conversion left nothing behind


def _rewrite_gguf(src: Path, dst: Path, override: dict[str, str]) -> None:
    """Copy a GGUF, replacing some string metadata values."""
    reader = gguf.GGUFReader(src)
    arch = override.get("general.architecture", reader.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(str(dst), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = override.get(key, field.contents())
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key.replace("llama.", f"{arch}.", 1), value, vtype, sub_type=sub)
    for t in reader.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_with_unknown_architecture_is_a_value_error(tiny_gguf, tmp_path):
    src, _ = tiny_gguf("llama")
    bad = tmp_path / "phi.gguf"
    _rewrite_gguf(src, bad, {"general.architecture": "phi2"})
    with pytest.raises(ValueError, match=f"{re.escape(str(bad))}: unsupported GGUF architecture 'phi2'"):
        load_checkpoint(bad)


def test_gguf_with_unsupported_tokenizer_model_is_a_value_error(tiny_gguf, tmp_path):
    src, _ = tiny_gguf("llama")
    bad = tmp_path / "bert-tok.gguf"
    _rewrite_gguf(src, bad, {"tokenizer.ggml.model": "bert"})
    with pytest.raises(ValueError, match=f"{re.escape(str(bad))}: unsupported GGUF tokenizer model 'bert'"):
        load_checkpoint(bad)


def test_truncated_gguf_is_a_value_error(tiny_gguf, tmp_path):
    src, _ = tiny_gguf("llama")
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(src.read_bytes()[:2000])
    with pytest.raises(ValueError, match=f"{re.escape(str(bad))}: corrupt GGUF"):
        load_checkpoint(bad)
