"""Model helpers: the embedded default model (SmolLM2-135M-Instruct, loaded offline), a tiny
random Llama for examples and tests, and Markov (n-gram) LMs, the finite-state models under
which exact Φ is a dynamic program."""

from hf_fvo.models.chat import chat_prompt
from hf_fvo.models.markov import MarkovConfig, MarkovLM
from hf_fvo.models.smollm2 import (
    default_model_dir,
    load_default_model,
    load_default_tokenizer,
)
from hf_fvo.models.tiny import tiny_random_llama

__all__ = [
    "MarkovConfig",
    "MarkovLM",
    "chat_prompt",
    "default_model_dir",
    "load_default_model",
    "load_default_tokenizer",
    "tiny_random_llama",
]
