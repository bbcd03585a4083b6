"""``hf_fvo.generate``: ``model.generate`` with the grammar and a Φ estimator wired in, plain or
speculative (FVO-Spec, with ``assistant_model=``).

Generation runs through Transformers' own decoding loops (sampling, greedy, beam search,
assisted decoding), entered through a ``custom_generate`` callable so that hf_fvo sees the
generation config *as Transformers prepared it*: the budget is whatever Transformers will stop
at (``max_new_tokens``, ``max_length``, a ``generation_config``, or its default), and the logits
processors it built are known by name when one of them conflicts with the grammar.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationMixin, LogitsProcessorList
from transformers.generation.utils import GENERATION_MODES_MAPPING

from hf_fvo.errors import (
    ConstraintConflictError,
    EmptyLanguageError,
    InvalidArgumentError,
    TokenizerError,
    check_int,
)
from hf_fvo.generation.grammar_draft import GrammarCandidateGenerator, verifier_temperature
from hf_fvo.generation.processors import FVOLogitsProcessor, left_padding
from hf_fvo.generation.speculative import (
    GrammarAwareCandidateGenerator,
    SpeculationStats,
    model_vocab_size,
)
from hf_fvo.grammar import Grammar
from hf_fvo.phi import PhiEstimator

__all__ = ["generate"]

# generate() options that build a processor able to remove tokens before the grammar's runs
_UPSTREAM_OPTIONS = {
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "EncoderNoRepeatNGramLogitsProcessor": "encoder_no_repeat_ngram_size",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "MinLengthLogitsProcessor": "min_length",
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
}


def generate(
    model: Any,
    input_ids: Any = None,
    *,
    grammar: Grammar,
    phi: str | PhiEstimator = "uniform",
    prompt_length: int | None = None,
    assistant_model: Any = None,
    draft_phi: str | PhiEstimator | None = "auto",
    blind_draft: bool = False,
    num_assistant_tokens: int | None = None,
    grammar_draft: bool | None = None,
    **generate_kwargs: Any,
) -> Any:
    """Run ``model.generate`` so that it samples p_t·Φ̂_t on the grammar's admissible sets.

    With ``assistant_model`` this is FVO-Spec: Transformers' assisted generation with a
    :class:`~hf_fvo.generation.GrammarAwareCandidateGenerator` as the draft and the Φ̂ processor in
    the verifier, so sampling (``do_sample=True``) draws the same law as plain decoding with the
    same ``phi`` — μ* with ``"exact"`` — and greedy decoding returns the plain greedy output.

    Args:
        model: A Transformers causal LM.
        input_ids: The prompt, a 2-D ``torch.LongTensor`` (batch × length, left-padded with an
            ``attention_mask`` for batches; with a draft, rows run one at a time and are
            stacked again, each sampling its own law).
        grammar: The compiled grammar (built with ``vocab_size=model.config.vocab_size``).
        phi: ``"uniform"`` (μ_proj, the default: the one estimator never worse than masking;
            ``"onestep"`` drove most outputs on open real schemas to the token cap, see
            docs/concepts.md), ``"onestep"``, ``"onestep_true"``, ``"exact"`` (finite languages;
            μ*), or an estimator instance.
        prompt_length: Columns of ``input_ids`` that are prompt; the grammar's text starts
            after them. Default: all of them. To continue a partial output, pass the prompt and
            the partial output as ``input_ids`` and the prompt's width here: the grammar resumes
            from the partial output, and ``max_new_tokens`` counts the new tokens only.
        assistant_model: A draft model sharing the tokenizer: turns on FVO-Spec.
        draft_phi: The draft's Φ̂: ``"auto"`` (default: the target's estimator where it is
            cheap at draft positions, i.e. runs no forwards of its own or is an exact table;
            else the mask only), ``None`` (grammar mask only), ``"same"`` (the target's
            estimator), or an estimator name/instance evaluated on the draft's logits.
        blind_draft: Draft without the grammar (a baseline; the verifier stays constrained).
        num_assistant_tokens: Draft tokens per round (fixed); default: the draft's generation
            config (Transformers ignores this argument when passed to ``model.generate``).
        grammar_draft: Propose the text the grammar spells out (keys, punctuation, the tail of
            an enum value) as free drafts that cost no draft forward
            (:mod:`hf_fvo.generation.grammar_draft`); the law sampled is unchanged, the random
            draws are not (a seed gives another sample of the same law than plain decoding).
            With ``assistant_model`` it is on unless ``False``. Without one, ``None`` (default)
            runs assisted decoding with the grammar as the only draft for one sequence without
            per-step outputs (``output_scores``, a streamer…) or beams, on a model and cache
            assisted decoding supports, and plain decoding otherwise; ``True`` also drafts
            batches, row by row; ``False`` never drafts.
        **generate_kwargs: Passed to ``model.generate``; the budget Transformers uses
            (``max_new_tokens``, ``max_length``, ``generation_config``, or its default of 20
            new tokens) also bounds the completions Φ counts; ``logits_processor`` entries run
            after the Φ processor; a ``tokenizer`` is checked against the grammar's.

    Returns:
        Whatever ``model.generate`` returns. With ``return_dict_in_generate=True`` the output also
        carries ``certificates``: one :class:`~hf_fvo.phi.Certificate` per sequence (per-step
        δ_t, Φ̄_t and the sequence bound Σ_t δ_t/(Φ̄_t − δ_t)); with a draft, also
        ``speculation``, a :class:`~hf_fvo.generation.SpeculationStats`.

    Raises:
        InvalidArgumentError: ``input_ids`` is not a 2-D integer tensor, another argument is
            malformed, or speculation was asked for where assisted decoding cannot run (a
            stateful model, ``use_cache=False``, a static cache).
        TokenizerError: the grammar was compiled for another tokenizer (vocabulary size, or the
            ``tokenizer`` passed).
        EmptyLanguageError: no member fits the budget (its shortest needs more tokens).
        ConstraintConflictError: another option removes every admissible token (a minimum
            length beyond the longest member, EOS suppressed, no_repeat_ngram_size…).
        OutOfGrammarError: the continuation after ``prompt_length`` leaves the grammar.

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
    input_ids = _check_input_ids(input_ids)
    if not isinstance(grammar, Grammar):
        raise InvalidArgumentError(f"grammar must be an hf_fvo.Grammar, got {type(grammar)}")
    drafting = draft_phi != "auto" or blind_draft or num_assistant_tokens
    if assistant_model is None and drafting:
        raise InvalidArgumentError(
            "draft_phi, blind_draft and num_assistant_tokens need assistant_model"
        )
    if grammar_draft is not None and not isinstance(grammar_draft, bool):
        raise InvalidArgumentError(
            f"grammar_draft must be True, False or None, got {grammar_draft!r}"
        )
    speculative = assistant_model is not None or bool(grammar_draft)
    copies = generate_kwargs.get("num_return_sequences") or 1
    # grammar-only drafts by default where assisted decoding serves the call as plain decoding
    # would: one sequence, no per-step outputs (checked again against the merged config below)
    by_default = (
        grammar_draft is None and assistant_model is None and input_ids.shape[0] == 1
        and copies == 1 and not any(generate_kwargs.get(k) for k in _PER_STEP_OUTPUTS)
        and not getattr(getattr(model, "config", None), "is_encoder_decoder", False)
    )  # fmt: skip
    if speculative and (input_ids.shape[0] > 1 or copies > 1):
        return _row_by_row(
            model, input_ids, grammar=grammar, phi=phi, prompt_length=prompt_length,
            assistant_model=assistant_model, draft_phi=draft_phi, blind_draft=blind_draft,
            num_assistant_tokens=num_assistant_tokens, grammar_draft=grammar_draft,
            **generate_kwargs,
        )  # fmt: skip
    width = input_ids.shape[1]
    start = width if prompt_length is None else check_int("prompt_length", prompt_length)
    if start > width:
        raise InvalidArgumentError(f"prompt_length={start} exceeds the input's width {width}")
    _check_vocabulary(model, grammar, generate_kwargs.get("tokenizer"))
    attention_mask = generate_kwargs.get("attention_mask")
    if attention_mask is None:  # an unpadded prompt: say so, Transformers cannot infer it
        attention_mask = generate_kwargs["attention_mask"] = torch.ones_like(input_ids)
    processor = FVOLogitsProcessor(
        grammar, phi=phi, model=model, prompt_length=start, attention_mask=attention_mask
    )
    processor.input_length = width  # the continuation, if any, is checked against the grammar
    states = [processor.state_of(tuple(row[start:])) for row in input_ids.tolist()]
    extra = generate_kwargs.pop("logits_processor", None) or []
    processors = LogitsProcessorList([processor, *extra])
    streamer = generate_kwargs.get("streamer")
    speculative = speculative or by_default
    stats = SpeculationStats() if speculative else None
    drafted: list[bool] = []  # whether assisted decoding ran
    if assistant_model is not None:
        for key in ("tokenizer", "assistant_tokenizer"):
            if generate_kwargs.get(key) is not None:
                raise InvalidArgumentError(
                    f"FVO-Spec needs a draft with the target's tokenizer; drop {key}="
                )

    def candidates(**kw: Any) -> Any:
        if assistant_model is None:
            free = GrammarCandidateGenerator(processor, model_vocab_size(model) or
                                             grammar.vocab_size, stats=stats)  # fmt: skip
            free.max_length = kw["generation_config"].max_length
            free.temperature = verifier_temperature(kw["generation_config"])
            return free
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
            grammar_runs=grammar_draft is not False,
        )

    def fvo_decoding(
        model: Any,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: Any,
        generation_config: Any,
        inputs_tensor: torch.Tensor | None = None,
        **model_kwargs: Any,
    ) -> Any:
        processor.input_length = input_ids.shape[1]
        processor.max_new_tokens = generation_config.max_length - input_ids.shape[1]
        processor.beam_search = (generation_config.num_beams or 1) > 1
        upstream = _upstream_of(processor, logits_processor)
        _check_feasible(grammar, states, processor.max_new_tokens, generation_config, width)
        try:
            beams = (generation_config.num_beams or 1) > 1
            why_not = _why_not_assisted(model, generation_config, model_kwargs)
            plain = by_default and (
                (generation_config.num_return_sequences or 1) > 1
                or any(getattr(generation_config, k, None) for k in _PER_STEP_OUTPUTS)
                or why_not is not None
            )
            if not speculative or (assistant_model is None and (beams or plain)):
                return _decoding_method(generation_config)(
                    model, input_ids, logits_processor, stopping_criteria, generation_config,
                    **({"streamer": streamer} if streamer is not None else {}), **model_kwargs,
                )  # fmt: skip
            if why_not is not None:
                raise InvalidArgumentError(
                    f"speculative decoding (assistant_model, grammar_draft=True) cannot run with "
                    f"{why_not}: Transformers' assisted decoding rolls the cache back"
                )
            drafted.append(True)
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
        except ConstraintConflictError as exc:
            if not upstream:
                raise
            raise ConstraintConflictError(
                f"{exc}. Processors that ran before the grammar's in this call: {upstream}"
            ) from exc

    out = model.generate(
        input_ids,
        logits_processor=processors,
        assistant_model=assistant_model,
        custom_generate=fvo_decoding,
        **generate_kwargs,
    )
    if drafted and not isinstance(out, torch.Tensor):
        out["speculation"] = stats
    return _with_certificates(out, processor, start, width - start)


_PER_STEP_OUTPUTS = ("output_scores", "output_logits", "output_attentions",
                     "output_hidden_states", "streamer")  # fmt: skip


def _why_not_assisted(model: Any, config: Any, model_kwargs: dict) -> str | None:
    """Why Transformers' assisted decoding cannot run with this model and cache (it refuses
    stateful models, ``use_cache=False`` and static caches), or ``None``."""
    static = getattr(config, "cache_implementation", None)
    if getattr(model, "_is_stateful", False):
        return f"{type(model).__name__} is stateful (its state cannot be rolled back)"
    if not model_kwargs.get("use_cache", True):
        return "use_cache=False"
    if static in ("static", "hybrid", "sliding_window"):
        return f"cache_implementation={static!r}"
    given = model_kwargs.get("cache", model_kwargs.get("past_key_values"))  # 5.24 renamed it
    if type(given).__name__ == "StaticCache":
        return "a StaticCache"
    return None


def _row_by_row(model: Any, input_ids: torch.Tensor, **kwargs: Any) -> Any:
    """Speculative decoding of a batch (or of several samples per prompt): Transformers'
    assisted decoding is batch-1, so each row (and each of its ``num_return_sequences``) runs
    alone, from its own unpadded prompt, and samples its own law; the outputs are stacked with
    the input's left padding and right-padded with ``pad_token_id``."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    per_step = [k for k in _PER_STEP_OUTPUTS if kwargs.get(k)]
    if per_step:
        raise InvalidArgumentError(
            f"{', '.join(per_step)} with speculative decoding needs a batch of one prompt and "
            "num_return_sequences=1 (batches run row by row, see hf_fvo.generate)"
        )
    mask = kwargs.pop("attention_mask", None)
    pads = [0] * input_ids.shape[0] if mask is None else left_padding(mask)
    copies = check_int("num_return_sequences", kwargs.pop("num_return_sequences", 1) or 1,
                       minimum=1)  # fmt: skip
    prompt_length = kwargs.pop("prompt_length", None)
    as_dict = bool(kwargs.get("return_dict_in_generate"))
    config = kwargs.get("generation_config") or model.generation_config
    pad = kwargs.get("pad_token_id", config.pad_token_id)
    if pad is None:
        pad = kwargs["grammar"].eos_token_id
    rows, certificates, stats = [], [], SpeculationStats()
    for r, skip in enumerate(pads):
        start = None if prompt_length is None else prompt_length - skip
        for _ in range(copies):
            out = generate(model, input_ids[r : r + 1, skip:], prompt_length=start, **kwargs)
            seq = out.sequences if as_dict else out
            rows.append(torch.cat([input_ids[r, :skip], seq[0].to(input_ids.device)]))
            if as_dict:
                certificates += out["certificates"]
                for name in ("proposed", "drafted", "accepted", "emitted", "free"):
                    getattr(stats, name).extend(getattr(out["speculation"], name))
    width = max(len(row) for row in rows)
    sequences = torch.full((len(rows), width), int(pad), dtype=input_ids.dtype)
    for i, row in enumerate(rows):
        sequences[i, : len(row)] = row
    if not as_dict:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["certificates"] = certificates
    out["speculation"] = stats
    return out


def _check_input_ids(input_ids: Any) -> torch.Tensor:
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


def _check_vocabulary(model: Any, grammar: Grammar, tokenizer: Any) -> None:
    size = model_vocab_size(model)
    if size is not None and size < grammar.vocab_size:
        raise TokenizerError(
            f"the model scores {size} token ids but {grammar.source} was compiled for "
            f"{grammar.vocab_size}: it belongs to another tokenizer (compile the grammar with "
            "this model's tokenizer and vocab_size=model.config.vocab_size)"
        )
    if tokenizer is not None:
        grammar.check_tokenizer(tokenizer)


def _check_feasible(
    grammar: Grammar, states: list[Any], budget: int, config: Any, width: int
) -> None:
    """Refuse, before any forward, a budget or option no member of the language can satisfy."""
    if budget < 1:
        raise EmptyLanguageError(
            f"the budget leaves {budget} new tokens (max_length={config.max_length}, input "
            f"width {width}); even EOS needs one"
        )
    for state in dict.fromkeys(states):  # rows sharing a state are checked once
        if state is None:
            continue
        need = grammar.min_tokens_to_accept(state)
        if need + 1 > budget:
            raise EmptyLanguageError(
                f"the shortest member of {grammar.source} needs {need} tokens plus EOS, but the "
                f"budget is {budget} new tokens (max_new_tokens, or max_length minus the input's "
                f"{width}): raise max_new_tokens"
            )
        min_new = max(config.min_new_tokens or 0, (config.min_length or 0) - width)
        longest = grammar.max_tokens_to_accept(state)
        if min_new and longest is not None and longest < min_new:
            raise ConstraintConflictError(
                f"min_new_tokens/min_length asks for {min_new} tokens before EOS but the longest "
                f"member of {grammar.source} has {longest}: drop the minimum length"
            )
        if min_new and min_new + 1 > budget:
            raise ConstraintConflictError(
                f"min_new_tokens/min_length asks for {min_new} tokens before EOS, which leaves "
                f"no room for EOS within the budget of {budget}"
            )
    eos = set(grammar.eos_token_ids)
    banned = set(config.suppress_tokens or ())
    banned |= {w[0] for w in (config.bad_words_ids or ()) if len(w) == 1}
    if eos <= banned:
        raise ConstraintConflictError(
            f"suppress_tokens/bad_words_ids ban every EOS id {sorted(eos)}: no member of "
            f"{grammar.source} can be ended"
        )


def _upstream_of(processor: FVOLogitsProcessor, processors: LogitsProcessorList) -> str:
    """The processors Transformers built that run before the grammar's, by generate() option."""
    names = []
    for p in processors:
        if p is processor:
            break
        kind = type(p).__name__
        names.append(f"{kind} ({_UPSTREAM_OPTIONS[kind]}=)" if kind in _UPSTREAM_OPTIONS else kind)
    return ", ".join(names)


def _decoding_method(config: Any) -> Any:
    mode = config.get_generation_mode()
    name = GENERATION_MODES_MAPPING.get(mode, "")
    if "/" in name or not hasattr(GenerationMixin, name):
        raise InvalidArgumentError(
            f"hf_fvo.generate supports sampling, greedy, beam search and assisted decoding; "
            f"{mode.value} is not among them in this Transformers version"
        )
    return getattr(GenerationMixin, name)


def _with_certificates(
    out: Any, processor: FVOLogitsProcessor, prompt_length: int, skip: int
) -> Any:
    """Attach one fidelity certificate per returned sequence to a dict-style output."""
    if not isinstance(out, torch.Tensor):
        rows = out.sequences[:, prompt_length:].tolist()
        out["certificates"] = [processor.certificate(row, skip) for row in rows]
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
