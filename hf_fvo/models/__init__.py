"""Model helpers: the embedded default model (SmolLM2-135M-Instruct, loaded offline)."""

from hf_fvo.models.smollm2 import (
    DefaultModelUnavailableError,
    default_model_dir,
    load_default_model,
    load_default_tokenizer,
)

__all__ = [
    "DefaultModelUnavailableError",
    "default_model_dir",
    "load_default_model",
    "load_default_tokenizer",
]
