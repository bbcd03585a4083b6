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

from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.errors import InvalidArgumentError, check_int
from hf_fvo.generation.drafts import (
    MAX_KNOWN_RUN,
    GrammarProposals,
    Key,
    SpeculationStats,
    Splits,
    extended,
    point_mass_logits,
    verifier_temperature,
)
from hf_fvo.generation.loops import WidenedDraft
from hf_fvo.generation.processors import FVOLogitsProcessor, vocabulary_mismatch
from hf_fvo.generation.warpers import neutral_warpers
from hf_fvo.phi import PhiEstimator

__all__ = ["GrammarAwareCandidateGenerator", "model_vocab_size"]


class GrammarAwareCandidateGenerator(WidenedDraft):
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
        splits: Where the target's token splits are remembered (``hf_fvo.generate`` passes the
            target model's memory; ``None``: propose the longest split).

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
        splits: Splits | None = None,
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
        target.tracker.begin(input_ids)
        mismatch = vocabulary_mismatch(model_vocab_size(assistant_model), target.grammar,
                                       "the draft model", _SAME_TOKENIZER)  # fmt: skip
        if mismatch is not None:
            raise mismatch
        self.blind = bool(blind)
        self.draft_processor = (
            None if blind else _draft_processor(target, draft_phi, assistant_model)
        )
        self.logits_processor = LogitsProcessorList(
            self.draft_processor if p is target else p
            for p in self.logits_processor
            if p is not target or self.draft_processor is not None
        )
        neutral_warpers(self.generation_config)  # the target's are in the list already
        if num_assistant_tokens is not None:
            self.num_assistant_tokens = check_int(
                "num_assistant_tokens", num_assistant_tokens, minimum=1
            )
            self.assistant_generation_config.num_assistant_tokens_schedule = "constant"
        self.grammar_runs = bool(grammar_runs)
        self.max_run = check_int("max_run", max_run, minimum=1)
        self.free = GrammarProposals(
            target, model_vocab_size(assistant_model) or target.grammar.vocab_size,
            temperature=verifier_temperature(generation_config), splits=splits, stats=stats,
        )  # fmt: skip
        self._draft: tuple[int, int] = (0, 0)  # this round: free tokens before the draft's, its

    @property
    def stats(self) -> SpeculationStats:
        return self.free.stats

    @property
    def num_drafting_tokens(self) -> int:
        """Most tokens one round proposes (Transformers ≥ 5.25 keeps that many steps of a
        recurrent cache to roll back): a known law's run, or spelled-out runs around the
        draft's tokens."""
        return max(MAX_KNOWN_RUN, 2 * self.max_run + int(self.num_assistant_tokens))

    def _room(self, ids: list[int], most: int) -> int:
        """Tokens a free run may take after ``ids`` (none when runs are off)."""
        return min(most, self.main_model_max_length - len(ids) - 1) if self.grammar_runs else 0

    def get_candidates(
        self, input_ids: torch.LongTensor, **kwargs: Any
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        start = input_ids.shape[1]
        ids = input_ids[0].tolist()
        # the verifier's own law where its estimator knows it (exact Φ's table): all of it
        # passes, and the draft model would only be slower
        known = self.free.known(ids, self._room(ids, MAX_KNOWN_RUN))
        if known is not None:
            run, logits = known
            self.free.begin(start, run, [None] * len(run), free=len(run))
            self._draft = (len(run), 0)
            return extended(input_ids, run), logits.to(input_ids.device)
        head, head_keys = self.free.spelled(ids, self._room(ids, self.max_run))
        base = extended(input_ids, head)
        if head and head[-1] in self.target_processor.grammar.eos_token_ids:
            candidate_ids, candidate_logits = base, None  # the grammar ended it: no draft
        else:
            candidate_ids, candidate_logits = super().get_candidates(base, **kwargs)
        proposed = candidate_ids.shape[1] - base.shape[1]
        keep = self._admissible_run(candidate_ids[0].tolist(), base.shape[1])
        draft = candidate_ids[0, base.shape[1] : base.shape[1] + keep].tolist()
        before_tail = candidate_ids[0, : base.shape[1] + keep].tolist()
        tail, tail_keys = self.free.spelled(before_tail, self._room(before_tail, self.max_run))
        run = head + draft + tail
        keys: list[Key] = [*head_keys, *[None] * keep, *tail_keys]
        self.free.begin(start, run, keys, proposed=proposed, free=len(head) + len(tail))
        self._draft = (len(head), keep)
        if not run:  # no candidate: the target samples its own token
            return input_ids, None
        width = self.free.width if candidate_logits is None else candidate_logits.shape[-1]
        parts = [point_mass_logits(head, width)] if head else []
        if keep:
            parts.append(candidate_logits[:, :keep].float())
        if tail:
            parts.append(point_mass_logits(tail, width).to(parts[0].device if parts else "cpu"))
        return extended(input_ids, run), torch.cat([x.to(parts[0].device) for x in parts], 1)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int
    ) -> None:
        accepted = self.free.end(input_ids[0].tolist())
        head, drafted = self._draft
        # the draft-length schedule sees the draft model's own tokens only
        own = max(0, min(accepted - head, drafted))
        super().update_candidate_strategy(input_ids, scores[:, : drafted + 1], own)

    def _admissible_run(self, ids: list[int], start: int) -> int:
        """How many draft tokens from ``start`` on stay admissible for the target."""
        rows = self.target_processor.tracker
        _, generated = rows.split(ids)
        first = start - (len(ids) - len(generated))  # ids[start] is generated[first]
        for i in range(first, len(generated)):
            if rows.is_finished(generated[:i]):
                return i - first
            token = generated[i]
            if token >= rows.grammar.vocab_size or not bool(rows.admissible(generated[:i])[token]):
                return i - first
        return len(generated) - first


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


_SAME_TOKENIZER = "FVO-Spec needs a draft with the target's tokenizer"


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
