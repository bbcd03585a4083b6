"""Where each row of a batch stands in the grammar, as a pure function of its tokens.

Transformers calls logits processors on prefixes that are later discarded (beam search, the
2γ+1 calls of an assisted round), so nothing here advances per call: a row's grammar state is
recomputed from its tokens, memoised by prefix. A :class:`RowTracker` knows the batch's
geometry (where the grammar's text starts in each row, left padding, the width generation
starts at), each row's remaining token budget, and the per-position diagnostics behind the
fidelity certificates. The logits processor, the drafts and the particle sampler all read rows
through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hf_fvo.errors import InvalidArgumentError, OutOfGrammarError, check_int
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import State, require_grammar
from hf_fvo.lru import LRU
from hf_fvo.phi import Certificate, PhiDiagnostics

__all__ = ["RowTracker", "left_padding"]


class RowTracker:
    """The grammar state, remaining budget and recorded diagnostics of every row.

    Args:
        grammar: The compiled grammar.
        prompt_length: Columns of ``input_ids`` before the grammar's text (left padding
            included). Default: the width of the first batch seen (:meth:`begin`). Tokens
            between it and the width generation starts at are a continuation the grammar
            resumes from.
        max_new_tokens: The budget, counted from the width generation starts at (``None``:
            unbounded).
        attention_mask: The input's attention mask (left padding), so :meth:`split` returns each
            row's prompt without its padding.
        cache_size: Prefixes remembered (LRU). A pushdown grammar's state holds a parser
            snapshot (megabytes with llguidance), so for those at most ``max(256, 4 × rows)``
            states are kept (an evicted one is rebuilt from its longest remembered prefix); the
            recorded diagnostics keep ``cache_size``.

    Raises:
        InvalidArgumentError: a malformed argument.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import RowTracker
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> rows = RowTracker(g, prompt_length=1, max_new_tokens=4)
        >>> prompt, generated = rows.split([1, *tok.encode("ye")])
        >>> rows.remaining(len(generated)), int(rows.admissible(generated).sum())  # "s"
        (3, 1)
    """

    def __init__(
        self,
        grammar: Grammar,
        prompt_length: int | None = None,
        max_new_tokens: int | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        cache_size: int = 4096,
    ) -> None:
        self.grammar = require_grammar(grammar)
        self.prompt_length = check_int("prompt_length", prompt_length, optional=True)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1, optional=True)
        self.input_length: int | None = None  # the width generation starts at
        self._cache_size = check_int("cache_size", cache_size, minimum=1)
        self._pads = None if attention_mask is None else left_padding(attention_mask)
        states = self._cache_size
        if grammar.states_kept is not None:
            states = min(states, grammar.states_kept)
        self._states: LRU[tuple[int, ...], State] = LRU(states)
        self._steps: LRU[tuple[int, ...], PhiDiagnostics] = LRU(self._cache_size)
        self._rows = 1  # the widest batch seen (bounds the pushdown state cache from below)

    def like(self, grammar: Grammar | None = None) -> RowTracker:
        """A tracker with this one's geometry (prompt, budget, padding, start width) and empty
        memories, for another processor over the same rows (a draft's)."""
        other = RowTracker(grammar or self.grammar, self.prompt_length, self.max_new_tokens,
                           cache_size=self._cache_size)  # fmt: skip
        other.input_length = self.input_length
        other._pads = self._pads
        return other

    def begin(self, input_ids: torch.Tensor) -> int:
        """Take a batch's geometry from ``input_ids`` (the first call fixes the defaults of
        ``prompt_length`` and the start width); returns its number of rows."""
        rows, width = input_ids.shape
        if self.prompt_length is None:
            self.prompt_length = width
        if self.input_length is None:
            self.input_length = width
        self.expect_rows(rows)
        return rows

    def expect_rows(self, rows: int) -> None:
        """Make room for ``rows`` rows' states (the widest batch seen, or the requests that
        share this tracker): a grammar with :attr:`~hf_fvo.grammar.Grammar.states_kept` (a
        pushdown grammar's 256) keeps ``max(states_kept, 4 × rows)`` of them, up to
        ``cache_size``."""
        if rows > self._rows:
            self._rows = rows
            kept = self.grammar.states_kept
            if kept is not None:
                self._states.size = min(self._cache_size, max(kept, 4 * rows))

    @property
    def rows(self) -> int:
        """The most rows this tracker has been asked to serve at once."""
        return self._rows

    # -- rows -----------------------------------------------------------------------------------

    def split(
        self, row: Sequence[int], r: int = 0, rows: int = 1
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(prompt without its left padding, the grammar's tokens) of row ``r`` of ``rows``."""
        start = self._start()
        return tuple(row[self._pad(r, rows) : start]), tuple(row[start:])

    def state(self, generated: tuple[int, ...]) -> State:
        """The grammar state after the grammar's tokens ``generated`` (memoised by prefix).

        Raises:
            OutOfGrammarError: a token leaves the grammar (naming where it came from).
        """
        hit = self._states.get(generated)
        if hit is not None:
            return hit
        if not generated:
            state = self.grammar.initial_state
        else:
            parent = self.state(generated[:-1]) if len(generated) < 64 else None
            if parent is None:
                parent = self._walk(generated[:-1])
            state = self._step(parent, generated, len(generated) - 1)
        self._states.put(generated, state)
        return state

    def remaining(self, generated_length: int) -> int | None:
        """Tokens still allowed (this one included) after ``generated_length`` tokens of the
        grammar's text, or ``None`` without a budget."""
        if self.max_new_tokens is None:
            return None
        start = self.input_length if self.input_length is not None else self._start()
        return self.max_new_tokens - (self._start() + generated_length - start)

    def admissible(self, generated: tuple[int, ...]) -> torch.Tensor:
        """A_t after ``generated`` within the row's remaining budget (a ``torch.bool`` mask)."""
        return self.grammar.admissible(self.state(generated), self.remaining(len(generated)))

    def is_finished(self, generated: tuple[int, ...]) -> bool:
        """Whether the row has ended (EOS consumed)."""
        return self.state(generated) == self.grammar.terminal_state

    def given(self, width: int) -> int:
        """Grammar tokens that were part of the input (a continuation), not generated."""
        start = self.input_length if self.input_length is not None else width
        return start - self._start()

    # -- diagnostics and certificates ---------------------------------------------------------

    def record(self, generated: tuple[int, ...], diagnostics: PhiDiagnostics) -> None:
        """Keep the diagnostics of the Φ̂ computed at this prefix (for certificates)."""
        self._steps.put(tuple(generated), diagnostics)

    def step_at(self, generated: Sequence[int]) -> PhiDiagnostics | None:
        """Diagnostics (Φ̄_t, dispersion, δ_t) of the last Φ̂ computed at this prefix, if kept."""
        return self._steps.get(tuple(generated))

    def certificate(self, generated: Sequence[int], skip: int = 0) -> Certificate:
        """The fidelity certificate of one generated sequence (prompt excluded): the kept
        diagnostics at each of its positions from ``skip`` (a continuation given as input) up
        to and including its first EOS."""
        generated = [int(t) for t in generated]
        eos = set(self.grammar.eos_token_ids)
        end = next((i + 1 for i, t in enumerate(generated) if t in eos), len(generated))
        return Certificate(tuple(self.step_at(tuple(generated[:i])) for i in range(skip, end)))

    # -- internals ------------------------------------------------------------------------------

    def _start(self) -> int:
        if self.prompt_length is None:
            raise InvalidArgumentError(
                "the tracker has seen no batch yet: pass prompt_length or call begin(input_ids)"
            )
        return self.prompt_length

    def _walk(self, generated: tuple[int, ...]) -> State:
        # Long prefixes: find the longest remembered ancestor instead of recursing.
        for cut in range(len(generated), -1, -1):
            hit = self._states.get(generated[:cut])
            if hit is not None or cut == 0:
                state = self.grammar.initial_state if hit is None else hit
                for i in range(cut, len(generated)):
                    state = self._step(state, generated, i)
                return state
        raise AssertionError("unreachable")

    def _step(self, state: State, generated: tuple[int, ...], position: int) -> State:
        g = self.grammar
        if state == g.terminal_state:
            return state  # the row has finished; Transformers pads it with anything
        token = generated[position]
        nxt = g.next_state(state, token)
        if nxt is None:
            start = self.input_length if self.input_length is not None else self._start()
            where = (
                "in the continuation given as input (the tokens between prompt_length and the "
                "input's width must begin a member)"
                if self._start() + position < start
                else "in generated text: the token was sampled outside the scores this processor "
                "returned (a processor or sampler that runs after it, or a processor reused "
                "across generate() calls)"
            )
            raise OutOfGrammarError(
                f"token {token} at grammar position {position} is not allowed by {g.source}; "
                f"it occurs {where}"
            )
        return nxt

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


def left_padding(attention_mask: Any) -> list[int]:
    """Leading padding columns per row of a left-padded attention mask.

    Raises:
        InvalidArgumentError: not a 2-D mask, or padding that is not on the left.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.tracker import left_padding
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
