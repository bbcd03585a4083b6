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
from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.errors import (
    CheckFailedError,
    ConstraintConflictError,
    EmptyLanguageError,
    InvalidArgumentError,
    check_int,
)
from hf_fvo.generation.drafts import (
    SPLITS_KEPT,
    GrammarCandidateGenerator,
    SpeculationStats,
    verifier_temperature,
)
from hf_fvo.generation.loops import assisted_decoding, decoding_loop, why_not_assisted
from hf_fvo.generation.mode import DecodingRequest, decoding_mode
from hf_fvo.generation.particles import (
    AutoParticles,
    ParticleReport,
    auto_particles,
    sample_particles,
)
from hf_fvo.generation.processors import FVOLogitsProcessor, vocabulary_mismatch
from hf_fvo.generation.speculative import GrammarAwareCandidateGenerator, model_vocab_size
from hf_fvo.generation.tracker import left_padding
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import require_grammar
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
            call with the same name and grammar reuses its tables.
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
            call's other processors (temperature, top-k…, penalties). A particle that fails
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
    input_ids = _check_input_ids(input_ids)
    require_grammar(grammar)
    tries = check_int("check_tries", check_tries, minimum=1)
    options = {
        "grammar": grammar, "phi": phi, "prompt_length": prompt_length,
        "assistant_model": assistant_model, "draft_phi": draft_phi, "blind_draft": blind_draft,
        "num_assistant_tokens": num_assistant_tokens, "grammar_draft": grammar_draft,
        "particles": particles,
    }  # fmt: skip
    if not grammar.checked or particles is not None:  # particles weigh the check themselves
        return _generate(model, input_ids, **options, **generate_kwargs)
    if any(generate_kwargs.get(k) for k in _PER_STEP_OUTPUTS):
        tries = 1  # per-step outputs (scores, a streamer) follow one draw: no redraws
    out = _generate(model, input_ids, **options, **generate_kwargs)
    return _redraw_failed(model, input_ids, out, tries=tries, options=options,
                         kwargs=generate_kwargs)  # fmt: skip


def _generate(
    model: Any,
    input_ids: torch.Tensor,
    *,
    grammar: Grammar,
    phi: str | PhiEstimator,
    prompt_length: int | None,
    assistant_model: Any,
    draft_phi: str | PhiEstimator | None,
    blind_draft: bool,
    num_assistant_tokens: int | None,
    grammar_draft: bool | None,
    particles: int | AutoParticles | None,
    **generate_kwargs: Any,
) -> Any:
    """:func:`generate` without the redraws of a final check."""
    _check_flags(assistant_model, draft_phi, blind_draft, num_assistant_tokens, grammar_draft)
    if particles is not None:
        particles = auto_particles(particles)
        _check_particles(assistant_model, grammar_draft, generate_kwargs)
        config = generate_kwargs.get("generation_config") or getattr(
            model, "generation_config", None
        )
        if "top_k" not in generate_kwargs and getattr(config, "top_k", None) is None:
            generate_kwargs["top_k"] = 0  # Transformers' own default (50) would truncate p_t
    request = DecodingRequest(
        draft_model=assistant_model is not None,
        grammar_draft=grammar_draft,
        rows=input_ids.shape[0],
        copies=generate_kwargs.get("num_return_sequences") or 1,
        per_step=tuple(k for k in _PER_STEP_OUTPUTS if generate_kwargs.get(k)),
        encoder_decoder=getattr(getattr(model, "config", None), "is_encoder_decoder", False),
    )
    if particles is None and decoding_mode(request) == "row_by_row":
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
    _check_tokenizers(model, grammar, assistant_model, generate_kwargs)
    if generate_kwargs.get("attention_mask") is None:  # unpadded: Transformers cannot infer it
        generate_kwargs["attention_mask"] = torch.ones_like(input_ids)
    processor = FVOLogitsProcessor(grammar, phi=phi, model=model, prompt_length=start,
                                   attention_mask=generate_kwargs["attention_mask"])  # fmt: skip
    processor.tracker.input_length = width  # a continuation, if any, is checked against it
    call = _Call(
        processor, request, input_ids, width=model_vocab_size(model) or grammar.vocab_size,
        splits=model_memory(model, "splits", SPLITS_KEPT),
        streamer=generate_kwargs.get("streamer"), assistant_model=assistant_model,
        draft_kwargs={"draft_phi": draft_phi, "blind": blind_draft,
                      "num_assistant_tokens": num_assistant_tokens,
                      "grammar_runs": grammar_draft is not False},
        particles=particles,
    )  # fmt: skip
    extra = generate_kwargs.pop("logits_processor", None) or []
    out = model.generate(
        input_ids,
        logits_processor=LogitsProcessorList([processor, *extra]),
        assistant_model=assistant_model,
        custom_generate=call.decode,
        **generate_kwargs,
    )
    if call.drafted and not isinstance(out, torch.Tensor):
        out["speculation"] = call.stats
    if particles is not None:
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
        *,
        width: int,
        splits: Any,
        streamer: Any,
        assistant_model: Any,
        draft_kwargs: dict[str, Any],
        particles: int | str | AutoParticles | None = None,
    ) -> None:
        self.processor = processor
        self.particles = particles
        self.reports: list[ParticleReport] = []
        self.request = request
        self.input_width = input_ids.shape[1]
        self.vocab_width = width  # the target's logits width
        start = processor.tracker.prompt_length
        self.states = [processor.tracker.state(tuple(row[start:])) for row in input_ids.tolist()]
        self.splits = splits
        self.streamer = streamer
        self.assistant_model = assistant_model
        self.draft_kwargs = draft_kwargs
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
        _check_feasible(processor.grammar, self.states, rows.max_new_tokens, generation_config,
                        self.input_width)  # fmt: skip
        if self.particles is not None:
            return self.particle_decode(model, input_ids, logits_processor, generation_config,
                                        model_kwargs)  # fmt: skip
        asked = {k for k in _PER_STEP_OUTPUTS if getattr(generation_config, k, None)}
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

    def particle_decode(
        self,
        model: Any,
        input_ids: torch.Tensor,
        logits_processor: LogitsProcessorList,
        generation_config: Any,
        model_kwargs: dict[str, Any],
    ) -> Any:
        """Sequential Monte Carlo per prompt; each of its ``num_return_sequences`` rows is drawn
        from the prompt's final weighted particles."""
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        config = generation_config
        if not config.do_sample:
            raise InvalidArgumentError("particles sample: pass do_sample=True")
        if (config.num_beams or 1) > 1:
            raise InvalidArgumentError("particles do not combine with beam search (num_beams)")
        cut = _truncation(config)
        if cut:
            raise InvalidArgumentError(
                f"particles target μ*_B of the model's law, which {cut} truncates (set by the "
                "call, its generation_config or the model's): drop it, or sample without "
                "particles"
            )
        rows = self.processor.tracker
        copies = config.num_return_sequences or 1
        mask = model_kwargs.get("attention_mask")
        pads = [0] * input_ids.shape[0] if mask is None else left_padding(mask)
        others = [p for p in logits_processor if p is not self.processor]

        def processed(padding: torch.Tensor) -> Any:
            # the other processors see each row with its left padding, as Transformers built
            # them for (min_new_tokens counts from the padded width)
            def scores(ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
                ids = torch.cat([padding.expand(len(ids), -1), ids], dim=1)
                for p in others:
                    logits = p(ids, logits)
                return logits

            return scores

        budget = config.max_length - input_ids.shape[1]
        outputs, self.reports = [], []
        for r in range(0, input_ids.shape[0], copies):
            skip = pads[r]
            found = sample_particles(
                model, input_ids[r : r + 1, skip:], grammar=self.processor.grammar,
                particles=self.particles, max_new_tokens=budget, phi=self.processor.estimator,
                scores=processed(input_ids[r : r + 1, :skip]) if others else None,
                prompt_length=rows.prompt_length - skip,
            )  # fmt: skip
            for j in found.draw(copies).tolist():
                outputs.append(torch.cat([input_ids[r, :skip], found.sequences[j]]))
                self.reports.append(found.report)
        pad = config.pad_token_id
        pad = self.processor.grammar.eos_token_id if pad is None else pad
        sequences = _right_padded(outputs, pad, input_ids)
        if config.return_dict_in_generate:
            return GenerateDecoderOnlyOutput(sequences=sequences)
        return sequences

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


def _check_flags(
    assistant_model: Any,
    draft_phi: Any,
    blind_draft: bool,
    num_assistant_tokens: int | None,
    grammar_draft: bool | None,
) -> None:
    if assistant_model is None and (draft_phi != "auto" or blind_draft or num_assistant_tokens):
        raise InvalidArgumentError(
            "draft_phi, blind_draft and num_assistant_tokens need assistant_model"
        )
    if grammar_draft is not None and not isinstance(grammar_draft, bool):
        raise InvalidArgumentError(
            f"grammar_draft must be True, False or None, got {grammar_draft!r}"
        )


_NEUTRAL = {"top_k": (None, 0), "top_p": (None, 1.0), "min_p": (None, 0.0),
            "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0),
            "eta_cutoff": (None, 0.0)}  # fmt: skip


def _truncation(config: Any) -> str:
    """The warpers ``config`` turns on that cut tokens off p_t (``top_k=50``…), in words."""
    on = [f"{k}={getattr(config, k)}" for k, neutral in _NEUTRAL.items()
          if getattr(config, k, None) not in neutral]  # fmt: skip
    return ", ".join(on)


def _check_particles(
    assistant_model: Any, grammar_draft: bool | None, generate_kwargs: dict[str, Any]
) -> None:
    if assistant_model is not None or grammar_draft:
        raise InvalidArgumentError(
            "particles do not combine with assistant_model or grammar_draft=True: drop one"
        )
    per_step = [k for k in _PER_STEP_OUTPUTS if generate_kwargs.get(k)]
    if per_step:
        raise InvalidArgumentError(f"particles return whole sequences: drop {', '.join(per_step)}")


_PER_STEP_OUTPUTS = ("output_scores", "output_logits", "output_attentions",
                     "output_hidden_states", "streamer")  # fmt: skip


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
            out = _generate(model, input_ids[r : r + 1, skip:], prompt_length=start,
                            particles=None, **kwargs)  # fmt: skip
            seq = out.sequences if as_dict else out
            rows.append(torch.cat([input_ids[r, :skip], seq[0].to(input_ids.device)]))
            if as_dict:
                certificates += out["certificates"]
                for name in ("proposed", "drafted", "accepted", "emitted", "free"):
                    getattr(stats, name).extend(getattr(out["speculation"], name))
    sequences = _right_padded(rows, pad, input_ids)
    if not as_dict:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["certificates"] = certificates
    out["speculation"] = stats
    return out


def _redraw_failed(
    model: Any,
    input_ids: torch.Tensor,
    out: Any,
    *,
    tries: int,
    options: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """Redraw each returned sequence that fails the grammar's final check, from its own prompt
    (one row, its ``attention_mask`` row), until it passes or ``tries`` draws failed."""
    grammar: Grammar = options["grammar"]
    as_dict = not isinstance(out, torch.Tensor)
    sequences = out.sequences if as_dict else out
    copies = kwargs.get("num_return_sequences") or 1
    width = input_ids.shape[1]
    start = width if options["prompt_length"] is None else options["prompt_length"]
    mask = kwargs.get("attention_mask")
    config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
    sampling = kwargs.get("do_sample", getattr(config, "do_sample", False))
    beams = kwargs.get("num_beams", getattr(config, "num_beams", 1)) or 1
    limit = tries if sampling and beams == 1 else 1
    eos = set(grammar.eos_token_ids)
    pad = kwargs.get("pad_token_id", getattr(config, "pad_token_id", None))
    pad = grammar.eos_token_id if pad is None else pad
    rows = [sequences[i] for i in range(sequences.shape[0])]
    draws = [1] * len(rows)
    certificates = list(out["certificates"]) if as_dict and "certificates" in out else None
    single = {k: v for k, v in kwargs.items() if k not in ("num_return_sequences",
                                                           "attention_mask")}  # fmt: skip
    for i in range(len(rows)):
        r = i // copies
        failure = grammar.check(_output(rows[i], start, width, eos))
        while failure is not None:
            if draws[i] >= limit:
                how = f"{draws[i]} draws" if limit > 1 else "the only draw"
                raise CheckFailedError(
                    f"sequence {i}: {how} failed the final check of {grammar.source}: "
                    f"{failure}; raise check_tries, sample (do_sample=True, no beams, no "
                    "per-step outputs) for redraws, or use particles=N"
                )  # fmt: skip
            row_mask = None if mask is None else mask[r : r + 1]
            again = _generate(model, input_ids[r : r + 1], **options, attention_mask=row_mask,
                              **single)  # fmt: skip
            draws[i] += 1
            rows[i] = (again.sequences if as_dict else again)[0].to(sequences.device)
            if certificates is not None and "certificates" in again:
                certificates[i] = again["certificates"][0]
            failure = grammar.check(_output(rows[i], start, width, eos))
    if max(draws) == 1:
        if as_dict:
            out["draws"] = draws
        return out
    stacked = _right_padded(rows, pad, sequences)
    if not as_dict:
        return stacked
    out.sequences = stacked
    out["draws"] = draws
    if certificates is not None:
        out["certificates"] = certificates
    return out


def _output(row: torch.Tensor, start: int, width: int, eos: set[int]) -> list[int]:
    """The grammar's text of one returned row: from ``start`` to the first EOS it generated."""
    tokens = row[start:].tolist()
    for j in range(width - start, len(tokens)):
        if tokens[j] in eos:
            return tokens[:j]
    return tokens


def _right_padded(rows: list[torch.Tensor], pad: int, like: torch.Tensor) -> torch.Tensor:
    """``rows`` stacked, right-padded with ``pad`` (``like``'s dtype and device)."""
    width = max(len(row) for row in rows)
    out = torch.full((len(rows), width), int(pad), dtype=like.dtype, device=like.device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
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
        refusal = grammar.budget_refusal(
            state, budget,
            f"the budget of {budget} new tokens (max_new_tokens, or max_length minus the input's "
            f"{width}, from the call, its generation_config or the model's)",
            "; raise max_new_tokens",
        )  # fmt: skip
        if refusal is not None:
            raise refusal
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


def _with_certificates(
    out: Any, processor: FVOLogitsProcessor, prompt_length: int, skip: int
) -> Any:
    """Attach one fidelity certificate per returned sequence to a dict-style output."""
    if not isinstance(out, torch.Tensor):
        rows = out.sequences[:, prompt_length:].tolist()
        out["certificates"] = [processor.certificate(row, skip) for row in rows]
    return out
