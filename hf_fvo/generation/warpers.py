"""Transformers' sampling warpers (temperature, top-k, top-p…), in one table: the value of each
generation-config field that builds no warper. A draft sets them (the target's warpers act on
its scores once, not twice). Particles target the law the warped conditionals define, so they
refuse the processors whose scores depend on more than one row's prefix."""

from __future__ import annotations

from typing import Any

__all__ = ["NEUTRAL_WARPERS", "history_dependent", "neutral_warpers"]

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
# Transformers' processors whose scores are not a function of one row's prefix and p_t:
# each keeps state across calls or reads the batch's layout (→ the setting that builds it)
_HISTORY: dict[str, str] = {
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "ClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "SynthIDTextWatermarkLogitsProcessor": "watermarking_config",
    "DiaClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "DiaEOSDelayPatternLogitsProcessor": "a Dia model's delay pattern",
    "WhisperTimeStampLogitsProcessor": "Whisper's timestamps",
    "WhisperNoSpeechDetection": "Whisper's no-speech detection",
}


def neutral_warpers(config: Any) -> None:
    """Set every warper field ``config`` has to its neutral value (in place)."""
    for name, value in NEUTRAL_WARPERS.items():
        if hasattr(config, name):
            setattr(config, name, value)


def history_dependent(processors: Any) -> str:
    """The processors in ``processors`` whose scores depend on the calls before (their own
    cache or state) or on the batch's layout rather than on one row's prefix, in words; ``""``
    when there is none. Every other processor and warper is a fixed function of (prefix, p_t)
    at each step, so the product of its conditionals is a law over sequences.

    Example:
        >>> from transformers import TopPLogitsWarper
        >>> from transformers.generation.logits_process import (
        ...     UnbatchedClassifierFreeGuidanceLogitsProcessor)
        >>> from hf_fvo.generation.warpers import history_dependent
        >>> history_dependent([TopPLogitsWarper(0.9)])
        ''
        >>> history_dependent([UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, None)])
        'UnbatchedClassifierFreeGuidanceLogitsProcessor (guidance_scale)'
    """
    found = []
    for p in processors:
        name = type(p).__name__
        if name in _HISTORY:
            found.append(f"{name} ({_HISTORY[name]})")
    return ", ".join(found)
