"""What a position in a pushdown grammar is and what the grammar learns about it:
:class:`PushdownState` (a parser snapshot: a value, never written after it is made),
:class:`Memo` (what the grammar has computed about one state — its masks, its witness, the
budget rule's checks by room — kept by the grammar beside the state, not in it), what a state
knows of its completion (:data:`UNKNOWN`, a plain tuple inherited from its parent,
:class:`Found` by its own search, :class:`Loose` from a splice or a depth-first search alone),
and the other parsers that follow it token by token (:class:`Follower`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from hf_fvo.errors import GrammarError
from hf_fvo.grammar.pushdown.engine import limits

__all__ = ["UNKNOWN", "Follower", "Found", "LazyCheck", "Loose", "Memo", "PushdownState",
           "RoomCheck", "SharedHeirs"]  # fmt: skip

UNKNOWN: Any = object()  # a state's witness before it is searched for


class PushdownState:
    """A position in a :class:`PushdownGrammar`: an immutable parser snapshot, with the tokens
    that reached it. Nothing writes a state after it is made (the grammar keeps what it learns
    about one in a :class:`Memo` of its own); a write raises ``AttributeError``.

    Compare states by identity only; equal texts reached by different token sequences are
    different states.
    """

    __slots__ = ("__weakref__", "_matcher", "_owner", "_path", "_utf8")

    def __init__(self, owner: Any, matcher: Any, utf8: int, path: tuple[int, ...] = ()) -> None:
        put = object.__setattr__
        put(self, "_owner", owner)  # its PushdownGrammar
        put(self, "_matcher", matcher)  # never consumed after construction
        put(self, "_utf8", utf8)  # the UTF-8 automaton's state after the text
        put(self, "_path", path)  # the tokens from the initial state (for the probe parser)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a PushdownState is a value: {name} cannot be written")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a PushdownState is a value: {name} cannot be deleted")

    def __repr__(self) -> str:
        return f"PushdownState(at 0x{id(self):x})"


class SharedHeirs(NamedTuple):
    """Witnesses a budget check found for many tokens at once (a certificate): which ids it
    covers (0/1 per id), the witness by key, and each id's key."""

    ids: np.ndarray
    witnesses: dict[int, tuple[int, ...]]
    keys: np.ndarray


class RoomCheck:
    """What the budget checks for one room found at one state so far: the admitted non-EOS
    ids (0/1 per id, ``None`` until the whole set is computed), the children's witnesses by
    token (``heirs``) and those shared by many tokens (``shared``)."""

    __slots__ = ("heirs", "keep", "shared")

    def __init__(self) -> None:
        self.keep: np.ndarray | None = None
        self.heirs: dict[int, tuple[int, ...]] = {}
        self.shared: SharedHeirs | None = None


class LazyCheck(NamedTuple):
    """The token-by-token budget rule at one state and room
    (:meth:`PushdownGrammar.lazy_admissible`): the verdicts so far, the whole set once
    resolved (a one-item list), and the witness's tails and text it tests with."""

    room: int
    verdicts: dict[int, bool]
    resolved: list[Any]
    tails: dict[int, tuple[int, ...]]
    text: bytes


class Memo:
    """What a :class:`PushdownGrammar` has computed about one of its states, kept beside it
    (by the grammar, weakly keyed by the state) rather than in it: the parser's mask (packed,
    as 0/1 bytes, as a tensor) and whether it accepts; the witness (a verified completion) and
    the spellings of its suffixes; the budget checks by room and the parent's (``hints``:
    their heirs are tried before a search); the token-by-token rule's last room; and the
    byte-vocabulary and marked parsers (see :class:`Follower`)."""

    __slots__ = ("accepting", "bits", "bytewise", "hints", "lazy", "marked", "mask", "rooms",
                 "suffixes", "witness", "words")  # fmt: skip

    def __init__(
        self,
        witness: Any = UNKNOWN,
        shadows: tuple[Any, Any] = (None, None),
        hints: dict[int, RoomCheck] | None = None,
        suffixes: tuple[bytes, list[Any]] | None = None,
    ) -> None:
        self.witness = witness  # a verified completion (token ids), None if none was found
        # per room a budget check was made for; the initial state's is shared by every request
        self.rooms: dict[int, RoomCheck] = {}
        self.suffixes = suffixes  # (witness text, its spellings)
        self.hints = hints
        self.bytewise, self.marked = shadows
        self.words: np.ndarray | None = None  # admissible non-EOS ids, packed (uint32 words)
        self.bits: np.ndarray | None = None  # the same, one 0/1 byte per id, on first use
        self.mask: torch.Tensor | None = None  # the same, unpacked (non-EOS ids < n)
        self.accepting: bool | None = None
        self.lazy: LazyCheck | None = None


class Found(tuple):
    """A state's witness found by its own search (not inherited from its parent)."""

    __slots__ = ()


class Loose(tuple):
    """A child's witness found by a splice or by a depth-first search alone
    (``PushdownGrammar._spliced``, ``_searched``): verified and within the room, but perhaps
    longer than what the whole search finds; ``PushdownGrammar.completion`` searches too when
    the child is asked for its own and keeps the shorter (unless it leaves slack enough)."""

    __slots__ = ()


class Follower:
    """Another llguidance parser that follows a grammar's states token by token: the same
    grammar over the byte vocabulary (for the completion searches) or the marked grammar (for
    the free-string certificate). A state's :class:`Memo` holds its parser, or (the nearest
    ancestor's parser, or ``None`` for the start, and the tokens since): parsers are built
    when first asked for, each from the nearest one built; the grammar is compiled on first
    use."""

    START: tuple[Any, tuple[int, ...]] = (None, ())

    def __init__(self, slot: str, tokenizer: Any, definition: str,
                 spell: Callable[[tuple[int, ...]], list[int]]) -> None:  # fmt: skip
        self._slot, self._tokenizer, self._spell = slot, tokenizer, spell
        self.definition = definition
        self._root: Any = None

    @staticmethod
    def child(value: Any, token: int) -> Any:
        """What a child state's memo holds after ``token``."""
        if isinstance(value, tuple):
            return (value[0], (*value[1], token))
        return None if value is None else (value, (token,))

    def parser(self, memo: Memo, required: bool = True) -> Any:
        """The parser at the state ``memo`` is of (not to be changed: copy it first). Where it
        cannot follow (the marked grammar does not compile) ``None``, unless ``required``
        (then an internal error: the byte vocabulary spells every text the grammar's
        vocabulary does)."""
        import llguidance

        value = getattr(memo, self._slot)
        if isinstance(value, tuple):
            base, tokens = value
            if base is None:
                if self._root is None:
                    root = llguidance.LLMatcher(self._tokenizer, self.definition, log_level=0,
                                                limits=limits())  # fmt: skip
                    self._root = False if root.is_error() else root
                base = self._root or None
            value = None
            if base is not None:
                value = base.deep_copy()
                if tokens and not value.consume_tokens(self._spell(tokens)):
                    value = None
            setattr(memo, self._slot, value)
        if value is None and required:
            raise GrammarError(f"internal: the {self._slot} parser cannot follow this state")
        return value
