"""The pushdown backend: llguidance's Earley parser over token bytes, behind :class:`Grammar`.

llguidance (an Outlines backend) parses the token bytes of JSON schemas, Lark and EBNF grammars
with a lazily built lexer, so compiling takes milliseconds and nothing is unrolled; a mask costs
tens of microseconds. Three things are added so that its admissible sets are exactly the
language's, token by token:

- ``no_forcing``: llguidance normally restricts grammar-forced text to its canonical
  tokenization (after ``((`` in ``(())|()`` only ``))`` is allowed, not ``)``); every
  tokenization of a member is a distinct sequence of the language, so forcing is off.
- UTF-8: llguidance admits some overlong byte sequences (``E0 90``); masks are intersected with
  a UTF-8 validity automaton over the token bytes, so text is always valid UTF-8.
- Token bytes come from :class:`~hf_fvo.grammar.TokenVocabulary`, the same bytes the automaton
  backend uses; special tokens spell nothing, and EOS is allowed exactly at accepting states.

States are immutable :class:`PushdownState` values (a parser snapshot each); ``next_state`` copies
the parser (~15 µs) and never changes the state it is given. What the grammar computes about a
state (its mask) is kept beside it, in a :class:`~hf_fvo.grammar.pushdown.state.Memo` the
grammar holds weakly by state; one lock per grammar makes its calls safe from several threads.

Budgets (``admissible(state, remaining)``, the completions and bounds) are answered by the
budget rule the compiler attaches (:class:`~hf_fvo.grammar.budget.CertifiedBudget`), which
keeps what it learns of a state beside it too.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import (
    BudgetTooSmallError,
    EmptyLanguageError,
    GrammarError,
    InvalidArgumentError,
    check_int,
)
from hf_fvo.grammar.bitmask import bias_table, pack
from hf_fvo.grammar.interface import Grammar, LazyAdmissible, _same_rows, bias_bits
from hf_fvo.grammar.pushdown.engine import (
    PushdownTokenizer,
    canonical_json,
    limits,
    translate_error,
)
from hf_fvo.grammar.pushdown.state import Memo, PushdownState

__all__ = ["PushdownGrammar", "PushdownState"]


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public method of :class:`PushdownGrammar`, run under the grammar's lock (its memos
    and caches are shared by every caller; llguidance's mask calls inside still release the
    GIL)."""

    @functools.wraps(method)
    def run(self: PushdownGrammar, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


class PushdownGrammar(Grammar):
    """A grammar enforced by llguidance's pushdown parser (JSON schema, Lark, EBNF, regex).

    Build one with :meth:`Grammar.from_json_schema` (the default backend for schemas),
    :meth:`Grammar.from_lark`, :meth:`Grammar.from_ebnf` or
    ``Grammar.from_regex(..., backend="pushdown")``.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, tok,
        ...                              whitespace="")
        >>> g.backend, g.is_accepting(g.walk(tok.encode("[1,22]"))), g.walk(tok.encode("[1,]"))
        ('pushdown', True, None)
    """

    backend = "pushdown"
    states_kept = 256  # (parser snapshots: each up to a few MB)

    def __init__(
        self,
        definition: str,
        tokenizer: PushdownTokenizer,
        vocab_size: int,
        source: str,
        notes: Sequence[str] = (),
        finite: bool | None = None,
        *,
        budget: Any,
    ) -> None:
        """Compile an llguidance grammar definition; use the ``Grammar.from_*`` constructors.
        ``finite=True`` states that the language is finite (shown from its JSON schema);
        ``budget`` is the budget rule that answers for it (a
        :class:`~hf_fvo.grammar.budget.CertifiedBudget`, attached here)."""
        self._definition = definition
        self._vocab = self._vocabulary = tokenizer.vocab
        self._vocab_size = int(vocab_size)
        self._source = source
        self._notes = tuple(notes)
        self._finite = True if finite else None
        self._setup(tokenizer)
        budget.attach(self)

    def _setup(self, tokenizer: PushdownTokenizer) -> None:
        import llguidance

        self._n = len(self._vocab)
        self._eos = self._vocab.eos_token_ids
        self._nwords = tokenizer.words
        self._tokenizer = tokenizer
        # what is known about each state, beside it (it dies with the state); one lock for
        # every call that computes or reads it (the budget rule's too)
        self._memos: weakref.WeakKeyDictionary[PushdownState, Memo] = weakref.WeakKeyDictionary()
        self._lock = threading.RLock()
        # the byte filter (packed like the parser's masks): UTF-8, and canonical escapes in
        # llguidance's JSON mode
        if not canonical_json(self._definition):
            self._utf8_next, self._ok_words = tokenizer.utf8_next, tokenizer.ok_words
            self._completer = tokenizer.completer
        else:
            self._utf8_next, self._ok_words, self._completer = tokenizer.json_text()
        root = llguidance.LLMatcher(tokenizer.llg, self._definition, log_level=0, limits=limits())
        if root.is_error():
            raise translate_error(root.get_error(), self._source)
        self._initial = PushdownState(self, root, 0)
        self._memos[self._initial] = Memo()
        self._terminal = PushdownState(self, None, 0)
        self._memos[self._terminal] = terminal = Memo()
        terminal.accepting = True
        if not self.is_accepting(self._initial) and not self._bits(self._initial).any():
            raise EmptyLanguageError(f"{self._source}: no token sequence spells a member")

    # -- the Grammar interface ------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    @property
    def source(self) -> str:
        return self._source

    @property
    def notes(self) -> tuple[str, ...]:
        """What the compiler dropped because it constrains nothing (e.g. a ``format`` the JSON
        Schema spec does not define, which the spec makes an annotation)."""
        return self._notes

    @property
    def definition(self) -> str:
        """The llguidance grammar this was compiled from."""
        return self._definition

    @property
    def initial_state(self) -> PushdownState:
        return self._initial

    @property
    def terminal_state(self) -> PushdownState:
        return self._terminal

    @property
    def is_finite(self) -> bool | None:
        # True where compile_json_schema showed it from the schema; else not known
        return self._finite

    @property
    def tokenizer_fingerprint(self) -> str:
        return self._vocab.fingerprint

    @_locked
    def allowed(self, state: PushdownState) -> torch.Tensor:
        self._check_state(state)
        mask = torch.zeros(self._vocab_size, dtype=torch.bool)
        if state is not self._terminal:
            self._bits(state)
            mask[: self._n] = self._memos[state].mask
        if self.is_accepting(state):
            mask[list(self._eos)] = True
        return mask

    @_locked
    def next_state(self, state: PushdownState, token: int) -> PushdownState | None:
        self._check_state(state)
        token = int(token)
        if token in self._eos:
            return self._terminal if self.is_accepting(state) else None
        if state is self._terminal or not 0 <= token < self._n:
            return None
        if not (int(self._words(state)[token >> 5]) >> (token & 31)) & 1:
            return None
        matcher = state._matcher.deep_copy()
        if not matcher.consume_token(token):
            raise GrammarError(f"internal: llguidance refused token {token} its mask allowed")
        child = PushdownState(self, matcher, int(self._utf8_next[state._utf8, token]),
                              (*state._path, token))  # fmt: skip
        self._memos[child] = Memo()
        self._budget.born(state, token, child)
        return child

    @_locked
    def is_accepting(self, state: PushdownState) -> bool:
        self._check_state(state)
        memo = self._memos[state]
        if memo.accepting is None:
            memo.accepting = bool(state._utf8 == 0 and state._matcher.is_accepting())
        return memo.accepting

    # -- budgets: the budget rule's answers ------------------------------------------------------

    @property
    def budget_rule(self) -> Any:
        """The :class:`~hf_fvo.grammar.budget.CertifiedBudget` that answers this grammar's
        budgets (the completions and bounds below, ``admissible(state, remaining)``)."""
        return self._budget

    @_locked
    def min_tokens_to_accept(self, state: PushdownState) -> int:
        return self._budget.min_tokens_to_accept(state)

    @_locked
    def shortest_bounds(
        self, state: PushdownState, enough: int | None = None
    ) -> tuple[int, int | None]:
        """With a final check, at the initial state the bounds are on members that pass it:
        the upper one a member that the parser and the check both pass."""
        lower, upper = self._budget.shortest_bounds(state, enough)
        if state is self._initial and self._final_check is not None:
            upper = self._budget.checked_upper(self.check)
        return lower, upper

    @_locked
    def budget_refusal(
        self, state: PushdownState, budget: int, what: str = "the budget", remedy: str = ""
    ) -> GrammarError | None:
        """Where the lower bound counts what the final check decides (``key_order="any"``: the
        required keys), a budget below it is refused before the masks are asked: they admit
        shorter texts, every one of which the check fails."""
        if state is self._initial and self._budget.checked_lower:
            lower, upper = self.shortest_bounds(state, enough=check_int("budget", budget))
            if lower + 1 > budget:
                named = ", ".join(dict.fromkeys(f"{c.pointer}: {c.keyword}" for c in self.checked))
                found = "" if upper is None else f" (the shortest member found has {upper})"
                return BudgetTooSmallError(
                    f"{what} is below the shortest member of {self.source} that passes its "
                    f"final check ({named}): it needs at least {lower} tokens plus EOS{found}; "
                    f"the masks alone admit shorter texts, which the check refuses{remedy}"
                )  # fmt: skip
        return super().budget_refusal(state, budget, what, remedy)

    @_locked
    def tokens_to_accept(self, state: PushdownState) -> int | None:
        return self._budget.tokens_to_accept(state)

    @_locked
    def completion(self, state: PushdownState) -> tuple[int, ...] | None:
        """A token sequence (EOS excluded) that takes ``state`` to acceptance, verified by the
        parser (:meth:`CertifiedBudget.completion`)."""
        return self._budget.completion(state)

    @_locked
    def admissible(self, state: PushdownState, remaining: int | None) -> torch.Tensor:
        return self._budget.admissible(state, remaining)

    @_locked
    def lazy_admissible(self, state: PushdownState, remaining: int | None) -> LazyAdmissible | None:
        return self._budget.lazy_admissible(state, remaining)

    @_locked
    def admissible_bias(
        self, state: PushdownState, remaining: int | None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        uint, neg_inf = bias_bits(dtype)
        keep = self._budget.kept(state, remaining)
        if keep is not None:  # the budget check's set, straight into the bias
            bias = np.full(self._vocab_size, neg_inf, dtype=uint)
            np.multiply(np.subtract(1, keep, dtype=uint), neg_inf, out=bias[: self._n])
            if self.is_accepting(state):
                bias[list(self._eos)] = 0
            return torch.from_numpy(bias).view(dtype)
        # straight from the parser's packed mask: one table lookup per byte of it
        if not self._budget.parser_only(state, remaining):
            return super().admissible_bias(state, remaining, dtype)
        self._check_state(state)
        words = self._words(state)
        bias = np.take(bias_table(uint, neg_inf), words.view(np.uint8), axis=0).reshape(-1)
        if len(bias) < self._vocab_size:  # ids past the parser's vocabulary: never admissible
            bias = np.concatenate([bias, np.full(self._vocab_size - len(bias), neg_inf, uint)])
        bias = bias[: self._vocab_size]
        if self.is_accepting(state):
            bias[list(self._eos)] = 0
        return torch.from_numpy(bias).view(dtype)

    @_locked
    def admissible_words(
        self, states: Sequence[PushdownState], remaining: Sequence[int | None]
    ) -> np.ndarray:
        _same_rows(states, remaining)
        out = np.zeros((len(states), (self._vocab_size + 31) // 32), dtype=np.int32)
        plain, other = [], []
        for i, (state, left) in enumerate(zip(states, remaining, strict=True)):
            self._check_state(state)
            (plain if self._budget.parser_only(state, left) else other).append(i)
        self._fill_words([states[i] for i in plain])
        for i in plain:  # the parser's mask, EOS where the state accepts: allowed(), packed
            state = states[i]
            out[i, : self._nwords] = self._memos[state].words.view(np.int32)
            if self.is_accepting(state):
                self._set_eos(out[i])
        if other:
            out[other] = super().admissible_words([states[i] for i in other],
                                                  [remaining[i] for i in other])  # fmt: skip
        return out

    def _packed(self, state: PushdownState, remaining: int | None) -> np.ndarray:
        """The budget check's set packed straight from its 0/1 array (no mask tensor); the
        other rows (EOS only, or nothing) as :meth:`admissible` says."""
        keep = self._budget.kept(state, remaining)
        if keep is None:
            return super()._packed(state, remaining)
        row = np.zeros((self._vocab_size + 31) // 32, dtype=np.int32)
        words = pack(keep)
        row[: len(words)] = words
        if self.is_accepting(state):
            self._set_eos(row)
        return row

    def _set_eos(self, row: np.ndarray) -> None:
        """Set the EOS ids' bits in one packed row."""
        for e in self._eos:
            row.view(np.uint32)[e >> 5] |= np.uint32(1 << (e & 31))

    def _fill_words(self, states: Sequence[PushdownState]) -> None:
        """The parser's masks of the distinct ``states`` not computed yet, together: one
        llguidance call fills them in parallel threads (it releases the GIL)."""
        memos = self._memos
        todo = list({id(s): s for s in states if memos[s].words is None}.values())
        if len(todo) < 2:
            for state in todo:
                self._words(state)
            return
        words = np.zeros((len(todo), self._nwords), dtype=np.int32)
        _executor().unsafe_compute_mask_ptr(
            [(state._matcher, i) for i, state in enumerate(todo)],
            words.ctypes.data, self._nwords * 4, len(todo),
        )  # fmt: skip
        for state, row in zip(todo, words.view(np.uint32), strict=True):
            memos[state].words = row & self._ok_words[state._utf8]

    # -- internals ------------------------------------------------------------------------------

    def _words(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, packed as the parser writes them (bit
        ``t & 31`` of word ``t >> 5``), UTF-8 filter applied; computed once per state."""
        memo = self._memos[state]
        if memo.words is None:
            words = np.zeros(self._nwords, dtype=np.uint32)
            state._matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
            words &= self._ok_words[state._utf8]
            memo.words = words
        return memo.words

    def _bits(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, one 0/1 byte per id < n (the bool
        tensor ``Memo.mask`` shares its memory)."""
        memo = self._memos[state]
        if memo.bits is None:
            words = self._words(state)
            memo.bits = np.unpackbits(words.view(np.uint8), count=self._n, bitorder="little")
            memo.mask = torch.from_numpy(memo.bits.view(np.bool_))
        return memo.bits

    def _check_state(self, state: Any) -> None:
        if not isinstance(state, PushdownState) or state._owner is not self:
            raise InvalidArgumentError(f"{state!r} is not a state of this grammar ({self._source})")

    def __getstate__(self) -> dict[str, Any]:
        return {
            "definition": self._definition,
            "vocab": self._vocab,
            "vocab_size": self._vocab_size,
            "source": self._source,
            "notes": self._notes,
            "finite": self._finite,
            "budget": self._budget,  # (its facts, not its memos)
            "check": self._final_check,  # (what the masks do not enforce: the language's own)
            "checked": self._checked,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._definition = state["definition"]
        self._vocab = self._vocabulary = state["vocab"]
        self._vocab_size = state["vocab_size"]
        self._source = state["source"]
        self._notes = state["notes"]
        self._finite = state.get("finite")
        self._setup(PushdownTokenizer(self._vocab))
        state["budget"].attach(self)
        if state.get("check") is not None:
            self._attach_check(state["check"], state["checked"])

    def __repr__(self) -> str:
        return f"PushdownGrammar({self._source}, vocab_size={self._vocab_size})"


@functools.cache
def _executor() -> Any:
    """llguidance's thread pool for batched masks (one per process)."""
    import llguidance

    return llguidance.LLExecutor()
