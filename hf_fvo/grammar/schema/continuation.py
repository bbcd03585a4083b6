"""What finishes a match of a JSON-Schema ``pattern`` that a string began: the budget rule's
closings (:mod:`.closer`) write it where a string is left part-way through an anchored
pattern (``"pbj:gdbots`` under ``^pbj:[a-z]+:[a-z]+$``), which neither the pattern's
shortest match nor a search from the parser's state finishes in time.

The pattern is read by Python's parser (:func:`~.patterns.python_tree`, ECMA-262's reading:
``\\d`` and ``\\w`` ASCII) into a Thompson automaton over characters, run on the text so far,
then searched breadth first over plain ASCII for the nearest match. A heuristic the grammar
verifies (one parse) before it certifies anything, and bounded: at most :data:`_STATES`
automaton states and :data:`_VISITS` sets of them a call, no thread, no engine.

Example:
    >>> from hf_fvo.grammar.schema.continuation import continuation
    >>> continuation("^pbj:[a-z]+:[a-z]+$", "pbj:gdbots"), continuation("^[0-7]{3}$", "12")
    (':a', '0')
    >>> continuation("[0-9]{4}-[0-9]{2}", "x2024-1"), continuation("^[0-7]{3}$", "9")
    ('0', None)
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import deque
from typing import Any

from hf_fvo.grammar.schema.patterns import python_tree, regex_problem

__all__ = ["continuation", "pattern_states"]

_STATES = 1 << 15  # automaton states a pattern may need (counted repeats copied; a
# format's, uri-reference's: 5,481), else not read
_VISITS = 2048  # sets of states one search may visit before it gives up
_STEPS = 1 << 16  # moves (a set of states, a character) kept per pattern
# what a continuation writes, the likeliest first: plain ASCII a tokenizer spells cheaply (the
# quote and the backslash last: JSON escapes them)
_WRITTEN = "a0A-_.:/ bcdefghijklmnopqrstuvwxyz123456789BCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'()*+,;<=>?@[]^`{|}~\"\\"  # noqa: E501
_WRITTEN_CODES = sorted({ord(ch) for ch in _WRITTEN})
_TOP = 0x10FFFF
_DIGITS = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
          (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
          (0xFEFF, 0xFEFF))  # fmt: skip
_LINE_ENDS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))


class _Unread(Exception):
    """A construct this automaton does not read (an assertion, a backreference, flags)."""


def continuation(pattern: str, text: str) -> str | None:
    """The shortest plain ASCII text that, written after ``text``, makes a string ``pattern``
    matches (unanchored unless ``^``/``$`` say otherwise, as JSON Schema reads it): ``""``
    where ``text`` matches already, ``None`` where no such text is found (none exists, or
    the pattern is not read here: an assertion other than a leading ``^`` or a final ``$``,
    flags, backreferences, or more than :data:`_STATES` states)."""
    machine = _machine(pattern)
    return None if machine is None else _continued(machine, text)


def pattern_states(pattern: str, text: str) -> tuple[_Machine, frozenset[int]] | None:
    """The automaton of ``pattern`` (as :func:`continuation` reads it) and its states after
    ``text``: two texts that leave the same states are finished by the same strings (the
    same residual); ``None`` where the pattern is not read here or ``text`` already left
    every state (no string that begins with it matches).

    Example:
        >>> from hf_fvo.grammar.schema.continuation import pattern_states
        >>> machine, states = pattern_states("^a[0-9]+$", "a1")
        >>> machine.run(states, "23") == machine.run(states, "4"), bool(machine.run(states, "b"))
        (True, False)
    """
    machine = _machine(pattern)
    if machine is None:
        return None
    states = machine.run(machine.start, text)
    return (machine, states) if states else None


@functools.lru_cache(maxsize=4096)
def _continued(machine: _Machine, text: str) -> str | None:
    states = machine.run(machine.start, text)
    return machine.nearest(states) if states else None


class _Machine:
    """A Thompson automaton: per state its ε-moves and its character moves (code-point ranges,
    next state); ``final`` accepts; with ``free_start`` the start is re-entered after every
    character and with ``free_end`` a match may be followed by anything (no ``^``, no ``$``)."""

    def __init__(self, free_start: bool, free_end: bool) -> None:
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []
        self.free_start, self.free_end = free_start, free_end
        self.initial = self.final = 0
        self.start: frozenset[int] = frozenset()
        self.found: dict[frozenset[int], str | None] = {}
        # (set, code point) → the next set: the searches meet the same sets again and again
        self._steps: dict[tuple[frozenset[int], int], frozenset[int]] = {}
        self._alike: dict[int, int] | None = None  # (representatives())
        self._written: str | None = None  # (written())
        self._distance: list[int] | None = None  # (_distances())

    def new(self) -> int:
        if len(self.eps) >= _STATES:
            raise _Unread
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def closure(self, states: Any) -> frozenset[int]:
        seen, todo = set(states), list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)

    def step(self, states: frozenset[int], code: int) -> frozenset[int]:
        if self.free_end and self.final in states:
            return states  # (matched: anything may follow)
        key = (states, code)
        found = self._steps.get(key)
        if found is None:
            out = [t for s in states for spans, t in self.moves[s]
                   if any(lo <= code <= hi for lo, hi in spans)]  # fmt: skip
            found = self.closure(out)
            if self.free_start:
                found |= self.start
            if len(self._steps) >= _STEPS:
                self._steps.clear()
            self._steps[key] = found
        return found

    def representatives(self) -> dict[int, int]:
        """A ``str.translate`` table that writes each printable ASCII character as the first
        one the automaton cannot tell from it (the same moves from every state): texts with
        the same translation leave the same states."""
        if self._alike is None:
            # (characters between two consecutive ends of the moves' ranges are alike)
            ends = {0x20, 0x7F}
            for row in self.moves:
                for spans, _ in row:
                    for lo, hi in spans:
                        ends.update((lo, hi + 1))
            cuts = sorted(e for e in ends if 0x20 <= e <= 0x7F)
            table = {}
            for start, stop in itertools.pairwise(cuts):
                for code in range(start, stop):
                    table[code] = start
            self._alike = table
        return self._alike

    def written(self) -> str:
        """:data:`_WRITTEN` less every character an earlier one stands for
        (:meth:`representatives`): the same texts, one try each."""
        if self._written is None:
            table, seen, kept = self.representatives(), set(), []
            for ch in _WRITTEN:
                if table[ord(ch)] not in seen:
                    seen.add(table[ord(ch)])
                    kept.append(ch)
            self._written = "".join(kept)
        return self._written

    def run(self, states: frozenset[int], text: str) -> frozenset[int]:
        """The states after ``text`` from ``states`` (empty once none is left)."""
        for ch in text:
            states = self.step(states, ord(ch))
            if not states:
                break
        return states

    def nearest(self, states: frozenset[int]) -> str | None:
        """The shortest text over :data:`_WRITTEN` from ``states`` to a match, the first in
        :data:`_WRITTEN`'s order among the shortest (kept per set: texts that differ often
        leave the same set)."""
        if states not in self.found:
            if len(self.found) >= _VISITS:
                self.found.clear()
            self.found[states] = self._nearest(states)
        return self.found[states]

    def _nearest(self, states: frozenset[int]) -> str | None:
        # each step the first character (in _WRITTEN's order) that leaves a set one character
        # nearer a match: what a breadth-first search over sets finds first, in as many
        # steps as the text is long
        left = self._distance_of(states)
        if left is None:
            return None
        written, current = [], states
        while left:
            for ch in self.written():
                found = self.step(current, ord(ch))
                if found and self._distance_of(found) == left - 1:
                    written.append(ch)
                    current, left = found, left - 1
                    break
            else:  # (no character does: the distances say one does)
                return None
        return "".join(written)

    def _distance_of(self, states: frozenset[int]) -> int | None:
        """The fewest characters of :data:`_WRITTEN` from ``states`` to a match (``None``:
        none reaches one)."""
        if self.final in states:
            return 0
        distance = self._distances()
        return min((distance[s] for s in states if distance[s] >= 0), default=None)

    def _distances(self) -> list[int]:
        """Per state, the fewest characters of :data:`_WRITTEN` to the final state (−1: never
        reached): backwards from it, ε-moves free (0-1 breadth first, once per automaton)."""
        if self._distance is None:
            back: list[list[tuple[int, int]]] = [[] for _ in self.eps]
            for s, targets in enumerate(self.eps):
                for t in targets:
                    back[t].append((s, 0))
            for s, row in enumerate(self.moves):
                for spans, t in row:
                    if any(_writes(lo, hi) for lo, hi in spans):
                        back[t].append((s, 1))
            distance = [-1] * len(self.eps)
            distance[self.final] = 0
            queue = deque([self.final])
            while queue:
                t = queue.popleft()
                for s, cost in back[t]:
                    d = distance[t] + cost
                    if distance[s] < 0 or d < distance[s]:
                        distance[s] = d
                        if cost:
                            queue.append(s)
                        else:
                            queue.appendleft(s)
            self._distance = distance
        return self._distance


def _writes(lo: int, hi: int) -> bool:
    """Whether a character of :data:`_WRITTEN` lies in ``lo..hi``."""
    i = bisect.bisect_left(_WRITTEN_CODES, lo)
    return i < len(_WRITTEN_CODES) and _WRITTEN_CODES[i] <= hi


@functools.lru_cache(maxsize=256)
def _machine(pattern: str) -> _Machine | None:
    if regex_problem(pattern, "") is not None or "{," in pattern:
        return None
    tree = python_tree(pattern, strict=False)
    if tree is None or tree.state.flags & ~re.UNICODE:
        return None
    items = list(tree)
    sre = _sre()
    anchored = bool(items) and items[0] == (sre.AT, sre.AT_BEGINNING)
    ended = len(items) > anchored and items[-1] == (sre.AT, sre.AT_END)
    items = items[int(anchored) : len(items) - int(ended)]
    machine = _Machine(free_start=not anchored, free_end=not ended)
    try:
        machine.initial, machine.final = _fragment(machine, items)
    except (_Unread, RecursionError):
        return None
    machine.start = machine.closure([machine.initial])
    return machine


def _fragment(m: _Machine, items: Any) -> tuple[int, int]:
    """A sequence of parse-tree items as (entry, exit) states of ``m``."""
    sre = _sre()
    entry = exit_ = m.new()
    for op, av in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, body = av
            start = end = m.new()
            for _ in range(low):
                a, b = _fragment(m, body)
                m.eps[end].append(a)
                end = b
            if high == sre.MAXREPEAT:
                a, b = _fragment(m, body)
                m.eps[end].append(a)
                m.eps[b].append(end)
            else:
                for _ in range(high - low):
                    a, b = _fragment(m, body)
                    after = m.new()
                    m.eps[end] += [a, after]
                    m.eps[b].append(after)
                    end = after
        elif op is sre.BRANCH:
            start, end = m.new(), m.new()
            for branch in av[1]:
                a, b = _fragment(m, branch)
                m.eps[start].append(a)
                m.eps[b].append(end)
        elif op in (sre.SUBPATTERN, sre.ATOMIC_GROUP):
            body = av[-1] if op is sre.SUBPATTERN else av
            if op is sre.SUBPATTERN and (av[1] or av[2]):
                raise _Unread  # (flags)
            start, end = _fragment(m, body)
        else:
            start, end = m.new(), m.new()
            m.moves[start].append((_spans(op, av), end))
        m.eps[exit_].append(start)
        exit_ = end
    return entry, exit_


def _spans(op: Any, av: Any) -> tuple[tuple[int, int], ...]:
    """The code points one parse-tree item matches."""
    sre = _sre()
    if op is sre.LITERAL:
        return ((av, av),)
    if op is sre.NOT_LITERAL:
        return _complement([(av, av)])
    if op is sre.ANY:
        return _complement(_LINE_ENDS)
    if op is not sre.IN:
        raise _Unread  # (an assertion, a backreference)
    negate, spans = False, []
    for kind, arg in av:
        if kind is sre.NEGATE:
            negate = True
        elif kind is sre.LITERAL:
            spans.append((arg, arg))
        elif kind is sre.RANGE:
            spans.append(arg)
        elif kind is sre.CATEGORY:
            spans += _category(arg)
        else:
            raise _Unread
    return _complement(spans) if negate else tuple(sorted(spans))


def _category(name: Any) -> list[tuple[int, int]]:
    sre = _sre()
    positive = {sre.CATEGORY_DIGIT: _DIGITS, sre.CATEGORY_WORD: _WORD, sre.CATEGORY_SPACE: _SPACE}
    negative = {sre.CATEGORY_NOT_DIGIT: _DIGITS, sre.CATEGORY_NOT_WORD: _WORD,
                sre.CATEGORY_NOT_SPACE: _SPACE}  # fmt: skip
    if name in positive:
        return list(positive[name])
    if name in negative:
        return list(_complement(negative[name]))
    raise _Unread


def _complement(spans: Any) -> tuple[tuple[int, int], ...]:
    out, at = [], 0
    for lo, hi in sorted(spans):
        if lo > at:
            out.append((at, lo - 1))
        at = max(at, hi + 1)
    return tuple(out + ([(at, _TOP)] if at <= _TOP else []))


def _sre() -> Any:
    import re._constants as sre

    return sre
