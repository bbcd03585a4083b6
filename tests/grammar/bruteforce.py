"""A brute-force oracle for admissible sets: Python ``regex`` partial matching over token bytes.

Independent of outlines-core: a token t is admissible after prefix bytes w iff w·t is valid UTF-8
(up to an incomplete last character) and the decoded text is a prefix of some full match.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Sequence

import regex

from hf_fvo import Grammar

_CONT = range(0x80, 0xC0)


def _completions(tail: bytes) -> list[str]:
    """Characters whose UTF-8 encoding starts with the incomplete ``tail``.

    All of them when one byte is missing; otherwise every choice of the next byte with the
    rest filled at both ends of the continuation range. That is exact for character classes
    whose boundaries lie below U+0800 or at ends of continuation blocks, which holds for the
    patterns under test (ASCII classes, their complements, JSON's C1-control exclusion).
    """
    lead = tail[0]
    size = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
    missing = size - len(tail)
    if missing == 1:
        candidates = [tail + bytes([b]) for b in _CONT]
    else:
        candidates = [
            tail + bytes([b]) + bytes([fill]) * (missing - 1)
            for b in _CONT
            for fill in (0x80, 0xBF)
        ]
    out = []
    for c in candidates:
        with contextlib.suppress(UnicodeDecodeError):
            out.append(c.decode("utf-8"))
    return out


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """(decoded head, incomplete tail) or None when ``data`` is not a UTF-8 prefix."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" or exc.end != len(data):
            return None
        try:
            return data[: exc.start].decode("utf-8"), data[exc.start :]
        except UnicodeDecodeError:
            return None


class Oracle:
    """Admissibility of texts for a full-match ``pattern``.

    ``forbidden`` is a character the text may never contain (the grammar's reserved
    noncharacter); ``max_length`` bounds members' length in characters.
    """

    def __init__(
        self, pattern: str, max_length: int | None = None, forbidden: str | None = None
    ) -> None:
        self.rx = regex.compile(pattern)
        self.max_length = max_length
        self.forbidden = forbidden

    def _ok(self, text: str) -> bool:
        return self.forbidden is None or self.forbidden not in text

    def _prefix_text(self, text: str) -> bool:
        if not self._ok(text):
            return False
        if self.max_length is not None and len(text) > self.max_length:
            return False
        return self.rx.fullmatch(text, partial=True) is not None

    def is_prefix(self, data: bytes) -> bool:
        split = split_utf8(data)
        if split is None:
            return False
        head, tail = split
        if not tail:
            return self._prefix_text(head)
        return any(self._prefix_text(head + c) for c in _completions(tail))

    def is_member(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if self.max_length is not None and len(text) > self.max_length:
            return False
        return self._ok(text) and self.rx.fullmatch(text) is not None

    def allowed(self, prefix: bytes, token_bytes: Sequence[bytes | None]) -> set[int]:
        return {i for i, b in enumerate(token_bytes) if b and self.is_prefix(prefix + b)}


class DyckOracle(Oracle):
    """Bounded Dyck by a stack: a prefix is admissible iff it can be closed within the bound."""

    def __init__(self, depth: int, max_length: int, brackets: str = "()") -> None:
        self.depth, self.max_length = depth, max_length
        self.close = {brackets[i]: brackets[i + 1] for i in range(0, len(brackets), 2)}

    def _stack(self, text: str) -> list[str] | None:
        stack: list[str] = []
        for c in text:
            if c in self.close:
                stack.append(self.close[c])
                if len(stack) > self.depth:
                    return None
            elif not stack or stack.pop() != c:
                return None
        return stack

    def _prefix_text(self, text: str) -> bool:
        stack = self._stack(text)
        return stack is not None and len(text) + len(stack) <= self.max_length

    def is_member(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return self._stack(text) == [] and len(text) <= self.max_length


def bfs_states(grammar: Grammar, token_bytes: Sequence[bytes | None], depth: int):
    """Every state within ``depth`` tokens of the initial state, with one spelling of each."""
    seen = {grammar.initial_state: b""}
    frontier = deque([(grammar.initial_state, 0)])
    while frontier:
        state, d = frontier.popleft()
        if d == depth:
            continue
        groups = grammar.transitions(state)
        for k, nxt in enumerate(groups.next_states.tolist()):
            if nxt not in seen:
                token = int(groups.token_ids[int(groups.offsets[k])])
                seen[nxt] = seen[state] + token_bytes[token]
                frontier.append((nxt, d + 1))
    return seen
