"""The prompt read once for beam search.

Transformers' beam search copies each prompt ``num_beams`` times before its first forward, so the
prompt is read ``num_beams`` times (on a CPU, a 250-token prompt at 4 beams costs more than a
third of the whole search). Beams only differ after the prompt: reading it once and copying its
cache gives the same beams. These helpers build that cache (:func:`prompt_cache`), cut a longer
one back to the prompt (:func:`cut_to_prompt`: greedy's, so that ``keep_greedy`` reads the prompt
once for both decoders) and copy it per beam (:func:`for_beams`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from hf_fvo.models.cache import output_cache

__all__ = ["cut_to_prompt", "for_beams", "prompt_cache"]


def _copyable(cache: Any) -> bool:
    """A cache whose rows can be copied and whose length can be cut (Transformers'
    ``DynamicCache`` and its kin)."""
    return all(hasattr(cache, name) for name in ("batch_repeat_interleave", "crop",
                                                 "get_seq_length"))  # fmt: skip


@torch.no_grad()
def prompt_cache(model: Any, input_ids: torch.Tensor, attention_mask: Any = None) -> Any:
    """The cache of ``input_ids`` without its last column (what Transformers' own prefill leaves
    for the first decoding step to complete), or ``None`` where it cannot serve beams read from
    it: an encoder-decoder or stateful model, a left-padded batch (its position ids are
    Transformers' to derive), a prompt of one token, or a model whose cache cannot be copied.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.prefill import prompt_cache
        >>> from hf_fvo.models import load_default_model
        >>> model = load_default_model()
        >>> prompt_cache(model, torch.tensor([[1, 2, 3]])).get_seq_length()
        2
    """
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) or getattr(model, "_is_stateful", False):
        return None
    if input_ids.shape[1] < 2:
        return None
    if attention_mask is not None and not bool((attention_mask == 1).all()):
        return None
    cache = output_cache(model(input_ids[:, :-1], use_cache=True))
    return cache if _copyable(cache) else None


def cut_to_prompt(cache: Any, width: int) -> Any:
    """``cache`` (of a decoding that started from a ``width``-column prompt) cut back, in place,
    to the prompt without its last column, or ``None`` where it cannot be.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.prefill import cut_to_prompt, prompt_cache
        >>> from hf_fvo.models import load_default_model
        >>> cache = prompt_cache(load_default_model(), torch.tensor([[1, 2, 3, 4, 5]]))
        >>> cut_to_prompt(cache, 3).get_seq_length()
        2
    """
    if not _copyable(cache):
        return None
    extra = cache.get_seq_length() - (width - 1)
    if extra < 0:
        return None
    if extra:
        cache.crop(-extra)
    return cache


def for_beams(cache: Any, beams: int, rows: list[int] | None = None) -> Any:
    """A copy of ``cache`` (of its ``rows``, default all) with each row repeated ``beams``
    times, in Transformers' beam order (a prompt's beams are adjacent).

    Example:
        >>> import torch
        >>> from hf_fvo.generation.prefill import for_beams, prompt_cache
        >>> from hf_fvo.models import load_default_model
        >>> cache = prompt_cache(load_default_model(), torch.tensor([[1, 2, 3]]))
        >>> for_beams(cache, 4).layers[0].keys.shape[0], cache.layers[0].keys.shape[0]
        (4, 1)
    """
    copied = copy.deepcopy(cache)
    if rows is not None:
        copied.batch_select_indices(torch.tensor(rows))
    if beams > 1:
        copied.batch_repeat_interleave(beams)
    return copied
