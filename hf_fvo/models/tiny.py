"""A tiny random Llama: for examples, tests and quick experiments that need a real
``PreTrainedModel`` (generate, caches, assisted decoding) but no weights."""

from __future__ import annotations

from typing import Any

__all__ = ["tiny_random_llama"]


def tiny_random_llama(
    vocab_size: int, *, eos_token_id: int | None = None, seed: int = 0, sharpness: float = 1.0
) -> Any:
    """A 2-layer, 32-wide ``LlamaForCausalLM`` with seeded random weights, in eval mode.

    Args:
        vocab_size: Vocabulary size (match the tokenizer or grammar).
        eos_token_id: Also used as the pad id.
        seed: Weight seed.
        sharpness: Multiplies the output layer, so laws differ visibly (1: as initialised).

    Example:
        >>> from hf_fvo.models import tiny_random_llama
        >>> model = tiny_random_llama(100, eos_token_id=2)
        >>> model.config.vocab_size, model.config.num_hidden_layers
        (100, 2)
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    if sharpness != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(sharpness)
    return model
