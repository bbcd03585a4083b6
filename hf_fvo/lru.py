"""A bounded, thread-safe table that forgets its least recently used entry first.

Every cache in hf_fvo is one of these, held by the object that owns what it caches: compiled
grammars by their :class:`~hf_fvo.grammar.GrammarCompiler`, grammar states by a row tracker,
model rows by a :class:`~hf_fvo.phi.PrefixLM`, estimators named by string by their model.

Example:
    >>> from hf_fvo.lru import LRU
    >>> table = LRU(2)
    >>> table.get_or_build("a", lambda: 1), table.get_or_build("a", lambda: 2)
    (1, 1)
    >>> table.put("b", 2); table.put("c", 3)  # "a" was used least recently: it goes
    >>> "a" in table, len(table)
    (False, 2)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from hf_fvo.errors import check_int

__all__ = ["LRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``size`` entries; reading or writing an entry makes it the most recent.

    ``get_or_build`` runs the build outside the lock, so two threads may build the same entry
    once each (the second result is kept); nothing waits on a slow build.

    Args:
        size: The most entries kept (≥ 1); settable, and shrinking it evicts at once.
    """

    def __init__(self, size: int) -> None:
        self._size = check_int("size", size, minimum=1)
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    @size.setter
    def size(self, size: int) -> None:
        self._size = check_int("size", size, minimum=1)
        with self._lock:
            self._evict()

    def get(self, key: K, default: Any = None) -> V | Any:
        """The entry at ``key`` (now the most recent), or ``default``."""
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` at ``key`` as the most recent entry, evicting beyond :attr:`size`."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            self._evict()

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The entry at ``key``, built by ``build()`` and stored when missing."""
        missing = object()
        value = self.get(key, missing)
        if value is missing:
            value = build()
            self.put(key, value)
        return value

    def pop(self, key: K, default: Any = None) -> V | Any:
        with self._lock:
            return self._items.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def values(self) -> list[V]:
        """The entries, least recently used first (a copy)."""
        with self._lock:
            return list(self._items.values())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def _evict(self) -> None:
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"size": self._size, "items": list(self._items.items())}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._size = state["size"]
        self._items = OrderedDict(state["items"])
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LRU({len(self._items)}/{self._size})"
