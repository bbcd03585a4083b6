"""FVO-Spec: speculative decoding whose verifier samples p_t·Φ̂_t on the grammar.

Transformers' assisted generation verifies draft tokens with the Leviathan rule against the
*processed* target distribution, and that rule is exact for whatever target it is given (seed 000
Prop. 6). With :class:`~hf_fvo.generation.FVOLogitsProcessor` among the target's processors the
target is μ̂_t ∝ p_t·Φ̂_t, so assisted sampling draws μ* when Φ̂ is exact — and μ_proj, like every
masking engine, when Φ̂ ≡ 1.

:class:`GrammarAwareCandidateGenerator` is the draft side: the draft samples from its own
grammar-masked (optionally Φ̂-reweighted) distribution and reports exactly the processed logits it
sampled from, with the target's warpers applied once (Transformers applies them twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList
from transformers.generation.candidate_generator import (
    AssistedCandidateGenerator,
    _prepare_attention_mask,
    _prepare_position_ids,
    _prepare_token_type_ids,
)

from hf_fvo.errors import InvalidArgumentError, TokenizerError, check_int
from hf_fvo.generation.grammar_draft import (
    MAX_KNOWN_RUN,
    common_prefix,
    grammar_run,
    known_run,
    learn_splits,
    point_mass_logits,
    verifier_temperature,
)
from hf_fvo.generation.processors import FVOLogitsProcessor
from hf_fvo.phi import PhiEstimator, admissible_mask

__all__ = ["GrammarAwareCandidateGenerator", "SpeculationStats"]

# generation-config fields from which generate() builds warpers (appended after custom
# processors), at values that build none; None would be refilled from the global defaults
# (top_k=50)
_NEUTRAL_WARPERS = {
    "temperature": 1.0,
    "top_h": None,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}


@dataclass
class SpeculationStats:
    """Per-round draft and accept counts of one assisted ``generate`` call.

    ``proposed`` counts the tokens the draft model sampled; ``free`` the tokens the grammar
    spelled out (proposed without a draft forward, see
    :mod:`hf_fvo.generation.grammar_draft`); ``drafted`` those sent to the target (free ones
    included; a blind draft is cut at its first token outside the grammar, which the target
    would reject anyway); ``accepted`` the candidate tokens the target kept; ``emitted`` the
    tokens the round added to the output (the accepted ones plus the target's own, unless an
    accepted EOS or the length limit ended generation).

    Example:
        >>> from hf_fvo.generation import SpeculationStats
        >>> stats = SpeculationStats(proposed=[4, 4], drafted=[4, 2], accepted=[4, 1],
        ...                          emitted=[5, 2], free=[0, 0])
        >>> stats.acceptance_rate, stats.rounds, stats.tokens_per_round
        (0.625, 2, 3.5)
    """

    proposed: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.accepted)

    @property
    def candidates(self) -> int:
        """Candidate tokens offered to the target: the draft model's and the grammar's."""
        return sum(self.proposed) + sum(self.free)

    @property
    def acceptance_rate(self) -> float:
        """Accepted ÷ :attr:`candidates` (nan before the first round)."""
        total = self.candidates
        return sum(self.accepted) / total if total else float("nan")

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens emitted per target forward."""
        return sum(self.emitted) / self.rounds if self.rounds else float("nan")


class GrammarAwareCandidateGenerator(AssistedCandidateGenerator):
    """Drafts grammar-admissible tokens for a target constrained by an ``FVOLogitsProcessor``.

    The target's prepared ``logits_processor`` must contain the target's
    :class:`~hf_fvo.generation.FVOLogitsProcessor`. The draft runs the same list with that
    processor replaced by a draft one, and Transformers' own sampling warpers disabled on the
    draft's config, so the target's warpers act once on the draft (not twice).

    Args:
        input_ids, assistant_model, generation_config, model_kwargs, inputs_tensor,
            logits_processor: As for ``AssistedCandidateGenerator``.
        draft_phi: The draft's Φ̂: ``"auto"`` (the default: ``"same"`` where the target's
            estimator is cheap at draft positions — it runs no forwards of its own, or it is an
            exact table —, else ``None``), ``None`` (grammar mask only), ``"same"`` (the
            target's estimator object, e.g. shared exact tables), or an estimator name/instance
            run on the draft's logits (``"onestep"``).
        blind: Draft without the grammar (for comparison); drafts are cut at their first
            inadmissible token.
        grammar_runs: Propose the text the grammar spells out (before and after the draft
            model's tokens) as free point-mass drafts, see
            :mod:`hf_fvo.generation.grammar_draft`; the draft model runs only from the first
            branching point.
        max_run: Most grammar-spelled tokens per run.
        num_assistant_tokens: Draft length per round (default: the draft's generation config).
        stats: Filled with per-round counts (a fresh :class:`SpeculationStats` by default).

    Example:
        >>> import torch
        >>> import hf_fvo
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> target = tiny_random_llama(len(tok), eos_token_id=2)
        >>> draft = tiny_random_llama(len(tok), eos_token_id=2, seed=1)
        >>> g = hf_fvo.Grammar.from_choices(["yes", "no"], tok)
        >>> out = hf_fvo.generate(target, torch.tensor([[1, 5]]), grammar=g, phi="exact",
        ...                       assistant_model=draft, max_new_tokens=4, do_sample=True,
        ...                       return_dict_in_generate=True)
        >>> tok.decode(out.sequences[0, 2:], skip_special_tokens=True) in {"yes", "no"}
        True
        >>> out.speculation.rounds >= 1
        True
    """

    def __init__(
        self,
        input_ids: torch.LongTensor,
        assistant_model: Any,
        generation_config: Any,
        model_kwargs: dict,
        inputs_tensor: torch.Tensor | None = None,
        logits_processor: LogitsProcessorList | None = None,
        *,
        draft_phi: str | PhiEstimator | None = "auto",
        blind: bool = False,
        num_assistant_tokens: int | None = None,
        stats: SpeculationStats | None = None,
        grammar_runs: bool = True,
        max_run: int = 16,
    ) -> None:
        super().__init__(
            input_ids, assistant_model, generation_config, model_kwargs, inputs_tensor,
            logits_processor,
        )  # fmt: skip
        targets = [p for p in self.logits_processor if isinstance(p, FVOLogitsProcessor)]
        if len(targets) != 1:
            raise InvalidArgumentError(
                "GrammarAwareCandidateGenerator needs exactly one FVOLogitsProcessor among the "
                f"target's logits processors, found {len(targets)}"
            )
        self.target_processor = target = targets[0]
        if target.prompt_length is None:
            target.prompt_length = input_ids.shape[1]
        if target.input_length is None:
            target.input_length = input_ids.shape[1]
        _check_draft_vocabulary(assistant_model, target.grammar)
        self.blind = bool(blind)
        self.draft_processor = (
            None if blind else _draft_processor(target, draft_phi, assistant_model)
        )
        self.logits_processor = LogitsProcessorList(
            self.draft_processor if p is target else p
            for p in self.logits_processor
            if p is not target or self.draft_processor is not None
        )
        self.temperature = verifier_temperature(generation_config)  # for known laws' proposals
        for name, value in _NEUTRAL_WARPERS.items():  # the target's are in the list already
            if hasattr(self.generation_config, name):
                setattr(self.generation_config, name, value)
        if num_assistant_tokens is not None:
            self.num_assistant_tokens = check_int(
                "num_assistant_tokens", num_assistant_tokens, minimum=1
            )
            self.assistant_generation_config.num_assistant_tokens_schedule = "constant"
        self.stats = stats if stats is not None else SpeculationStats()
        self.grammar_runs = bool(grammar_runs)
        self.max_run = check_int("max_run", max_run, minimum=1)
        self.width = model_vocab_size(assistant_model) or target.grammar.vocab_size
        self._round: tuple[int, list[int], int, int, list] = (0, [], 0, 0, [])

    def _grammar_run(self, ids: list[int]) -> tuple[list[int], list]:
        """The tokens the grammar spells out after ``ids`` and their chain keys (none if runs
        are off)."""
        target = self.target_processor
        room = min(self.max_run, self.main_model_max_length - len(ids) - 1)
        if not self.grammar_runs or room < 1:
            return [], []
        return grammar_run(target, tuple(ids[target.prompt_length :]), room)

    def _known_run(self, ids: list[int]) -> tuple[list[int], torch.Tensor] | None:
        """Tokens drawn from the law the verifier's estimator knows without a forward (exact
        Φ's table, :func:`known_run`) and their draft logits; ``None`` where it knows none (or
        runs are off). Such a proposal equals the target: the draft model would only be
        slower."""
        room = min(MAX_KNOWN_RUN, self.main_model_max_length - len(ids) - 1)  # all of it passes
        if not self.grammar_runs or room < 1:
            return None
        run, logits = known_run(self.target_processor, ids, room, self.width, self.temperature)
        return (run, logits) if run else None

    def get_candidates(
        self, input_ids: torch.LongTensor, **kwargs: Any
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        start = input_ids.shape[1]
        known = self._known_run(input_ids[0].tolist())
        if known is not None:  # the verifier's own law (exact Φ's table): no draft forward
            run, logits = known
            self.stats.proposed.append(0)
            self.stats.free.append(len(run))
            self.stats.drafted.append(len(run))
            self._round = (start, run, len(run), 0, [None] * len(run))
            return _extended(input_ids, run), logits.to(input_ids.device)
        head, head_keys = self._grammar_run(input_ids[0].tolist())
        base = _extended(input_ids, head)
        if head and head[-1] in self.target_processor.grammar.eos_token_ids:
            candidate_ids, candidate_logits = base, None  # the grammar ended it: no draft
        else:
            candidate_ids, candidate_logits = super().get_candidates(base, **kwargs)
        proposed = candidate_ids.shape[1] - base.shape[1]
        keep = self._admissible_run(candidate_ids[0].tolist(), base.shape[1])
        draft = candidate_ids[0, base.shape[1] : base.shape[1] + keep].tolist()
        tail, tail_keys = self._grammar_run(candidate_ids[0, : base.shape[1] + keep].tolist())
        run = head + draft + tail
        self.stats.proposed.append(proposed)
        self.stats.free.append(len(head) + len(tail))
        self.stats.drafted.append(len(run))
        self._round = (start, run, len(head), keep, head_keys + [None] * keep + tail_keys)
        if not run:  # no candidate: the target samples its own token
            return input_ids, None
        width = self.width if candidate_logits is None else candidate_logits.shape[-1]
        parts = [point_mass_logits(head, width)] if head else []
        if keep:
            parts.append(candidate_logits[:, :keep].float())
        if tail:
            parts.append(point_mass_logits(tail, width).to(parts[0].device if parts else "cpu"))
        return _extended(input_ids, run), torch.cat([x.to(parts[0].device) for x in parts], 1)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int
    ) -> None:
        start, run, head, drafted, keys = self._round
        new = input_ids[0, start:].tolist()
        learn_splits(keys, new)
        accepted = common_prefix(new, run)
        # the draft-length schedule sees the draft model's own tokens only
        own = max(0, min(accepted - head, drafted))
        super().update_candidate_strategy(input_ids, scores[:, : drafted + 1], own)
        self.stats.accepted.append(accepted)
        self.stats.emitted.append(input_ids.shape[1] - start)

    def _update_past_and_masks(self, input_ids: torch.LongTensor, *args: Any, **kw: Any) -> bool:
        # the draft's mask must cover grammar-spelled tokens, also before its first forward
        # (Transformers extends it only once the draft has a cache)
        decoder = self.assistant_model.config.is_encoder_decoder
        width, kwargs = input_ids.shape[-1], self.assistant_kwargs
        kwargs = _prepare_attention_mask(kwargs, width, decoder)
        kwargs = _prepare_position_ids(kwargs, width, decoder)
        self.assistant_kwargs = _prepare_token_type_ids(kwargs, width)
        return super()._update_past_and_masks(input_ids, *args, **kw)

    def _admissible_run(self, ids: list[int], start: int) -> int:
        """How many draft tokens from ``start`` on stay admissible for the target."""
        target = self.target_processor
        g = target.grammar
        prompt_length = target.prompt_length
        for i in range(start, len(ids)):
            generated = tuple(ids[prompt_length:i])
            state = target.state_of(generated)
            if state == g.terminal_state:
                return i - start
            remaining = target.remaining(len(generated))
            token = ids[i]
            if token >= g.vocab_size or not bool(admissible_mask(g, state, remaining)[token]):
                return i - start
        return len(ids) - start


def _extended(input_ids: torch.LongTensor, tokens: list[int]) -> torch.LongTensor:
    if not tokens:
        return input_ids
    extra = torch.tensor([tokens], dtype=input_ids.dtype, device=input_ids.device)
    return torch.cat([input_ids, extra], dim=1)


def _draft_processor(
    target: FVOLogitsProcessor, draft_phi: str | PhiEstimator | None, draft: Any
) -> FVOLogitsProcessor:
    estimator = target.estimator
    if isinstance(draft_phi, str) and draft_phi == "auto":
        cheap = not estimator.needs_model or estimator.name in ("exact", "exact_markov")
        draft_phi = "same" if cheap else None
    if draft_phi is None:
        phi: str | PhiEstimator = "uniform"
    elif isinstance(draft_phi, str) and draft_phi == "same":
        phi = estimator
    else:
        phi = draft_phi
    return target.for_model(phi, draft)


def _check_draft_vocabulary(draft: Any, grammar: Any) -> None:
    """A draft must score every token id the grammar admits (FVO-Spec shares one tokenizer)."""
    size = model_vocab_size(draft)
    if size is not None and size < grammar.vocab_size:
        raise TokenizerError(
            f"the draft model scores {size} token ids but {grammar.source} was compiled for "
            f"{grammar.vocab_size}: FVO-Spec needs a draft with the target's tokenizer"
        )


def model_vocab_size(model: Any) -> int | None:
    """The number of token ids ``model`` scores (its output layer's rows), if it says."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0])
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    size = getattr(config, "vocab_size", None)
    return int(size) if isinstance(size, int) else None
