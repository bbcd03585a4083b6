"""``hf_fvo.generate``: ``model.generate`` with the grammar and a Φ estimator wired in, plain or
speculative (FVO-Spec, with ``assistant_model=``).

Generation runs through Transformers' own decoding loops (sampling, greedy, beam search,
assisted decoding), entered through a ``custom_generate`` callable so that hf_fvo sees the
generation config *as Transformers prepared it*: the budget is whatever Transformers will stop
at (``max_new_tokens``, ``max_length``, a ``generation_config``, or its default), and the logits
processors it built are known by name when one of them conflicts with the grammar.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.errors import ConstraintConflictError, InvalidArgumentError, check_int
from hf_fvo.generation.batches import row_by_row
from hf_fvo.generation.drafts import (
    SPLITS_KEPT,
    GrammarCandidateGenerator,
    SpeculationStats,
    verifier_temperature,
)
from hf_fvo.generation.feasibility import check_feasible
from hf_fvo.generation.likeliest import keep_greedy as keep_greedy_decode
from hf_fvo.generation.loops import assisted_decoding, decoding_loop, why_not_assisted
from hf_fvo.generation.mode import DecodingRequest, decoding_mode
from hf_fvo.generation.options import (
    PER_STEP_OUTPUTS,
    GenerateOptions,
    call_setting,
    check_input_ids,
)
from hf_fvo.generation.particle_loop import particle_decode
from hf_fvo.generation.particles import AutoParticles, ParticleReport
from hf_fvo.generation.prefill import prompt_cache
from hf_fvo.generation.processors import FVOLogitsProcessor, vocabulary_mismatch
from hf_fvo.generation.redraws import redraw_failed
from hf_fvo.generation.speculative import GrammarAwareCandidateGenerator, model_vocab_size
from hf_fvo.grammar import Grammar
from hf_fvo.models.cache import cache_argument
from hf_fvo.models.memory import model_memory
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
    particles: int | str | AutoParticles | None = None,
    check_tries: int = 8,
    keep_greedy: bool = False,
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
        phi: An estimator name from :data:`hf_fvo.phi.ESTIMATORS` — ``"uniform"`` (μ_proj, the
            default: the one estimator never worse than masking; ``"onestep"`` drove most
            outputs on open real schemas to the token cap, see docs/concepts.md),
            ``"onestep"``, ``"onestep_true"``, ``"exact"`` (finite languages, or any grammar
            under a Markov LM; μ*), ``"exact_markov"``, ``"rollout"``, ``"gated"``,
            ``"learned"`` — or an estimator instance. A name is resolved by
            :func:`hf_fvo.phi.make_estimator`, which keeps the estimator on ``model``: the next
            call with the same name and grammar reuses its tables. Under beam search
            (``num_beams``) a running beam is ranked by log p(prefix) + log Φ̂ (a look-ahead;
            masking: log p(prefix)) and a finished one by log p(x).
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
            (:mod:`hf_fvo.generation.drafts`); the law sampled is unchanged, the random
            draws are not (a seed gives another sample of the same law than plain decoding).
            With ``assistant_model`` it is on unless ``False``. Without one, ``None`` (default)
            runs assisted decoding with the grammar as the only draft for one sequence without
            per-step outputs (``output_scores``, a streamer…) or beams, on a model and cache
            assisted decoding supports, and plain decoding otherwise; ``True`` also drafts
            batches, row by row; ``False`` never drafts
            (:func:`~hf_fvo.generation.mode.decoding_mode` decides).
        particles: N: sample by Φ̂-twisted sequential Monte Carlo
            (:func:`~hf_fvo.generation.particles.sample_particles`): per prompt, N particles
            propose from p_t·Φ̂_t on the admissible sets, are weighted by p/q and resampled when
            their effective sample size falls below N/2, and each output is drawn from the final
            weighted set. The set targets μ*_B exactly for every ``phi`` (``"uniform"``: the
            masked proposal); Φ̂ decides how many particles suffice. Needs ``do_sample=True``;
            not with a draft model, beams or per-step outputs. p_t is the model's law after the
            call's other processors and warpers (temperature, top-k, top-p…, penalties): the
            target is then q(x)·1[x ∈ L_B]/Z with q the product of those conditionals, what
            unconstrained sampling with the same settings draws, restricted to the language
            (Transformers' default ``top_k=50`` is off unless set). A particle that fails
            the grammar's final check (:attr:`Grammar.checked`) gets weight 0. ``"auto"``
            (or an :class:`~hf_fvo.generation.particles.AutoParticles`): runs of 8, 16, …
            particles, pooled, until their smallest effective sample sizes add up to 8
            (at most 128 particles in one run); the report's ``runs`` say what ran.
        check_tries: Draws per returned sequence when the grammar leaves constraints to a final
            check (:attr:`Grammar.checked`; ``uniqueItems`` over unbounded items, say): an
            output that fails it is redrawn from its prompt, so each sequence is a draw of
            the masked law conditioned on passing (rejection sampling); after
            ``check_tries`` failed draws :class:`~hf_fvo.errors.CheckFailedError` names the
            constraint. Greedy and beam search are deterministic, and per-step outputs
            (scores, a streamer) follow one draw: one try there. The draws each row took are in
            ``out["draws"]`` (dict outputs).
        **generate_kwargs: Passed to ``model.generate``; the budget Transformers uses
            (``max_new_tokens``, ``max_length``, ``generation_config``, or its default of 20
            new tokens) also bounds the completions Φ counts; ``logits_processor`` entries run
            after the Φ processor; a ``tokenizer`` is checked against the grammar's.

    Returns:
        Whatever ``model.generate`` returns. With ``return_dict_in_generate=True`` the output also
        carries ``certificates``: one :class:`~hf_fvo.phi.Certificate` per sequence (per-step
        δ_t, Φ̄_t and the sequence bound Σ_t δ_t/(Φ̄_t − δ_t)); with a draft, also
        ``speculation``, a :class:`~hf_fvo.generation.SpeculationStats`. With ``particles``,
        ``particles`` instead of ``certificates``: one
        :class:`~hf_fvo.generation.particles.ParticleReport` per sequence (log Ẑ, the ESS per
        step, the resamplings of the run it was drawn from).

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
        CheckFailedError: every draw of a sequence failed the grammar's final check.

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
    input_ids = check_input_ids(input_ids)
    options = GenerateOptions(
        grammar, phi, prompt_length, assistant_model, draft_phi, blind_draft,
        num_assistant_tokens, grammar_draft, particles, check_tries, keep_greedy,
    )  # fmt: skip
    if keep_greedy:
        out = keep_greedy_decode(
            lambda ids, kw, draft: _generate(model, ids, replace(options, grammar_draft=draft), kw),
            model, input_ids, generate_kwargs, grammar_draft=grammar_draft,
            eos_token_ids=grammar.eos_token_ids,
            pad_token_id=call_setting(model, generate_kwargs, "pad_token_id", grammar.eos_token_id),
            vocab_size=model_vocab_size(model) or grammar.vocab_size,
        )  # fmt: skip
    else:
        out = _generate(model, input_ids, options, generate_kwargs)
    if not grammar.checked or options.particles is not None:  # particles weigh the check
        return out

    def again(row: torch.Tensor, kwargs: dict[str, Any]) -> Any:
        return _generate(model, row, options, kwargs)

    return redraw_failed(again, model, input_ids, out, options, generate_kwargs)


def _generate(
    model: Any, input_ids: torch.Tensor, options: GenerateOptions, generate_kwargs: dict
) -> Any:
    """:func:`generate` without the redraws of a final check."""
    kwargs = dict(generate_kwargs)  # the call's own dict is left as given (redraws reuse it)
    options.check_kwargs(kwargs)
    if options.particles is not None:
        config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        if "top_k" not in kwargs and getattr(config, "top_k", None) is None:
            kwargs["top_k"] = 0  # Transformers' own default (50) would truncate p_t
    request = DecodingRequest(
        draft_model=options.assistant_model is not None,
        grammar_draft=options.grammar_draft,
        rows=input_ids.shape[0],
        copies=kwargs.get("num_return_sequences") or 1,
        per_step=tuple(k for k in PER_STEP_OUTPUTS if kwargs.get(k)),
        encoder_decoder=getattr(getattr(model, "config", None), "is_encoder_decoder", False),
    )
    if options.particles is None and decoding_mode(request) == "row_by_row":
        return row_by_row(partial(_generate, model), model, input_ids, options, kwargs)
    grammar = options.grammar
    width = input_ids.shape[1]
    start = width if options.prompt_length is None else options.prompt_length
    start = check_int("prompt_length", start)
    if start > width:
        raise InvalidArgumentError(f"prompt_length={start} exceeds the input's width {width}")
    _check_tokenizers(model, grammar, options.assistant_model, kwargs)
    if kwargs.get("attention_mask") is None:  # unpadded: Transformers cannot infer it
        kwargs["attention_mask"] = torch.ones_like(input_ids)
    processor = FVOLogitsProcessor(grammar, phi=options.phi, model=model, prompt_length=start,
                                   attention_mask=kwargs["attention_mask"])  # fmt: skip
    processor.tracker.input_length = width  # a continuation, if any, is checked against it
    call = _Call(
        processor, request, input_ids, options,
        width=model_vocab_size(model) or grammar.vocab_size,
        splits=model_memory(model, "splits", SPLITS_KEPT), streamer=kwargs.get("streamer"),
    )  # fmt: skip
    _read_prompt_once(model, input_ids, options, kwargs)
    extra = kwargs.pop("logits_processor", None) or []
    out = model.generate(
        input_ids,
        logits_processor=LogitsProcessorList([processor, *extra]),
        assistant_model=options.assistant_model,
        custom_generate=call.decode,
        **kwargs,
    )
    if call.drafted and not isinstance(out, torch.Tensor):
        out["speculation"] = call.stats
    if options.particles is not None:
        if not isinstance(out, torch.Tensor):
            out["particles"] = call.reports
        return out
    return _with_certificates(out, processor, start, width - start)


class _Call:
    """One ``hf_fvo.generate`` call as Transformers calls it back: :meth:`decode` is the
    ``custom_generate`` loop (it sees the generation config as Transformers prepared it, so the
    budget and the mode are decided there), :meth:`candidates` the candidate generator
    assisted decoding asks for."""

    def __init__(
        self,
        processor: FVOLogitsProcessor,
        request: DecodingRequest,
        input_ids: torch.Tensor,
        options: GenerateOptions,
        *,
        width: int,
        splits: Any,
        streamer: Any,
    ) -> None:
        self.processor = processor
        self.particles: int | AutoParticles | None = options.particles
        self.reports: list[ParticleReport] = []
        self.request = request
        self.input_width = input_ids.shape[1]
        self.vocab_width = width  # the target's logits width
        start = processor.tracker.prompt_length
        self.states = [processor.tracker.state(tuple(row[start:])) for row in input_ids.tolist()]
        self.splits = splits
        self.streamer = streamer
        self.assistant_model = options.assistant_model
        self.draft_kwargs = options.draft_kwargs
        self.stats = SpeculationStats()
        self.drafted = False  # whether assisted decoding ran

    def decode(
        self,
        model: Any,
        input_ids: torch.LongTensor,
        logits_processor: LogitsProcessorList,
        stopping_criteria: Any,
        generation_config: Any,
        inputs_tensor: torch.Tensor | None = None,
        **model_kwargs: Any,
    ) -> Any:
        processor, rows = self.processor, self.processor.tracker
        rows.input_length = input_ids.shape[1]
        rows.max_new_tokens = generation_config.max_length - input_ids.shape[1]
        processor.beam_search = (generation_config.num_beams or 1) > 1
        upstream = _upstream_of(processor, logits_processor)
        check_feasible(processor.grammar, self.states, rows.max_new_tokens, generation_config,
                       self.input_width)  # fmt: skip
        if self.particles is not None:
            out, self.reports = particle_decode(
                model, input_ids, logits_processor, generation_config, model_kwargs,
                processor=processor, particles=self.particles,
            )  # fmt: skip
            return out
        asked = {k for k in PER_STEP_OUTPUTS if getattr(generation_config, k, None)}
        mode = decoding_mode(replace(
            self.request,
            copies=generation_config.num_return_sequences or 1,
            per_step=tuple(sorted(asked | set(self.request.per_step))),
            beams=generation_config.num_beams or 1,
            why_not_assisted=why_not_assisted(model, generation_config, model_kwargs),
        ))  # fmt: skip
        streamer = {"streamer": self.streamer} if self.streamer is not None else {}
        try:
            if mode == "plain":
                return decoding_loop(generation_config)(
                    model, input_ids, logits_processor, stopping_criteria, generation_config,
                    **streamer, **model_kwargs,
                )  # fmt: skip
            self.drafted = True
            return assisted_decoding(
                model, self.candidates, input_ids, logits_processor, stopping_criteria,
                generation_config, synced_gpus=False, streamer=self.streamer,
                inputs_tensor=inputs_tensor, assistant_model=self.assistant_model, **model_kwargs,
            )  # fmt: skip
        except ConstraintConflictError as exc:
            if not upstream:
                raise
            raise ConstraintConflictError(
                f"{exc}. Processors that ran before the grammar's in this call: {upstream}"
            ) from exc

    def candidates(self, **kw: Any) -> Any:
        config = kw["generation_config"]
        if self.assistant_model is None:
            return GrammarCandidateGenerator(
                self.processor, self.vocab_width, stats=self.stats, splits=self.splits,
                max_length=config.max_length, temperature=verifier_temperature(config),
            )  # fmt: skip
        return GrammarAwareCandidateGenerator(
            kw["input_ids"], self.assistant_model, config, kw["model_kwargs"],
            kw.get("inputs_tensor"), kw["logits_processor"], stats=self.stats,
            splits=self.splits, **self.draft_kwargs,
        )  # fmt: skip


def _read_prompt_once(
    model: Any, input_ids: torch.Tensor, options: GenerateOptions, kwargs: dict[str, Any]
) -> None:
    """For beam search, the prompt's cache read once and copied per beam into ``kwargs``
    (:mod:`hf_fvo.generation.prefill`), unless the call brings a cache or cannot use one."""
    beams = call_setting(model, kwargs, "num_beams", 1)
    if (
        beams < 2 or options.assistant_model is not None or options.particles is not None
        or kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None
        or call_setting(model, kwargs, "use_cache", True) is False
        or call_setting(model, kwargs, "cache_implementation") is not None
    ):  # fmt: skip
        return
    cache = prompt_cache(model, input_ids, kwargs.get("attention_mask"))
    if cache is not None:
        cache.batch_repeat_interleave(beams)
        kwargs.update(cache_argument(model, cache))


def _check_tokenizers(
    model: Any, grammar: Grammar, assistant_model: Any, generate_kwargs: dict[str, Any]
) -> None:
    """The model scores the grammar's token ids, a ``tokenizer`` passed is the grammar's, and a
    draft shares the target's tokenizer."""
    mismatch = vocabulary_mismatch(model_vocab_size(model), grammar, "the model")
    if mismatch is not None:
        raise mismatch
    if generate_kwargs.get("tokenizer") is not None:
        grammar.check_tokenizer(generate_kwargs["tokenizer"])
    if assistant_model is not None:
        for key in ("tokenizer", "assistant_tokenizer"):
            if generate_kwargs.get(key) is not None:
                raise InvalidArgumentError(
                    f"FVO-Spec needs a draft with the target's tokenizer; drop {key}="
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


def _with_certificates(
    out: Any, processor: FVOLogitsProcessor, prompt_length: int, skip: int
) -> Any:
    """Attach one fidelity certificate per returned sequence to a dict-style output."""
    if not isinstance(out, torch.Tensor):
        rows = out.sequences[:, prompt_length:].tolist()
        out["certificates"] = [processor.certificate(row, skip) for row in rows]
    return out
