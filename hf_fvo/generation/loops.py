"""Transformers' decoding loops, entered by name: the one module that touches Transformers'
private generation API (``GENERATION_MODES_MAPPING``, ``GenerationMixin._assisted_decoding``,
``_get_candidate_generator``, the assisted candidate generator's ``_update_past_and_masks`` and
``_prepare_*`` helpers), so that a Transformers release that moves them breaks one file. The
Transformers versions CI tests are named in docs/api.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import GenerationMixin
from transformers.generation.candidate_generator import (
    AssistedCandidateGenerator,
    _prepare_attention_mask,
    _prepare_position_ids,
    _prepare_token_type_ids,
)
from transformers.generation.utils import GENERATION_MODES_MAPPING

from hf_fvo.errors import InvalidArgumentError

__all__ = ["WidenedDraft", "assisted_decoding", "decoding_loop", "why_not_assisted"]


def decoding_loop(generation_config: Any) -> Callable[..., Any]:
    """The ``GenerationMixin`` method Transformers runs for this config's mode (sampling,
    greedy and beam search).

    Raises:
        InvalidArgumentError: a mode hf_fvo does not run (e.g. a Hub-hosted decoding method).
    """
    mode = generation_config.get_generation_mode()
    name = GENERATION_MODES_MAPPING.get(mode, "")
    if "/" in name or not hasattr(GenerationMixin, name):
        raise InvalidArgumentError(
            f"hf_fvo.generate supports sampling, greedy, beam search and assisted decoding; "
            f"{mode.value} is not among them in this Transformers version"
        )
    return getattr(GenerationMixin, name)


def assisted_decoding(
    model: Any, candidate_generator: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Transformers' assisted-decoding loop on ``model``, with the candidate generator that
    ``candidate_generator(**what Transformers passes)`` builds (the loop has no argument for
    one; it asks the model)."""
    return GenerationMixin._assisted_decoding(
        _WithCandidateGenerator(model, candidate_generator), *args, **kwargs
    )


def why_not_assisted(model: Any, generation_config: Any, model_kwargs: dict) -> str | None:
    """Why Transformers' assisted decoding cannot run with this model and cache (it refuses
    ``use_cache=False`` and static caches, and up to 5.24 stateful models), or ``None``."""
    static = getattr(generation_config, "cache_implementation", None)
    if getattr(model, "_is_stateful", False):  # ≤ 5.24; 5.25 rolls a recurrent cache back
        return f"{type(model).__name__} is stateful (its state cannot be rolled back)"
    if not model_kwargs.get("use_cache", True):
        return "use_cache=False"
    if static in ("static", "hybrid", "sliding_window"):
        return f"cache_implementation={static!r}"
    given = model_kwargs.get("cache", model_kwargs.get("past_key_values"))  # 5.24 renamed it
    if type(given).__name__ == "StaticCache":
        return "a StaticCache"
    if given is not None and hasattr(given, "get_seq_length") and given.get_seq_length() > 0:
        # Transformers 5.24's and 5.25's assisted decoding from a pre-filled cache returns another
        # output than plain decoding does (its own prompt lookup too): measured, tests/generation
        return "a pre-filled cache passed in"
    return None


class WidenedDraft(AssistedCandidateGenerator):
    """Transformers' assisted candidate generator, kept consistent with the candidates we
    actually propose: its draft mask, position ids and token type ids always cover the ids it
    is given (tokens proposed without a draft forward, the grammar's spelled-out runs, are
    covered also before the draft's first forward), and its cache is cropped to the ids it
    shares with the next round's sequence. Transformers crops by lengths (5.24: the sequence
    minus two; 5.25: the last drafted length), which assumes the candidates returned are the
    ones drafted; ours add spelled-out tokens around them and cut inadmissible ones, after
    which a length-based crop keeps keys and values of tokens the sequence does not hold."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cached: list[int] = []  # the ids whose keys and values the draft's cache holds

    def get_candidates(self, input_ids: Any, **kwargs: Any) -> tuple[Any, Any]:
        candidate_ids, logits = super().get_candidates(input_ids, **kwargs)
        cache = self.assistant_kwargs.get("cache")
        held = cache.get_seq_length() if cache is not None else 0
        self._cached = candidate_ids[0, :held].tolist()
        return candidate_ids, logits

    def _update_past_and_masks(self, input_ids: Any, *args: Any, **kw: Any) -> bool:
        cache = self.assistant_kwargs.get("cache")
        width = input_ids.shape[-1]
        if cache is not None:  # keep the longest prefix the sequence shares, less its last id
            ids, keep, cached = input_ids[0].tolist(), 0, self._cached
            while keep < min(len(cached), width - 1) and cached[keep] == ids[keep]:
                keep += 1
            # a count ≤ 0 (5.25 refuses sizes); crop(0) still trims a recurrent layer's states
            cache.crop(keep - cache.get_seq_length())
            self._cached = cached[:keep]
        decoder = self.assistant_model.config.is_encoder_decoder
        kwargs = _prepare_attention_mask(self.assistant_kwargs, width, decoder)
        kwargs = _prepare_position_ids(kwargs, width, decoder)
        self.assistant_kwargs = _prepare_token_type_ids(kwargs, width)
        return cache is not None


class _WithCandidateGenerator:
    """The target model, except that assisted decoding gets our candidate generator.

    A per-call view, so nothing on the model object changes (and concurrent calls don't race).
    """

    def __init__(self, model: Any, factory: Callable[..., Any]) -> None:
        self._model = model
        self._factory = factory

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._model(*args, **kwargs)

    def _get_candidate_generator(self, **kwargs: Any) -> Any:
        return self._factory(**kwargs)
