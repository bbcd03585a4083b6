"""Logits processors that constrain generation to a grammar and reweight it by Φ̂.

A processor here is a pure function of ``input_ids``: the grammar state is recomputed from the
generated tokens (memoised by prefix), never advanced per call. That is what makes it correct
under beam search and assisted generation, where Transformers calls processors on prefixes that
are later discarded.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor

from hf_fvo.errors import (
    ConstraintConflictError,
    InvalidArgumentError,
    NonFiniteScoresError,
    OutOfGrammarError,
    TokenizerError,
    check_int,
)
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import BIAS_DTYPES
from hf_fvo.phi import (
    Certificate,
    PhiContext,
    PhiDiagnostics,
    PhiEstimator,
    make_estimator,
)

__all__ = ["FVOLogitsProcessor", "GrammarLogitsProcessor", "left_padding"]


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

    Args:
        grammar (`Grammar`): The compiled grammar.
        phi (`str` or `PhiEstimator`): ``"uniform"`` (default: masking), ``"onestep"``,
            ``"exact"`` or an estimator.
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
        cache_size (`int`): Prefixes remembered (LRU). A pushdown grammar's state holds a parser
            snapshot (megabytes with llguidance), so for those at most
            ``max(256, 4 × rows)`` states are kept (an evicted one is rebuilt from its longest
            remembered prefix); the per-step diagnostics behind certificates keep
            ``cache_size``.

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
        if not isinstance(grammar, Grammar):
            raise InvalidArgumentError(
                f"grammar must be an hf_fvo.Grammar, got {type(grammar).__name__}"
            )
        self.grammar = grammar
        self.prompt_length = check_int("prompt_length", prompt_length, optional=True)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1, optional=True)
        self._cache_size = check_int("cache_size", cache_size, minimum=1)
        if tokenizer is not None:
            grammar.check_tokenizer(tokenizer)
        self._pads = None if attention_mask is None else left_padding(attention_mask)
        self.estimator = make_estimator(phi, grammar, model)
        self.input_length: int | None = None  # the width generation starts at
        # under beam search a row left with no admissible token is a beam the search drops;
        # only a batch in which every row is left so is a conflict
        self.beam_search = False
        self._states: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._steps: OrderedDict[tuple[int, ...], PhiDiagnostics] = OrderedDict()
        self._rows = 1  # the widest batch seen (bounds the pushdown state cache from below)
        self._masking = self.estimator.is_masking
        self._warned_budget = False

    def for_model(self, phi: str | PhiEstimator, model: Any) -> FVOLogitsProcessor:
        """A processor for another model over the same rows (a draft): the same grammar,
        prompt, budget and padding, with its own estimator."""
        other = FVOLogitsProcessor(
            self.grammar, phi, model, self.prompt_length, self.max_new_tokens, self._cache_size
        )
        other.input_length = self.input_length
        other._pads = self._pads
        return other

    def remaining(self, generated_length: int) -> int | None:
        """Tokens still allowed (this one included) after ``generated_length`` tokens of the
        grammar's text, or ``None`` without a budget."""
        if self.max_new_tokens is None:
            return None
        start = self.input_length if self.input_length is not None else self.prompt_length
        return self.max_new_tokens - (self.prompt_length + generated_length - start)

    def state_of(self, generated: tuple[int, ...]) -> Any:
        """The grammar state after the generated tokens (memoised by prefix)."""
        hit = self._states.get(generated)
        if hit is not None:
            self._states.move_to_end(generated)
            return hit
        g = self.grammar
        if not generated:
            state = g.initial_state
        else:
            parent = self.state_of(generated[:-1]) if len(generated) < 64 else None
            if parent is None:
                parent = self._walk(generated[:-1])
            state = self._step(parent, generated, len(generated) - 1)
        self._remember(self._states, generated, state)
        return state

    def _walk(self, generated: tuple[int, ...]) -> Any:
        # Long prefixes: find the longest remembered ancestor instead of recursing.
        for cut in range(len(generated), -1, -1):
            hit = self._states.get(generated[:cut])
            if hit is not None or cut == 0:
                state = self.grammar.initial_state if hit is None else hit
                for i in range(cut, len(generated)):
                    state = self._step(state, generated, i)
                return state
        raise AssertionError("unreachable")

    def _step(self, state: Any, generated: tuple[int, ...], position: int) -> Any:
        g = self.grammar
        if state == g.terminal_state:
            return state  # the row has finished; Transformers pads it with anything
        token = generated[position]
        nxt = g.next_state(state, token)
        if nxt is None:
            start = self.input_length if self.input_length is not None else self.prompt_length
            where = (
                "in the continuation given as input (the tokens between prompt_length and the "
                "input's width must begin a member)"
                if self.prompt_length + position < start
                else "in generated text: the token was sampled outside the scores this processor "
                "returned (a processor or sampler that runs after it, or a processor reused "
                "across generate() calls)"
            )
            raise OutOfGrammarError(
                f"token {token} at grammar position {position} is not allowed by {g.source}; "
                f"it occurs {where}"
            )
        return nxt

    def _remember(self, cache: OrderedDict, key, value) -> None:
        cache[key] = value
        limit = self._cache_size
        if cache is self._states and self.grammar.backend == "pushdown":
            limit = min(limit, max(_PUSHDOWN_STATES, 4 * self._rows))
        while len(cache) > limit:
            cache.popitem(last=False)

    def step_at(self, generated: tuple[int, ...]) -> PhiDiagnostics | None:
        """Diagnostics (Φ̄_t, dispersion, δ_t) of the last Φ̂ computed at this prefix, if kept."""
        return self._steps.get(tuple(generated))

    def certificate(self, generated: Sequence[int], skip: int = 0) -> Certificate:
        """The fidelity certificate of one generated sequence (prompt excluded): the kept
        diagnostics at each of its positions from ``skip`` (a continuation given as input) up
        to and including its first EOS.

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
        generated = [int(t) for t in generated]
        eos = set(self.grammar.eos_token_ids)
        end = next((i + 1 for i, t in enumerate(generated) if t in eos), len(generated))
        return Certificate(tuple(self.step_at(tuple(generated[:i])) for i in range(skip, end)))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise InvalidArgumentError("input_ids must be a 2-D tensor (batch × length)")
        if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
            raise InvalidArgumentError("scores must be a 2-D tensor (batch × vocabulary)")
        if scores.shape[0] != input_ids.shape[0]:
            raise InvalidArgumentError(
                f"input_ids has {input_ids.shape[0]} rows but scores has {scores.shape[0]}"
            )
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        self._rows = max(self._rows, input_ids.shape[0])
        if self.input_length is None:
            self.input_length = input_ids.shape[1]
        width = scores.shape[-1]
        vocab = self.grammar.vocab_size
        if width < vocab:
            raise TokenizerError(
                f"the model scores {width} token ids but {self.grammar.source} was compiled for "
                f"{vocab}: it belongs to another tokenizer (compile it with this model's "
                "tokenizer and vocab_size=model.config.vocab_size)"
            )
        sane: bool | None = None  # no NaN/+inf in the scores (checked when first needed)
        out = torch.empty_like(scores)  # every row's [:vocab] is written below
        out[:, vocab:] = -torch.inf  # ids the grammar does not know (a padded embedding)
        dead: Exception | None = None
        for r, row in enumerate(input_ids.tolist()):
            prompt, generated = self.split(row, r, input_ids.shape[0])
            try:
                state = self.state_of(generated)
            except OutOfGrammarError:
                # beam search fills its candidates with −inf ones when fewer are finite; such
                # a beam carries score −inf and stays dead
                if not self.beam_search or len(generated) <= self._given(input_ids.shape[1]):
                    raise
                out[r].fill_(-torch.inf)
                continue
            if state == self.grammar.terminal_state:
                # finished: EOS is certain, whatever the scores say (keeps EOS legal after EOS,
                # which assisted decoding evaluates)
                out[r].fill_(-torch.inf)
                out[r, list(self.grammar.eos_token_ids)] = 0.0
                continue
            remaining = self.remaining(len(generated))
            if self._masking and self._mask_row(out, scores, r, state, remaining):
                self._remember(self._steps, generated, _MASKING_STEP)
                continue
            if sane is None:
                peak = scores.max()  # one pass: NaN/+inf propagate
                sane = bool(torch.isfinite(peak) or peak == -torch.inf)
            logits = scores[r] if sane else self._finite_scores(scores[r], state, remaining)
            ctx = PhiContext(state, generated, logits, remaining, prompt)
            step = self.estimator.step(ctx)
            self._remember(self._steps, generated, step.diagnostics)
            log_phi = step.log_phi
            if not bool(torch.isfinite(log_phi).any()):
                log_phi = self._out_of_budget(state)
            # log p_t + log Φ̂ up to the row's normaliser, which softmax ignores
            row_out = logits[:vocab].double() + log_phi.to(logits.device)
            if not bool(torch.isfinite(row_out).any()):
                dead = self._conflict(generated, log_phi)
                if not self.beam_search:
                    raise dead
            out[r, :vocab] = row_out.to(scores.dtype)
        if dead is not None and not bool(torch.isfinite(out).any()):
            raise dead
        return out

    def _mask_row(
        self, out: torch.Tensor, scores: torch.Tensor, r: int, state: Any, remaining: int | None
    ) -> bool:
        """Masking's fast path: the incoming scores on A_t, −inf elsewhere (the same law as
        log p_t + 0 on A_t: softmax ignores the per-row constant). False when an admissible
        score is NaN or +inf, or none is finite: the general path then masks bad scores off
        A_t, applies the budget fallback or raises."""
        vocab = self.grammar.vocab_size
        kept = out[r, :vocab]
        if scores.device.type == "cpu" and scores.dtype in BIAS_DTYPES:
            # scores + (0 on A_t, −inf elsewhere): a third of torch.where's time on a CPU, and
            # in numpy where it can (single-threaded: no thread-pool round trip for 50k floats)
            bias = self.grammar.admissible_bias(state, remaining, scores.dtype)
            if scores.dtype == torch.bfloat16:  # numpy has no bfloat16
                torch.add(scores[r, :vocab], bias, out=kept)
                peak = kept.max().item()
            else:
                row = kept.numpy()
                with np.errstate(invalid="ignore"):  # +inf − inf is NaN: caught below
                    np.add(scores[r, :vocab].detach().numpy(), bias.numpy(), out=row)
                peak = row.max()
        else:
            mask = self.grammar.admissible(state, remaining).to(scores.device)
            kept.copy_(torch.where(mask, scores[r, :vocab], -torch.inf))
            peak = kept.max().item()
        if math.isfinite(peak):  # NaN and +inf propagate through max
            return True
        kept.fill_(-torch.inf)  # nothing finite: the general path decides
        return False

    def split(
        self, row: Sequence[int], r: int = 0, rows: int = 1
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(prompt without its left padding, the grammar's tokens) of row ``r`` of ``rows``."""
        return tuple(row[self._pad(r, rows) : self.prompt_length]), tuple(row[self.prompt_length :])

    def _given(self, width: int) -> int:
        """Grammar tokens that were part of the input (a continuation), not generated."""
        start = self.input_length if self.input_length is not None else width
        return start - self.prompt_length

    def _pad(self, row: int, rows: int) -> int:
        """Left-padding columns of ``row`` (rows of an expanded batch share their prompt's)."""
        if self._pads is None:
            return 0
        if rows % len(self._pads):
            raise InvalidArgumentError(
                f"attention_mask has {len(self._pads)} rows, which does not divide the batch of "
                f"{rows}"
            )
        return self._pads[row // (rows // len(self._pads))]

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
        """Nothing admissible fits the budget (a pushdown grammar looks one token ahead, so a
        member can outgrow the budget): draw from A_t, unweighted, and warn once. The output is
        then cut off by the budget, never made invalid; a row of −inf would crash sampling."""
        if not self._warned_budget:
            self._warned_budget = True
            warnings.warn(
                f"the token budget (max_new_tokens={self.max_new_tokens}) ran out before "
                f"{self.grammar.source} could reach a member: the output will be cut off "
                "(a pushdown grammar counts its shortest completion only one token ahead); "
                "raise max_new_tokens",
                stacklevel=3,
            )
        mask = self.grammar.allowed(state)
        log_phi = torch.full((self.grammar.vocab_size,), -torch.inf, dtype=torch.float64)
        log_phi[mask] = 0.0
        return log_phi


_PUSHDOWN_STATES = 256  # pushdown parser snapshots kept per processor (each ~MBs)
# masking's per-step diagnostics, as UniformPhi.step computes them: Φ̄ = 1, no spread, no bound
_MASKING_STEP = PhiDiagnostics(1.0, 0.0, None, None, 0.0)


def left_padding(attention_mask: Any) -> list[int]:
    """Leading padding columns per row of a left-padded attention mask.

    Raises:
        InvalidArgumentError: not a 2-D mask, or padding that is not on the left.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.processors import left_padding
        >>> left_padding(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
        [2, 0]
    """
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise InvalidArgumentError("attention_mask must be a 2-D tensor (batch × length)")
    mask = attention_mask.bool()
    pads = (~mask).int().cumprod(dim=1).sum(dim=1)  # leading zeros
    if bool((mask.sum(dim=1) + pads != mask.shape[1]).any()):
        raise InvalidArgumentError(
            "attention_mask has padding after the first real token: decoder-only generation "
            "needs left padding (tokenizer.padding_side = 'left')"
        )
    return pads.tolist()


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
