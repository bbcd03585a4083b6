"""Transformers' sampling warpers (temperature, top-k, top-p…), in one table: the value of each
generation-config field that builds no warper. A draft sets them (the target's warpers act on
its scores once, not twice); particles refuse the ones that truncate p_t."""

from __future__ import annotations

from typing import Any

__all__ = ["NEUTRAL_WARPERS", "neutral_warpers", "truncation"]

# generation-config field → the value at which Transformers builds no warper from it (None
# would be refilled from the global defaults where one exists: top_k=50)
NEUTRAL_WARPERS: dict[str, Any] = {
    "temperature": 1.0,
    "top_h": None,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}
# other values that keep every token (min_p = 0 builds a warper that cuts nothing)
_ALSO_UNCUT: dict[str, Any] = {"min_p": 0.0}


def neutral_warpers(config: Any) -> None:
    """Set every warper field ``config`` has to its neutral value (in place)."""
    for name, value in NEUTRAL_WARPERS.items():
        if hasattr(config, name):
            setattr(config, name, value)


def truncation(config: Any) -> str:
    """The warpers ``config`` turns on that cut tokens off p_t (``top_k=50``, ``top_h=0.9``…),
    in words; ``""`` when none does (temperature reshapes p_t but cuts nothing).

    Example:
        >>> from transformers import GenerationConfig
        >>> from hf_fvo.generation.warpers import truncation
        >>> truncation(GenerationConfig(do_sample=True, top_k=0, top_p=0.9, min_p=0.0,
        ...                         temperature=0.7))
        'top_p=0.9'
        >>> truncation(GenerationConfig(do_sample=True, top_k=0, top_h=0.5))
        'top_h=0.5'
    """
    on = []
    for name, neutral in NEUTRAL_WARPERS.items():
        value = getattr(config, name, None)
        if name == "temperature" or value is None or value == neutral:
            continue
        if name in _ALSO_UNCUT and value == _ALSO_UNCUT[name]:
            continue
        on.append(f"{name}={value}")
    return ", ".join(on)
