"""A position in a pushdown grammar: :class:`PushdownState` (a parser snapshot, a value never
written after it is made) and :class:`Memo` (what the grammar's core computes about one: its
mask, whether it accepts), which the grammar keeps beside the state, not in it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["Memo", "PushdownState"]


class PushdownState:
    """A position in a :class:`PushdownGrammar`: an immutable parser snapshot, with the tokens
    that reached it. Nothing writes a state after it is made (the grammar keeps what it learns
    about one beside it: :class:`Memo`, and the budget rule its own); a write raises
    ``AttributeError``.

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


class Memo:
    """What a :class:`~hf_fvo.grammar.pushdown.PushdownGrammar` has computed about one of its
    states, kept beside it (by the grammar, weakly keyed by the state) rather than in it: the
    parser's mask (packed, as 0/1 bytes, as a tensor) and whether it accepts."""

    __slots__ = ("accepting", "bits", "mask", "words")

    def __init__(self) -> None:
        self.words: np.ndarray | None = None  # admissible non-EOS ids, packed (uint32 words)
        self.bits: np.ndarray | None = None  # the same, one 0/1 byte per id, on first use
        self.mask: torch.Tensor | None = None  # the same, unpacked (non-EOS ids < n)
        self.accepting: bool | None = None
