"""Model helpers: the embedded default model (SmolLM2-135M-Instruct, loaded offline) and a tiny
random Llama for examples and tests."""

from hf_fvo.models.smollm2 import (
    DefaultModelUnavailableError,
    default_model_dir,
    load_default_model,
    load_default_tokenizer,
)
from hf_fvo.models.tiny import tiny_random_llama

__all__ = [
    "DefaultModelUnavailableError",
    "default_model_dir",
    "load_default_model",
    "load_default_tokenizer",
    "tiny_random_llama",
]
