"""Bounded, thread-safe memo tables for compiled grammars and per-tokenizer artifacts.

Compiling is the expensive half of the compile/match split, so results are kept by key
(grammar, tokenizer bytes, options) and reused; the least recently used entry goes first.

Example:
    >>> from hf_fvo.grammar.cache import Memo
    >>> memo = Memo(2)
    >>> memo.get_or_build("a", lambda: 1), memo.get_or_build("a", lambda: 2)
    (1, 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Memo", "clear_all", "vocabulary_of"]

_ALL: list[Memo] = []


class Memo:
    """An LRU table of at most ``size`` entries; a build runs outside the lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        _ALL.append(self)

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def clear_all() -> None:
    """Empty every memo table (the next compile rebuilds)."""
    for memo in _ALL:
        memo.clear()


def vocabulary_of(tokenizer: Any, eos_token_id: Any = None) -> Any:
    """The :class:`~hf_fvo.grammar.TokenVocabulary` of a tokenizer (or the vocabulary itself)."""
    from hf_fvo.grammar.vocabulary import TokenVocabulary

    if isinstance(tokenizer, TokenVocabulary):
        return tokenizer
    return TokenVocabulary.from_tokenizer(tokenizer, eos_token_id)
