"""Convert a llama.cpp `.gguf` file into a HF checkpoint directory.

    model.gguf  ->  config.json, model.safetensors (fp32), tokenizer.json,
                    tokenizer_config.json, generation_config.json

Quantized tensors are dequantized to fp32 with `gguf.quants.dequantize`; tensor names are
mapped from llama.cpp's (`blk.N.attn_q.weight`) to HF's (`model.layers.N.self_attn.q_proj.weight`),
and the Q/K row permutation llama.cpp's converter applies to llama-arch models is undone,
so the result equals the original HF weights (up to quantization). The output loads in
`transformers` as well as in prefixserve.

This module knows GGUF metadata and tensor naming only; where the output directory lives
is the caller's business. `convert_gguf_atomically` writes a temp dir and renames it, so a
killed process never leaves a half-written checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize
from safetensors.numpy import save_file

from prefixserve.loader.gguf_tokenizer import build_tokenizer

# general.architecture -> HF architecture name
GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
# llama.cpp permutes Q/K rows for these (its RoPE pairs adjacent dims; HF pairs halves).
_PERMUTED_ARCHS = {"llama"}

_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_GGUF_MAGIC = b"GGUF"


def read_gguf(path: Path) -> GGUFReader:
    """Open a GGUF file, turning any failure into a ValueError that names the file."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != _GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file (magic bytes {magic!r}, expected {_GGUF_MAGIC!r})")
    try:
        return GGUFReader(path)
    except Exception as e:  # the reader raises ValueError, IndexError, struct errors...
        raise ValueError(f"{path}: corrupt GGUF file: {e}") from e


def gguf_metadata(reader: GGUFReader) -> dict[str, Any]:
    """All key/value metadata as plain Python values."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        if field.types and field.types[0] == GGUFValueType.ARRAY and isinstance(value, list):
            value = list(value)
        meta[key] = value
    return meta


def convert_gguf(gguf_path: str | Path, output_dir: str | Path) -> None:
    """Write a HF checkpoint for `gguf_path` into the existing directory `output_dir`."""
    path, out = Path(gguf_path), Path(output_dir)
    reader = read_gguf(path)
    meta = gguf_metadata(reader)
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"{path}: unsupported GGUF architecture {arch!r} (general.architecture); "
                         f"supported: {', '.join(GGUF_ARCHITECTURES)}")
    tokenizer, tok_config = build_tokenizer(meta, str(path))  # fail early, before dequantizing
    tensors, rope_freqs = _hf_tensors(reader, meta, arch, path)
    config = _hf_config(meta, arch, tensors, rope_freqs, path)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", tok_config)
    _write_json(out / "config.json", config)
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
    _write_json(out / "generation_config.json", generation)


def convert_gguf_atomically(gguf_path: Path, target: Path) -> None:
    """Convert into a temp dir beside `target` and rename it into place: a killed process
    leaves no half-written checkpoint, and a concurrent converter's result is kept."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only
    try:
        convert_gguf(gguf_path, tmp)
        os.rename(tmp, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _hf_tensors(reader: GGUFReader, meta: dict[str, Any], arch: str,
                path: Path) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    heads = int(meta[f"{arch}.attention.head_count"])
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    tensors: dict[str, np.ndarray] = {}
    rope_freqs = None
    for t in reader.tensors:
        data = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name == "rope_freqs.weight":
            rope_freqs = data
            continue
        name = _hf_name(t.name, path)
        if arch in _PERMUTED_ARCHS and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _unpermute(data, heads)
        elif arch in _PERMUTED_ARCHS and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _unpermute(data, kv_heads)
        tensors[name] = data
    if "model.embed_tokens.weight" not in tensors:
        raise ValueError(f"{path}: GGUF has no token_embd.weight tensor")
    return tensors, rope_freqs


def _hf_name(gguf_name: str, path: Path) -> str:
    base, _, kind = gguf_name.rpartition(".")
    if base in _GLOBAL_TENSORS and kind == "weight":
        return f"{_GLOBAL_TENSORS[base]}.weight"
    m = _LAYER_NAME.fullmatch(gguf_name)
    if m and m.group(2) in _LAYER_TENSORS:
        return f"model.layers.{m.group(1)}.{_LAYER_TENSORS[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"{path}: unexpected tensor {gguf_name!r} for a llama/qwen2/qwen3 model")


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Invert llama.cpp's `permute`: within each head it interleaved the two rotary halves
    (rows [h, 2, d/2] -> [h, d/2, 2]); put them back as halves."""
    rows = w.shape[0]
    # [n_head, rows/n_head/2, 2, ...] -> [n_head, 2, rows/n_head/2, ...]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_config(meta: dict[str, Any], arch: str, tensors: dict[str, np.ndarray],
               rope_freqs: np.ndarray | None, path: Path) -> dict[str, Any]:
    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        if isinstance(value, list):
            raise ValueError(f"{path}: per-layer {arch}.{key} is not supported")
        return value

    hidden = int(get("embedding_length"))
    heads = int(get("attention.head_count"))
    embed = tensors["model.embed_tokens.weight"]
    has_bias = "model.layers.0.self_attn.q_proj.bias" in tensors
    config: dict[str, Any] = {
        "architectures": [GGUF_ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": int(embed.shape[0]),
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")
                                 or tensors["model.layers.0.mlp.up_proj.weight"].shape[0]),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length") or hidden // heads),
        "hidden_act": "silu",
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "torch_dtype": "float32",
    }
    if arch == "llama":
        config["attention_bias"] = has_bias
        config["mlp_bias"] = False
    scaling = _rope_scaling(meta, arch, config, rope_freqs, path)
    if scaling is not None:
        config["rope_scaling"] = scaling
    for key, hf_key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")):
        if meta.get(f"tokenizer.ggml.{key}_token_id") is not None:
            config[hf_key] = int(meta[f"tokenizer.ggml.{key}_token_id"])
    return config


def _rope_scaling(meta: dict[str, Any], arch: str, config: dict[str, Any],
                  rope_freqs: np.ndarray | None, path: Path) -> dict[str, Any] | None:
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    factor = float(meta.get(f"{arch}.rope.scaling.factor", 1.0))
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if rope_freqs is not None:
        return _llama3_scaling(rope_freqs, config, path)
    if kind in ("none", None) or factor == 1.0:
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind == "yarn":
        scaling: dict[str, Any] = {"rope_type": "yarn", "factor": factor}
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        return scaling
    raise ValueError(f"{path}: unsupported rope scaling type {kind!r} ({arch}.rope.scaling.type)")


def _llama3_scaling(rope_freqs: np.ndarray, config: dict[str, Any], path: Path) -> dict[str, Any]:
    """llama.cpp stores Llama 3.1 rope scaling as a per-frequency divisor tensor. Recover the HF
    parameters by trying Meta's published ones (low 1, high 4, original 8192) at the observed
    factor, and refuse if they do not reproduce the tensor."""
    factor = float(rope_freqs.max())
    scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    dim = config["head_dim"]
    inv_freq = 1.0 / config["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = 8192 / 1.0, 8192 / 4.0
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    divisor = np.where(wavelen < high_wavelen, 1.0,
                       np.where(wavelen > low_wavelen, factor, 1.0 / ((1 - smooth) / factor + smooth)))
    if divisor.shape != rope_freqs.shape or not np.allclose(divisor, rope_freqs, rtol=1e-3):
        raise ValueError(f"{path}: rope_freqs tensor does not match llama3 rope scaling; unsupported")
    return scaling


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
