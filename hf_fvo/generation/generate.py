"""``hf_fvo.generate``: ``model.generate`` with the grammar and a Φ estimator wired in, plain or
speculative (FVO-Spec, with ``assistant_model=``)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationMixin, LogitsProcessorList

from hf_fvo.generation.processors import FVOLogitsProcessor
from hf_fvo.generation.speculative import GrammarAwareCandidateGenerator, SpeculationStats
from hf_fvo.grammar import Grammar
from hf_fvo.phi import PhiEstimator

__all__ = ["generate"]


def generate(
    model: Any,
    input_ids: Any = None,
    *,
    grammar: Grammar,
    phi: str | PhiEstimator = "onestep",
    assistant_model: Any = None,
    draft_phi: str | PhiEstimator | None = None,
    blind_draft: bool = False,
    num_assistant_tokens: int | None = None,
    **generate_kwargs: Any,
) -> Any:
    """Run ``model.generate`` so that it samples p_t·Φ̂_t on the grammar's admissible sets.

    With ``assistant_model`` this is FVO-Spec: Transformers' assisted generation with a
    :class:`~hf_fvo.generation.GrammarAwareCandidateGenerator` as the draft and the Φ̂ processor in
    the verifier, so sampling (``do_sample=True``) draws the same law as plain decoding with the
    same ``phi`` — μ* with ``"exact"`` — and greedy decoding returns the plain greedy output.

    Args:
        model: A Transformers causal LM.
        input_ids: The prompt (batch × length, left-padded for batches; batch 1 when drafting).
        grammar: The compiled grammar (built with ``vocab_size=model.config.vocab_size``).
        phi: ``"uniform"`` (μ_proj), ``"onestep"``, ``"onestep_true"``, ``"exact"`` (finite
            languages; μ*), or an estimator instance.
        assistant_model: A draft model sharing the tokenizer: turns on FVO-Spec.
        draft_phi: The draft's Φ̂: ``None`` (grammar mask only), ``"same"`` (the target's
            estimator), or an estimator name/instance evaluated on the draft's logits.
        blind_draft: Draft without the grammar (a baseline; the verifier stays constrained).
        num_assistant_tokens: Draft tokens per round (fixed); default: the draft's generation
            config (Transformers ignores this argument when passed to ``model.generate``).
        **generate_kwargs: Passed to ``model.generate``; ``max_new_tokens`` also bounds the
            completions Φ counts, and ``logits_processor`` entries run after the Φ processor.

    Returns:
        Whatever ``model.generate`` returns. With ``return_dict_in_generate=True`` the output also
        carries ``certificates``: one :class:`~hf_fvo.phi.Certificate` per sequence (per-step
        δ_t, Φ̄_t and the sequence bound Σ_t δ_t/(Φ̄_t − δ_t)); with a draft, also
        ``speculation``, a :class:`~hf_fvo.generation.SpeculationStats`.

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
    if assistant_model is None and (draft_phi is not None or blind_draft or num_assistant_tokens):
        raise ValueError("draft_phi, blind_draft and num_assistant_tokens need assistant_model")
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
    processors = LogitsProcessorList([processor, *extra])
    if assistant_model is None:
        out = model.generate(input_ids, logits_processor=processors, **generate_kwargs)
        return _with_certificates(out, processor, input_ids.shape[1])

    for key in ("tokenizer", "assistant_tokenizer"):
        if generate_kwargs.get(key) is not None:
            raise ValueError(f"FVO-Spec needs a draft with the target's tokenizer; drop {key}=")
    stats = SpeculationStats()

    def candidates(**kw: Any) -> GrammarAwareCandidateGenerator:
        return GrammarAwareCandidateGenerator(
            kw["input_ids"],
            assistant_model,
            kw["generation_config"],
            kw["model_kwargs"],
            kw.get("inputs_tensor"),
            kw["logits_processor"],
            draft_phi=draft_phi,
            blind=blind_draft,
            num_assistant_tokens=num_assistant_tokens,
            stats=stats,
        )

    streamer = generate_kwargs.get("streamer")

    def fvo_spec_decoding(
        model: Any,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: Any,
        generation_config: Any,
        inputs_tensor: torch.Tensor | None = None,
        **model_kwargs: Any,
    ) -> Any:
        return GenerationMixin._assisted_decoding(
            _WithCandidateGenerator(model, candidates),
            input_ids,
            logits_processor,
            stopping_criteria,
            generation_config,
            synced_gpus=False,
            streamer=streamer,
            inputs_tensor=inputs_tensor,
            assistant_model=assistant_model,
            **model_kwargs,
        )

    out = model.generate(
        input_ids,
        logits_processor=processors,
        assistant_model=assistant_model,
        custom_generate=fvo_spec_decoding,
        **generate_kwargs,
    )
    if not isinstance(out, torch.Tensor):
        out["speculation"] = stats
    return _with_certificates(out, processor, input_ids.shape[1])


def _with_certificates(out: Any, processor: FVOLogitsProcessor, prompt_length: int) -> Any:
    """Attach one fidelity certificate per returned sequence to a dict-style output."""
    if not isinstance(out, torch.Tensor):
        rows = out.sequences[:, prompt_length:].tolist()
        out["certificates"] = [processor.certificate(row) for row in rows]
    return out


class _WithCandidateGenerator:
    """The target model, except that assisted decoding gets our candidate generator.

    A per-call view, so nothing on the model object changes (and concurrent calls don't race).
    """

    def __init__(self, model: Any, factory: Any) -> None:
        self._model = model
        self._factory = factory

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._model(*args, **kwargs)

    def _get_candidate_generator(self, **kwargs: Any) -> GrammarAwareCandidateGenerator:
        return self._factory(**kwargs)
