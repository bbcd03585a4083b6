"""The options of one ``hf_fvo.generate`` call: what hf_fvo adds to ``model.generate``, checked
once, as one typed object the call's parts share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hf_fvo.errors import InvalidArgumentError, check_int
from hf_fvo.generation.particles import AutoParticles, auto_particles
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import require_grammar
from hf_fvo.phi import PhiEstimator

__all__ = ["PER_STEP_OUTPUTS", "GenerateOptions", "call_setting", "check_input_ids"]

# generate() arguments that ask for something per decoding step (they follow one draw)
PER_STEP_OUTPUTS = ("output_scores", "output_logits", "output_attentions",
                    "output_hidden_states", "streamer")  # fmt: skip


@dataclass(frozen=True)
class GenerateOptions:
    """:func:`hf_fvo.generate`'s own arguments (see there), checked when built.

    Raises:
        InvalidArgumentError: a malformed option, or options that do not combine (draft options
            without a draft model; particles with a draft).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.options import GenerateOptions
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
        >>> GenerateOptions(g, particles="auto").particles.min_ess
        8.0
        >>> GenerateOptions(g, blind_draft=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_fvo.errors.InvalidArgumentError: draft_phi, blind_draft and ... need assistant_model
    """

    grammar: Grammar
    phi: str | PhiEstimator = "uniform"
    prompt_length: int | None = None
    assistant_model: Any = None
    draft_phi: str | PhiEstimator | None = "auto"
    blind_draft: bool = False
    num_assistant_tokens: int | None = None
    grammar_draft: bool | None = None
    particles: int | str | AutoParticles | None = None
    check_tries: int = 8
    keep_greedy: bool = False

    def __post_init__(self) -> None:
        require_grammar(self.grammar)
        check_int("check_tries", self.check_tries, minimum=1)
        if not isinstance(self.keep_greedy, bool):
            raise InvalidArgumentError(
                f"keep_greedy must be True or False, got {self.keep_greedy!r}"
            )
        if self.keep_greedy and (self.assistant_model is not None or self.particles is not None):
            raise InvalidArgumentError(
                "keep_greedy is a decoder of its own (greedy decoding and beam search): it does "
                "not combine with assistant_model or particles"
            )
        drafting = self.draft_phi != "auto" or self.blind_draft or self.num_assistant_tokens
        if self.assistant_model is None and drafting:
            raise InvalidArgumentError(
                "draft_phi, blind_draft and num_assistant_tokens need assistant_model"
            )
        if self.grammar_draft is not None and not isinstance(self.grammar_draft, bool):
            raise InvalidArgumentError(
                f"grammar_draft must be True, False or None, got {self.grammar_draft!r}"
            )
        if self.particles is None:
            return
        object.__setattr__(self, "particles", auto_particles(self.particles))
        if self.assistant_model is not None or self.grammar_draft:
            raise InvalidArgumentError(
                "particles do not combine with assistant_model or grammar_draft=True: drop one"
            )

    def check_kwargs(self, generate_kwargs: dict[str, Any]) -> None:
        """Refuse ``model.generate`` arguments these options cannot serve (per-step outputs
        of particles, which return whole sequences)."""
        per_step = [k for k in PER_STEP_OUTPUTS if generate_kwargs.get(k)]
        if self.particles is not None and per_step:
            raise InvalidArgumentError(
                f"particles return whole sequences: drop {', '.join(per_step)}"
            )

    @property
    def draft_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`~hf_fvo.generation.GrammarAwareCandidateGenerator` these
        options set."""
        return {"draft_phi": self.draft_phi, "blind": self.blind_draft,
                "num_assistant_tokens": self.num_assistant_tokens,
                "grammar_runs": self.grammar_draft is not False}  # fmt: skip


def call_setting(model: Any, kwargs: dict[str, Any], name: str, default: Any = None) -> Any:
    """The generation setting ``name`` a ``generate(**kwargs)`` call decodes with: its keyword,
    else its ``generation_config``'s, else the model's; ``default`` where none sets it.

    Example:
        >>> from transformers import GenerationConfig
        >>> from hf_fvo.generation.options import call_setting
        >>> config = GenerationConfig(num_beams=4)
        >>> call_setting(None, {"generation_config": config}, "num_beams", 1)
        4
        >>> call_setting(None, {"generation_config": config, "num_beams": 2}, "num_beams", 1)
        2
        >>> call_setting(None, {}, "pad_token_id") is None
        True
    """
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    value = kwargs.get(name, getattr(config, name, default))
    return default if value is None else value


def check_input_ids(input_ids: Any) -> torch.Tensor:
    """``input_ids`` as a 2-D integer tensor, or a typed error saying how to make one.

    Example:
        >>> from hf_fvo.generation.options import check_input_ids
        >>> check_input_ids([1, 2])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_fvo.errors.InvalidArgumentError: input_ids must be a 2-D ... got list: ...
    """
    if input_ids is None:
        raise InvalidArgumentError("hf_fvo.generate needs input_ids (the prompt)")
    if not isinstance(input_ids, torch.Tensor):
        raise InvalidArgumentError(
            f"input_ids must be a 2-D torch.LongTensor (batch × length), got "
            f"{type(input_ids).__name__}: use torch.tensor([ids]) or tokenizer(..., "
            "return_tensors='pt').input_ids"
        )
    if input_ids.dim() != 2 or input_ids.shape[0] < 1:
        raise InvalidArgumentError(
            f"input_ids must be 2-D (batch × length), got shape {tuple(input_ids.shape)}: "
            "add the batch dimension with input_ids[None]"
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise InvalidArgumentError(
            f"input_ids must hold token ids (integers), got {input_ids.dtype}"
        )
    return input_ids
