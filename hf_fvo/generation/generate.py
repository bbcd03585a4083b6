"""``hf_fvo.generate``: ``model.generate`` with the grammar and a Φ estimator wired in."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.generation.processors import FVOLogitsProcessor
from hf_fvo.grammar import Grammar
from hf_fvo.phi import PhiEstimator

__all__ = ["generate"]


def generate(
    model: Any,
    input_ids: Any = None,
    *,
    grammar: Grammar,
    phi: str | PhiEstimator = "onestep",
    **generate_kwargs: Any,
) -> Any:
    """Run ``model.generate`` so that it samples p_t·Φ̂_t on the grammar's admissible sets.

    Args:
        model: A Transformers causal LM.
        input_ids: The prompt (batch × length, left-padded for batches).
        grammar: The compiled grammar (built with ``vocab_size=model.config.vocab_size``).
        phi: ``"uniform"`` (μ_proj), ``"onestep"``, ``"exact"`` (finite languages; μ*), or an
            estimator instance.
        **generate_kwargs: Passed to ``model.generate``; ``max_new_tokens`` also bounds the
            completions Φ counts, and ``logits_processor`` entries run after the Φ processor.

    Returns:
        Whatever ``model.generate`` returns.

    Example:
        >>> import torch
        >>> import hf_fvo
        >>> from hf_fvo.models import load_default_model, load_default_tokenizer
        >>> tok, model = load_default_tokenizer(), load_default_model()
        >>> g = hf_fvo.Grammar.from_choices(["yes", "no"], tok, vocab_size=model.config.vocab_size)
        >>> ids = tok("Is the sky blue? Answer: ", return_tensors="pt").input_ids
        >>> out = hf_fvo.generate(model, ids, grammar=g, phi="exact", max_new_tokens=4,
        ...                       do_sample=False)
        >>> tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True) in {"yes", "no"}
        True
    """
    if input_ids is None:
        raise ValueError("hf_fvo.generate needs input_ids (the prompt)")
    max_new_tokens = generate_kwargs.get("max_new_tokens")
    if max_new_tokens is None:
        max_new_tokens = getattr(model.generation_config, "max_new_tokens", None)
    processor = FVOLogitsProcessor(
        grammar,
        phi=phi,
        model=model,
        prompt_length=input_ids.shape[1],
        max_new_tokens=max_new_tokens,
    )
    if isinstance(input_ids, torch.Tensor):  # an unpadded prompt: say so, HF cannot infer it
        generate_kwargs.setdefault("attention_mask", torch.ones_like(input_ids))
    extra = generate_kwargs.pop("logits_processor", None) or []
    return model.generate(
        input_ids, logits_processor=LogitsProcessorList([processor, *extra]), **generate_kwargs
    )
