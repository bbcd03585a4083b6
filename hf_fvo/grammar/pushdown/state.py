"""What a position in a pushdown grammar carries: :class:`PushdownState` (a parser snapshot and
the budget rule's memories), what it knows of its completion (:data:`UNKNOWN`, a plain tuple
inherited from its parent, :class:`Found` by its own search, :class:`Loose` from a splice or a
depth-first search alone), and the other parsers that follow it token by token
(:class:`Follower`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import GrammarError
from hf_fvo.grammar.pushdown.engine import limits

__all__ = ["UNKNOWN", "Follower", "Found", "Loose", "PushdownState"]

UNKNOWN: Any = object()  # a state's witness before it is searched for


class PushdownState:
    """A position in a :class:`PushdownGrammar`: an immutable parser snapshot.

    Compare states by identity only; equal texts reached by different token sequences are
    different states.
    """

    __slots__ = (
        "_accepting", "_bits", "_bytewise", "_hints", "_lazy", "_marked", "_mask", "_matcher",
        "_owner", "_path", "_rooms", "_suffixes", "_utf8", "_witness", "_words",
    )  # fmt: skip

    def __init__(
        self,
        owner: Any,  # its PushdownGrammar
        matcher: Any,
        utf8: int,
        witness: Any = UNKNOWN,
        path: tuple[int, ...] = (),
        shadows: tuple[Any, Any] = (None, None),
        hints: dict[int, list[Any]] | None = None,
    ) -> None:
        self._owner = owner
        self._path = path  # the tokens from the initial state (for the probe parser)
        self._witness = witness  # a verified completion (token ids), None if none was found
        # per room a budget check was made for: [keep, heirs, heirs shared by many tokens]
        # (keep: 0/1 per id; heirs: children's witnesses by token; shared: (0/1 per id,
        # witness by a key, each id's key)); the initial state is shared by every request
        self._rooms: dict[int, list[Any]] = {}
        self._suffixes: tuple[bytes, list[Any]] | None = None  # (witness text, its spellings)
        self._hints = hints  # the parent's checks by room (their heirs: tried before a search)
        # the byte-vocabulary parser and the marked grammar's here (see Follower)
        self._bytewise, self._marked = shadows
        self._matcher = matcher  # never consumed after construction
        self._utf8 = utf8
        self._words: np.ndarray | None = None  # admissible non-EOS ids, packed (uint32 words)
        self._bits: np.ndarray | None = None  # the same, one 0/1 byte per id, on first use
        self._mask: torch.Tensor | None = None  # the same, unpacked (non-EOS ids < n)
        self._accepting: bool | None = None
        self._lazy: tuple | None = None  # (room, verdicts, [set], tails, witness text)

    def __repr__(self) -> str:
        return f"PushdownState(at 0x{id(self):x})"


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
    the free-string certificate). A state holds its parser, or (the nearest ancestor's parser,
    or ``None`` for the start, and the tokens since): parsers are built when first asked for,
    each from the nearest one built; the grammar is compiled on first use."""

    START: tuple[Any, tuple[int, ...]] = (None, ())

    def __init__(self, slot: str, tokenizer: Any, definition: str,
                 spell: Callable[[tuple[int, ...]], list[int]]) -> None:  # fmt: skip
        self._slot, self._tokenizer, self._spell = slot, tokenizer, spell
        self.definition = definition
        self._root: Any = None

    @staticmethod
    def child(value: Any, token: int) -> Any:
        """What a child state holds after ``token``."""
        if isinstance(value, tuple):
            return (value[0], (*value[1], token))
        return None if value is None else (value, (token,))

    def parser(self, state: PushdownState, required: bool = True) -> Any:
        """The parser at ``state`` (not to be changed: copy it first). Where it cannot follow
        (the marked grammar does not compile) ``None``, unless ``required`` (then an internal
        error: the byte vocabulary spells every text the grammar's vocabulary does)."""
        import llguidance

        value = getattr(state, self._slot)
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
            setattr(state, self._slot, value)
        if value is None and required:
            raise GrammarError(f"internal: the {self._slot} parser cannot follow this state")
        return value
