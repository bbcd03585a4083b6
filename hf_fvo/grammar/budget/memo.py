"""What the budget rule knows of a state, kept beside it: its witness (:data:`UNKNOWN`, a plain
tuple inherited from its parent, :class:`Found` by its own search, :class:`Loose` from a splice
or a depth-first search alone), its checks by room (:class:`RoomCheck`, :class:`SharedHeirs`,
:class:`Opening`), all in one :class:`BudgetMemo`; and the other
parsers that follow a grammar's states token by token (:class:`Follower`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hf_fvo.errors import GrammarError
from hf_fvo.grammar.pushdown.engine import limits

__all__ = ["UNKNOWN", "BudgetMemo", "Follower", "Found", "Loose", "Opening", "RoomCheck",
           "SharedHeirs"]  # fmt: skip

UNKNOWN: Any = object()  # a state's witness before it is searched for


class SharedHeirs(NamedTuple):
    """Witnesses a budget check found for many tokens at once (a certificate): which ids it
    covers (0/1 per id), the witness by key, and each id's key."""

    ids: np.ndarray
    witnesses: dict[int, tuple[int, ...]]
    keys: np.ndarray


class RoomCheck:
    """What the budget checks for one room found at one state so far: the admitted non-EOS
    ids (0/1 per id, ``None`` until the whole set is computed), the children's witnesses by
    token (``heirs``) and those shared by many tokens (``shared``: a string's or the probe's
    certificate; ``classes``: the string classes'); its start (``opening``: :class:`Opening`,
    ``None`` until asked)."""

    __slots__ = ("classes", "heirs", "keep", "opening", "shared")

    def __init__(self) -> None:
        self.keep: np.ndarray | None = None
        self.opening: Opening | None = None
        self.heirs: dict[int, tuple[int, ...]] = {}
        self.shared: SharedHeirs | None = None
        self.classes: SharedHeirs | None = None


class Opening(NamedTuple):
    """A budget check's start at one state and room (``CertifiedBudget._opening``): the
    witness it starts from, the tokens its first test keeps (0/1 per id: those that spell a
    beginning of the witness's bytes, the rest fitting) and the parser operations that test
    spent (the check's work counts them)."""

    witness: Any
    keep: np.ndarray
    spent: int


class BudgetMemo:
    """What the budget rule (:class:`~hf_fvo.grammar.budget.CertifiedBudget`) has learned
    about one state, kept beside it (weakly keyed by the state) rather than in it: the
    witness (a verified completion) and the spellings of its suffixes; the budget checks by
    room and the parent's (``hints``: their heirs are tried before a search); the
    byte-vocabulary and marked parsers (see
    :class:`Follower`)."""

    __slots__ = ("bytewise", "hints", "marked", "rooms", "suffixes", "witness")

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


class Found(tuple):
    """A state's witness found by its own search (not inherited from its parent)."""

    __slots__ = ()


class Loose(tuple):
    """A child's witness found by a splice or by a depth-first search alone
    (``CertifiedBudget._spliced``, ``_searched``): verified and within the room, but perhaps
    longer than what the whole search finds; ``CertifiedBudget.completion`` searches too when
    the child is asked for its own and keeps the shorter (unless it leaves slack enough)."""

    __slots__ = ()


class Follower:
    """Another llguidance parser that follows a grammar's states token by token: the same
    grammar over the byte vocabulary (for the completion searches) or the marked grammar (for
    the free-string certificate). A state's :class:`Memo` holds its parser, or (the nearest
    ancestor's parser, or ``None`` for the start, and the tokens since): parsers are built
    when first asked for, each from the nearest one built; the grammar is compiled once
    (:meth:`compile`)."""

    START: tuple[Any, tuple[int, ...]] = (None, ())

    def __init__(self, slot: str, tokenizer: Any, definition: str,
                 spell: Callable[[tuple[int, ...]], list[int]]) -> None:  # fmt: skip
        self._slot, self._tokenizer, self._spell = slot, tokenizer, spell
        self.definition = definition
        self._root: Any = None

    def compile(self) -> Any:
        """The parser at the grammar's start (compiled once: tens of milliseconds for a large
        schema, which the budget rule pays when it is attached rather than in a step);
        ``None`` where the grammar does not compile."""
        import llguidance

        if self._root is None:
            root = llguidance.LLMatcher(self._tokenizer, self.definition, log_level=0,
                                        limits=limits())  # fmt: skip
            self._root = False if root.is_error() else root
        return self._root or None

    @staticmethod
    def child(value: Any, token: int) -> Any:
        """What a child state's memo holds after ``token``."""
        if isinstance(value, tuple):
            return (value[0], (*value[1], token))
        return None if value is None else (value, (token,))

    def parser(self, memo: BudgetMemo, required: bool = True) -> Any:
        """The parser at the state ``memo`` is of (not to be changed: copy it first). Where it
        cannot follow (the marked grammar does not compile) ``None``, unless ``required``
        (then an internal error: the byte vocabulary spells every text the grammar's
        vocabulary does)."""
        value = getattr(memo, self._slot)
        if isinstance(value, tuple):
            base, tokens = value
            if base is None:
                base = self.compile()
            value = None
            if base is not None:
                value = base.deep_copy()
                if tokens and not value.consume_tokens(self._spell(tokens)):
                    value = None
            setattr(memo, self._slot, value)
        if value is None and required:
            raise GrammarError(f"internal: the {self._slot} parser cannot follow this state")
        return value
