"""Model loading: checkpoints (HF dirs, GGUF files, the default model) and tokenizers."""

from prefixserve.loader.checkpoint import Checkpoint, load_checkpoint
from prefixserve.loader.default_model import cache_dir, default_model_dir
from prefixserve.loader.incremental_detokenizer import IncrementalDetokenizer
from prefixserve.loader.tokenizer import Tokenizer

__all__ = [
    "Checkpoint",
    "IncrementalDetokenizer",
    "Tokenizer",
    "cache_dir",
    "default_model_dir",
    "load_checkpoint",
]
