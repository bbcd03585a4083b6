"""Logits processors that constrain generation to a grammar and reweight it by Φ̂.

A processor here is a pure function of ``input_ids``: the grammar state is recomputed from the
generated tokens (memoised by prefix), never advanced per call. That is what makes it correct
under beam search and assisted generation, where Transformers calls processors on prefixes that
are later discarded.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from transformers import LogitsProcessor

from hf_fvo.errors import (
    ConstraintConflictError,
    InvalidArgumentError,
    NonFiniteScoresError,
    OutOfGrammarError,
    TokenizerError,
)
from hf_fvo.generation.tracker import RowTracker
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.bitmask import apply_bitmask_with_peaks
from hf_fvo.phi import (
    Certificate,
    PhiContext,
    PhiDiagnostics,
    PhiEstimator,
    make_estimator,
)

__all__ = [
    "FVOLogitsProcessor",
    "GrammarLogitsProcessor",
    "MaskedRow",
    "batch_words",
    "mask_batch",
    "vocabulary_mismatch",
]


class FVOLogitsProcessor(LogitsProcessor):
    r"""Reweights the admissible tokens by future validity: scores become log p_t(y) + log Φ̂_t(y).

    (With masking, ``phi="uniform"``, the incoming scores are kept on A_t instead: the same law,
    since softmax ignores the per-row constant log Σ exp, and one pass over the row.)

    Sampling from the result draws μ̂_t(y) ∝ p_t(y)·Φ̂_t(y) on A_t, which is the grammar-conditional
    law μ* when Φ̂ is exact and the masked law μ_proj when Φ̂ ≡ 1 (``phi="uniform"``). Tokens outside
    A_t, or whose completion cannot fit in the budget, get ``-inf``. After EOS a row stays in the
    terminal state, where only EOS is allowed, whatever padding follows.

    Composition: Transformers applies its own processors (``no_repeat_ngram_size``,
    ``suppress_tokens``, minimum lengths…) before custom ones and its warpers after, so
    temperature, top-k and top-p act on the reweighted scores (at temperature T the row samples
    ∝ (p·Φ̂)^{1/T}; exactness claims hold at T = 1 without truncation). If the scores reaching
    this processor leave no admissible token a finite score, it raises
    :class:`~hf_fvo.errors.ConstraintConflictError` rather than hand sampling a row with no
    finite score; with ``beam_search = True`` (``hf_fvo.generate`` sets it) such a row is a beam
    the search drops, and only a step that leaves every row so is an error.

    Under beam search with an estimator other than masking, each row's scores also subtract
    log Φ̂ of the token its parent chose (the value computed one step earlier), so the sums
    Transformers' beam search keeps telescope: a running beam scores log p(prefix) + log Φ̂ of
    its last token — a look-ahead, exact when Φ̂ = Φ, that drops a beam which can only finish
    unlikely — and a finished one log p(x), as under masking.

    Each row's grammar state, remaining budget and certificate come from :attr:`tracker`, a
    :class:`~hf_fvo.generation.RowTracker`; the estimator is :attr:`estimator`.

    Args:
        grammar (`Grammar`): The compiled grammar.
        phi (`str` or `PhiEstimator`): A name from :data:`hf_fvo.phi.ESTIMATORS` (``"uniform"``,
            the default, is masking) or an estimator; a name is resolved by
            :func:`hf_fvo.phi.make_estimator`, which keeps it on ``model`` for the next call.
        model (*optional*): The model, for estimators that run forwards (``"exact"``).
        prompt_length (`int`, *optional*): Columns of ``input_ids`` before the grammar's text
            (left padding included). Default: the width of the first ``input_ids`` seen, so use a
            fresh processor per ``generate``. Tokens between it and the width generation starts
            at are a continuation the grammar resumes from.
        max_new_tokens (`int`, *optional*): The generation budget, counted from the width of the
            first ``input_ids`` seen; completions must fit in it. ``hf_fvo.generate`` sets it from
            whatever Transformers uses (``max_new_tokens``, ``max_length``, a generation config).
        attention_mask (`torch.Tensor`, *optional*): The input's attention mask (left padding):
            estimators that run the model condition on each row's prompt without its padding.
        tokenizer (*optional*): Checked against the tokenizer the grammar was compiled for.
        cache_size (`int`): Prefixes the tracker remembers (see
            :class:`~hf_fvo.generation.RowTracker`).

    Raises:
        OutOfGrammarError: a row's tokens after ``prompt_length`` leave the grammar.
        TokenizerError: the scores are narrower than the grammar's vocabulary, or ``tokenizer``
            is not the one the grammar was compiled for.
        ConstraintConflictError: no admissible token has a finite incoming score.
        NonFiniteScoresError: a score is NaN or +inf on an admissible token.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> proc = FVOLogitsProcessor(g, phi="onestep", prompt_length=1)
        >>> scores = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
        >>> int(torch.isfinite(scores).sum())  # y, ye, yes, n, no
        5
    """

    def __init__(
        self,
        grammar: Grammar,
        phi: str | PhiEstimator = "uniform",
        model: Any = None,
        prompt_length: int | None = None,
        max_new_tokens: int | None = None,
        cache_size: int = 4096,
        *,
        attention_mask: torch.Tensor | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.tracker = RowTracker(grammar, prompt_length, max_new_tokens,
                                  attention_mask=attention_mask, cache_size=cache_size)  # fmt: skip
        if tokenizer is not None:
            grammar.check_tokenizer(tokenizer)
        self.estimator = make_estimator(phi, grammar, model)
        self._masking = self.estimator.is_masking  # masking's fast path, same law bit for bit
        # under beam search a row left with no admissible token is a beam the search drops;
        # only a batch in which every row is left so is a conflict
        self.beam_search = False
        self._warned_budget = False
        # beam search's look-ahead: each row's log Φ̂ vector of the last call, by (prompt, prefix)
        self._last_phi: dict[tuple, torch.Tensor] = {}

    @property
    def grammar(self) -> Grammar:
        return self.tracker.grammar

    def for_model(self, phi: str | PhiEstimator, model: Any) -> FVOLogitsProcessor:
        """A processor for another model over the same rows (a draft): the same grammar,
        prompt, budget and padding, with its own estimator and memories."""
        other = FVOLogitsProcessor(self.grammar, phi, model)
        other.tracker = self.tracker.like()
        return other

    def certificate(self, generated: Sequence[int], skip: int = 0) -> Certificate:
        """The fidelity certificate of one generated sequence (see
        :meth:`RowTracker.certificate <hf_fvo.generation.RowTracker.certificate>`).

        Example:
            >>> import torch
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.generation import FVOLogitsProcessor
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_choices(["yes", "no"], tok)
            >>> proc = FVOLogitsProcessor(g, phi="onestep", prompt_length=1)
            >>> _ = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
            >>> cert = proc.certificate(tok.encode("no"))  # its first step was computed above
            >>> cert.steps[0].delta is None, cert.tv_bound  # OneStep carries no bound
            (True, inf)
        """
        return self.tracker.certificate(generated, skip)

    def step_at(self, generated: Sequence[int]) -> PhiDiagnostics | None:
        """Diagnostics of the last Φ̂ computed at this prefix, if kept."""
        return self.tracker.step_at(generated)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        _check_call(input_ids, scores, self.grammar)
        rows = self.tracker.begin(input_ids)
        vocab = self.grammar.vocab_size
        out = torch.empty_like(scores)  # every row's [:vocab] is written below
        if scores.shape[1] > vocab:
            out[:, vocab:] = -torch.inf  # ids the grammar does not know (a padded embedding)
        # no NaN/+inf in the scores: one pass over the batch, unless masking's batched path
        # (which checks its rows itself) serves every row
        sane = None if self._masking else _finite_or_minus_inf(scores.max())
        dead: Exception | None = None
        masked: list[MaskedRow] = []
        parents, self._last_phi = self._last_phi, {}
        for r, row in enumerate(input_ids.tolist()):
            prompt, generated = self.tracker.split(row, r, rows)
            try:
                state = self.tracker.state(generated)
            except OutOfGrammarError:
                # beam search fills its candidates with −inf ones when fewer are finite; such
                # a beam carries score −inf and stays dead
                if not self.beam_search or len(generated) <= self.tracker.given(input_ids.shape[1]):
                    raise
                out[r].fill_(-torch.inf)
                continue
            row_at = MaskedRow(r, state, self.tracker.remaining(len(generated)), prompt, generated)
            if self._masking or state == self.grammar.terminal_state:
                masked.append(row_at)
                continue
            dead = self._score_row(out, scores, row_at, sane, parents) or dead
        for row_at in self.mask_rows(out, scores, masked):  # declined: the general path decides
            dead = self._score_row(out, scores, row_at, None, parents) or dead
        if dead is not None and not bool(torch.isfinite(out).any()):
            raise dead
        return out

    def mask_rows(
        self, out: torch.Tensor, scores: torch.Tensor, rows: Sequence[MaskedRow]
    ) -> list[MaskedRow]:
        """Masking's batched path over this processor's rows (see :func:`mask_batch`);
        returns the rows it declined."""
        return [row for _, row in mask_batch(out, scores, [(self, row) for row in rows])]

    def _score_row(
        self,
        out: torch.Tensor,
        scores: torch.Tensor,
        row: MaskedRow,
        sane: bool | None,
        parents: dict[tuple, torch.Tensor],
    ) -> ConstraintConflictError | None:
        """Write row ``row.index`` of ``out``: log p_t + log Φ̂_t on the admissible set within
        the budget, −inf elsewhere (under beam search, minus log Φ̂ of the parent's chosen
        token, from ``parents``). Returns the conflict when no admissible token has a finite
        score under beam search, and raises it otherwise."""
        g, r = self.grammar, row.index
        if sane is None:  # masking's batched path declined the row: NaN, +inf or nothing finite
            sane = _finite_or_minus_inf(scores[r].max())
        logits = scores[r] if sane else self._finite_scores(scores[r], row.state, row.remaining)
        context = PhiContext(row.state, row.generated, logits, row.remaining, row.prompt)
        step = self.estimator.step(context)
        self.tracker.record(row.generated, step.diagnostics)
        log_phi = step.log_phi
        if not bool(torch.isfinite(log_phi).any()):
            log_phi = self._out_of_budget(row.state)
        # log p_t + log Φ̂ up to the row's normaliser, which softmax ignores
        row_out = logits[: g.vocab_size].double() + log_phi.to(logits.device)
        if self.beam_search and not self.estimator.is_masking:
            self._last_phi[(row.prompt, row.generated)] = log_phi
            parent = parents.get((row.prompt, row.generated[:-1])) if row.generated else None
            if parent is not None and bool(torch.isfinite(parent[row.generated[-1]])):
                row_out -= float(parent[row.generated[-1]])
        out[r, : g.vocab_size] = row_out.to(scores.dtype)
        if bool(torch.isfinite(row_out).any()):
            return None
        conflict = self._conflict(row.generated, log_phi)
        if not self.beam_search:
            raise conflict
        return conflict

    def _finite_scores(self, logits: torch.Tensor, state: Any, remaining: int | None) -> Any:
        """NaN or +inf scores: on an admissible token they are an error (its probability is
        unknown); elsewhere they are masked like every inadmissible token."""
        bad = torch.isnan(logits) | torch.isposinf(logits)
        admissible = self.grammar.admissible(state, remaining)
        hit = bad[: len(admissible)] & admissible.to(bad.device)
        if bool(hit.any()):
            tok = int(hit.nonzero()[0])
            raise NonFiniteScoresError(
                f"the model's score for admissible token {tok} is {float(logits[tok])} "
                f"({int(hit.sum())} admissible tokens have NaN or +inf scores); its probability "
                "is unknown (check the model's numerics, e.g. float16 overflow)"
            )
        return logits.masked_fill(bad, -torch.inf)

    def _conflict(self, generated: tuple[int, ...], log_phi: torch.Tensor) -> Exception:
        n = int(torch.isfinite(log_phi).sum())
        return ConstraintConflictError(
            f"at grammar position {len(generated)} the grammar admits {n} token(s) but every one "
            "of them reached the grammar's processor with score −inf: another constraint removed "
            "them (a logits processor that runs before it — Transformers runs its own, such as "
            "no_repeat_ngram_size, suppress_tokens, bad_words_ids or min_new_tokens, before "
            "custom ones — or the model's own scores)"
        )

    def _out_of_budget(self, state: Any) -> torch.Tensor:
        """Nothing admissible fits the budget. ``generate`` refuses such a budget before the
        first forward and every admissible token keeps the row able to finish, so this is
        reached only by a bare processor given a ``max_new_tokens`` below the shortest
        completion of its input: draw from A_t, unweighted, and warn once (a row of −inf
        would crash sampling); the output will then be cut off, never made invalid."""
        if not self._warned_budget:
            self._warned_budget = True
            warnings.warn(
                f"the token budget (max_new_tokens={self.tracker.max_new_tokens}) is below the "
                f"shortest completion {self.grammar.source} has from this prefix: the output "
                "will be cut off; raise max_new_tokens (hf_fvo.generate refuses such a budget "
                "before generating)",
                stacklevel=4,
            )
        mask = self.grammar.allowed(state)
        log_phi = torch.full((self.grammar.vocab_size,), -torch.inf, dtype=torch.float64)
        log_phi[mask] = 0.0
        return log_phi


class MaskedRow(NamedTuple):
    """One row of a processor call: its index in the batch, grammar state, tokens of budget
    left (``None``: no budget), the prompt and the generated tokens the state is read from."""

    index: int
    state: Any
    remaining: int | None
    prompt: tuple[int, ...]
    generated: tuple[int, ...]


def mask_batch(
    out: torch.Tensor,
    scores: torch.Tensor,
    rows: Sequence[tuple[FVOLogitsProcessor, MaskedRow]],
    words: np.ndarray | None = None,
) -> list[tuple[FVOLogitsProcessor, MaskedRow]]:
    """Masking's batched path: each row's incoming scores on its A_t, −inf elsewhere, written
    to ``out`` in one operation from one packed bitmask (the same law as log p_t + 0 on A_t:
    softmax ignores the per-row constant); a finished row allows EOS only, whatever its
    scores. Rows may belong to processors of different grammars (a server's requests): the
    bitmask is filled per grammar, once per distinct (state, remaining), unless ``words``
    (rows × ⌈width/32⌉) is given. Returns the rows it declined — an admissible score NaN or
    +inf, or none finite — left −inf, for the general path to mask bad scores off A_t, apply
    the budget fallback or raise.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import GrammarLogitsProcessor
        >>> from hf_fvo.generation.processors import MaskedRow, mask_batch
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> procs = [GrammarLogitsProcessor(Grammar.from_choices([w], tok)) for w in ("yes", "no")]
        >>> start = [MaskedRow(i, p.grammar.initial_state, None, (), ())
        ...          for i, p in enumerate(procs)]
        >>> rows = list(zip(procs, start))
        >>> scores = torch.zeros(2, procs[0].grammar.vocab_size)
        >>> out = torch.empty_like(scores)
        >>> mask_batch(out, scores, rows), torch.isfinite(out).sum(dim=1).tolist()  # y ye yes, n no
        ([], [3, 2])
    """
    if not rows:
        return []
    if words is None:
        words = batch_words([(p.grammar, row.state, row.remaining) for p, row in rows],
                            (scores.shape[1] + 31) // 32)  # fmt: skip
    index = [row.index for _, row in rows]
    if index == list(range(len(scores))):  # every row, in order: no gather, no scatter
        _, peaks = apply_bitmask_with_peaks(scores, words, out=out)
    else:
        kept, peaks = apply_bitmask_with_peaks(scores[index], words)
        out[index] = kept
    declined = []
    for (p, row), peak in zip(rows, peaks.tolist(), strict=True):
        if row.state == p.grammar.terminal_state:
            # EOS is certain (keeps EOS legal after EOS, which assisted decoding evaluates)
            out[row.index].fill_(-torch.inf)
            out[row.index, list(p.grammar.eos_token_ids)] = 0.0
        elif math.isfinite(peak):  # NaN and +inf propagate through max
            p.tracker.record(row.generated, _MASKING_STEP)
        else:
            out[row.index].fill_(-torch.inf)
            declined.append((p, row))
    return declined


def batch_words(rows: Sequence[tuple[Grammar, Any, int | None]], width: int) -> np.ndarray:
    """The packed admissible sets of rows that may belong to different grammars (a server's
    requests), ``width`` int32 words a row (ids past a grammar's vocabulary: never
    admissible): :meth:`Grammar.admissible_words` once per grammar over its rows.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.processors import batch_words
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> a, b = Grammar.from_choices(["yes"], tok), Grammar.from_choices(["no"], tok)
        >>> words = batch_words([(a, a.initial_state, None), (b, b.initial_state, 4)], 1536)
        >>> words.shape
        (2, 1536)
    """
    out = np.zeros((len(rows), width), dtype=np.int32)
    groups: dict[int, list[int]] = {}
    for i, (grammar, _, _) in enumerate(rows):
        groups.setdefault(id(grammar), []).append(i)
    for members in groups.values():
        grammar = rows[members[0]][0]
        words = grammar.admissible_words([rows[i][1] for i in members],
                                         [rows[i][2] for i in members])  # fmt: skip
        cut = min(width, words.shape[1])
        if len(members) == len(rows):
            out[:, :cut] = words[:, :cut]
        else:
            out[members, :cut] = words[:, :cut]
    return out


# masking's per-step diagnostics, as UniformPhi.step computes them: Φ̄ = 1, no spread, no bound
_MASKING_STEP = PhiDiagnostics(1.0, 0.0, None, None, 0.0)


def _finite_or_minus_inf(peak: torch.Tensor) -> bool:
    """Whether a max over scores is finite or −inf (NaN and +inf propagate through max)."""
    return bool(torch.isfinite(peak) or peak == -torch.inf)


def _check_call(input_ids: Any, scores: Any, grammar: Grammar) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise InvalidArgumentError("input_ids must be a 2-D tensor (batch × length)")
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise InvalidArgumentError("scores must be a 2-D tensor (batch × vocabulary)")
    if scores.shape[0] != input_ids.shape[0]:
        raise InvalidArgumentError(
            f"input_ids has {input_ids.shape[0]} rows but scores has {scores.shape[0]}"
        )
    mismatch = vocabulary_mismatch(scores.shape[-1], grammar, "the model")
    if mismatch is not None:
        raise mismatch


def vocabulary_mismatch(
    width: int | None,
    grammar: Grammar,
    who: str,
    fix: str = "compile the grammar with this model's tokenizer and "
    "vocab_size=model.config.vocab_size",
) -> TokenizerError | None:
    """The error when a model scoring ``width`` token ids cannot serve ``grammar`` (compiled
    for more ids: another tokenizer), else ``None``.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.processors import vocabulary_mismatch
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["a"], load_default_tokenizer())
        >>> vocabulary_mismatch(100, g, "the draft model") is not None
        True
    """
    if width is None or width >= grammar.vocab_size:
        return None
    return TokenizerError(
        f"{who} scores {width} token ids but {grammar.source} was compiled for "
        f"{grammar.vocab_size}: it belongs to another tokenizer ({fix})"
    )


class GrammarLogitsProcessor(FVOLogitsProcessor):
    r"""Masks every token outside the admissible set A_t: ``FVOLogitsProcessor`` with Φ ≡ 1.

    This samples the locally projected law μ_proj. Unlike Outlines' and XGrammar's per-row
    stateful processors, it may be called on any prefix in any order, so it survives beam
    search and assisted generation.

    Args:
        grammar (`Grammar`): The compiled automaton.
        prompt_length (`int`, *optional*): As in :class:`FVOLogitsProcessor`.
        max_new_tokens (`int`, *optional*): Also mask tokens whose completion cannot fit.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import GrammarLogitsProcessor
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tokenizer = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tokenizer)
        >>> proc = GrammarLogitsProcessor(g, prompt_length=1)
        >>> scores = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
        >>> sorted(tokenizer.decode([i]) for i in torch.isfinite(scores[0]).nonzero().flatten())
        ['n', 'no', 'y', 'ye', 'yes']
    """

    def __init__(
        self,
        grammar: Grammar,
        prompt_length: int | None = None,
        max_new_tokens: int | None = None,
        cache_size: int = 4096,
        *,
        attention_mask: torch.Tensor | None = None,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(
            grammar, "uniform", None, prompt_length, max_new_tokens, cache_size,
            attention_mask=attention_mask, tokenizer=tokenizer,
        )  # fmt: skip
