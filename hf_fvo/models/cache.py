"""The key/value cache across Transformers 5.x: 5.24 renamed ``past_key_values`` to ``cache``
(forward argument and output field; the old name warns and goes away in 5.40). hf_fvo passes
and reads it under whichever name the installed model speaks."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cache_argument", "output_cache"]


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(...)``: ``cache`` where its forward takes it, else
    ``past_key_values``.

    Example:
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.models.cache import cache_argument
        >>> list(cache_argument(tiny_random_llama(16), None)) in (["cache"], ["past_key_values"])
        True
    """
    forward = getattr(model, "forward", model)
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        params = {}
    return {"cache" if "cache" in params else "past_key_values": cache}


def output_cache(out: Any) -> Any:
    """The cache a forward returned (``None`` without one), under either field name."""
    for name in ("cache", "past_key_values"):
        if isinstance(out, dict) and name in out:
            return out[name]
    return getattr(out, "past_key_values", None)
