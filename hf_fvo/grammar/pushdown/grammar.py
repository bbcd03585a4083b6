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
the parser (~15 µs) and never changes the state it is given.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import EmptyLanguageError, GrammarError, InvalidArgumentError
from hf_fvo.grammar.interface import Grammar, bias_bits
from hf_fvo.grammar.pushdown.engine import PushdownTokenizer, limits, translate_error

__all__ = ["PushdownGrammar", "PushdownState"]


class PushdownState:
    """A position in a :class:`PushdownGrammar`: an immutable parser snapshot.

    Compare states by identity only; equal texts reached by different token sequences are
    different states.
    """

    __slots__ = ("_accepting", "_bits", "_mask", "_matcher", "_owner", "_utf8", "_words")

    def __init__(self, owner: PushdownGrammar, matcher: Any, utf8: int) -> None:
        self._owner = owner
        self._matcher = matcher  # never consumed after construction
        self._utf8 = utf8
        self._words: np.ndarray | None = None  # admissible non-EOS ids, packed (uint32 words)
        self._bits: np.ndarray | None = None  # the same, one 0/1 byte per id, on first use
        self._mask: torch.Tensor | None = None  # the same, unpacked (non-EOS ids < n)
        self._accepting: bool | None = None

    def __repr__(self) -> str:
        return f"PushdownState(at 0x{id(self):x})"


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

    def __init__(
        self,
        definition: str,
        tokenizer: PushdownTokenizer,
        vocab_size: int,
        source: str,
        notes: Sequence[str] = (),
        finite: bool | None = None,
    ) -> None:
        """Compile an llguidance grammar definition; use the ``Grammar.from_*`` constructors.
        ``finite=True`` states that the language is finite (shown from its JSON schema)."""
        self._definition = definition
        self._vocab = self._vocabulary = tokenizer.vocab
        self._vocab_size = int(vocab_size)
        self._source = source
        self._notes = tuple(notes)
        self._finite = True if finite else None
        self._setup(tokenizer)

    def _setup(self, tokenizer: PushdownTokenizer) -> None:
        import llguidance

        self._n = len(self._vocab)
        self._eos = self._vocab.eos_token_ids
        self._utf8_next = tokenizer.utf8_next
        self._nwords = tokenizer.words
        self._ok_words = tokenizer.ok_words  # the UTF-8 filter, packed like the parser's masks
        root = llguidance.LLMatcher(tokenizer.llg, self._definition, log_level=0, limits=limits())
        if root.is_error():
            raise translate_error(root.get_error(), self._source)
        self._initial = PushdownState(self, root, 0)
        self._terminal = PushdownState(self, None, 0)
        self._terminal._accepting = True
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

    def allowed(self, state: PushdownState) -> torch.Tensor:
        self._check_state(state)
        mask = torch.zeros(self._vocab_size, dtype=torch.bool)
        if state is not self._terminal:
            self._bits(state)
            mask[: self._n] = state._mask
        if self.is_accepting(state):
            mask[list(self._eos)] = True
        return mask

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
        return PushdownState(self, matcher, int(self._utf8_next[state._utf8, token]))

    def is_accepting(self, state: PushdownState) -> bool:
        self._check_state(state)
        if state._accepting is None:
            state._accepting = bool(state._utf8 == 0 and state._matcher.is_accepting())
        return state._accepting

    def min_tokens_to_accept(self, state: PushdownState) -> int:
        return 0 if self.is_accepting(state) else 1

    def admissible(self, state: PushdownState, remaining: int | None) -> torch.Tensor:
        mask = self.allowed(state)
        if remaining is None or remaining > 1:
            return mask
        if remaining < 1 or not self.is_accepting(state):
            return torch.zeros_like(mask)
        only_eos = torch.zeros_like(mask)
        only_eos[list(self._eos)] = True
        return only_eos

    def admissible_bias(
        self, state: PushdownState, remaining: int | None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        # straight from the parser's packed mask: one table lookup per byte of it
        if state is self._terminal or (remaining is not None and remaining <= 1):
            return super().admissible_bias(state, remaining, dtype)
        self._check_state(state)
        uint, neg_inf = bias_bits(dtype)
        words = self._words(state)
        bias = np.take(_bias_table(uint, neg_inf), words.view(np.uint8), axis=0).reshape(-1)
        if len(bias) < self._vocab_size:  # ids past the parser's vocabulary: never admissible
            bias = np.concatenate([bias, np.full(self._vocab_size - len(bias), neg_inf, uint)])
        bias = bias[: self._vocab_size]
        if self.is_accepting(state):
            bias[list(self._eos)] = 0
        return torch.from_numpy(bias).view(dtype)

    # -- internals ------------------------------------------------------------------------------

    def _words(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, packed as the parser writes them (bit
        ``t & 31`` of word ``t >> 5``), UTF-8 filter applied; computed once per state."""
        if state._words is None:
            words = np.zeros(self._nwords, dtype=np.uint32)
            state._matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
            words &= self._ok_words[state._utf8]
            state._words = words
        return state._words

    def _bits(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, one 0/1 byte per id < n (the bool
        tensor ``state._mask`` shares its memory)."""
        if state._bits is None:
            words = self._words(state)
            state._bits = np.unpackbits(words.view(np.uint8), count=self._n, bitorder="little")
            state._mask = torch.from_numpy(state._bits.view(np.bool_))
        return state._bits

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
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._definition = state["definition"]
        self._vocab = self._vocabulary = state["vocab"]
        self._vocab_size = state["vocab_size"]
        self._source = state["source"]
        self._notes = state["notes"]
        self._finite = state.get("finite")
        self._setup(PushdownTokenizer(self._vocab))

    def __repr__(self) -> str:
        return f"PushdownGrammar({self._source}, vocab_size={self._vocab_size})"


@functools.cache
def _bias_table(uint: type, neg_inf: Any) -> np.ndarray:
    """``table[b, i]``: bit i of byte b as a bias, 0 where set and −inf's bits where clear."""
    byte, bit = np.arange(256)[:, None], np.arange(8)[None, :]
    return np.where((byte >> bit) & 1, uint(0), neg_inf).astype(uint)
