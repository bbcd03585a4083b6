"""Completions of a JSON prefix, built from its schema: the budget rule's certificates.

The budget rule keeps a token when the state after it has a completion that fits the room. A
search over parser states finds one where the grammar itself says what comes next; where a
JSON schema leaves a choice open (any key may follow ``{"``, a ``oneOf`` holds a string and an
object, a required key far away), it may find none in seconds. The schema says what finishes a
prefix: :class:`JsonCursor` reads the prefix as JSON (its open objects and arrays, the key or
item each is at, the lexeme being written, the schema at each place) and
:meth:`JsonCursor.closings` writes what finishes it in few bytes —

- the lexeme ended: a key completed to a listed name (required ones first), a string closed
  (finished to an ``enum`` value, padded to ``minLength``, the match of its ``pattern`` it began
  finished through the pattern's automaton, or given the pattern's shortest match), a number
  given the digit it lacks, a literal finished;
- then every open container closed with the required keys and the items it still needs, each
  value the shortest member :func:`~hf_fvo.grammar.schema.instance.shortest_member` builds.

The schema at each place comes from the path: ``properties``, ``patternProperties``,
``additionalProperties``, ``prefixItems``, ``items``; ``$ref`` followed, ``allOf`` merged, the
branches of ``anyOf``/``oneOf`` kept as alternatives. It is a heuristic, never trusted: the
grammar parses a closing before it certifies anything with it. Pure: no engine import (a pattern's
automaton: :mod:`.continuation`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple

from hf_fvo.grammar.schema.closing import LOOSE, FrameBounds, merged_exactly
from hf_fvo.grammar.schema.continuation import continuation, pattern_states
from hf_fvo.grammar.schema.facts import definitions_of, ref_target
from hf_fvo.grammar.schema.instance import _GiveUp, _Members, _merge, shortest_pattern_text

__all__ = ["JsonCursor"]

_UNREAD = object()  # (a cursor's string reader not asked yet)
_ALTERNATIVES = 8  # schema alternatives kept per place (anyOf/oneOf branches)
_CLOSINGS = 4  # closings written per prefix (the innermost choice varied)
_RESTS = 4096  # containers' rests kept per schema, by frame
_KEY_CHOICES = 64  # names weighed for the key a comma asks for
_DEPTH = 16  # $ref, anyOf and allOf levels followed at one place
_WS = " \t\n\r"
_LITERALS = {"t": "true", "f": "false", "n": "null"}


class _Frame(NamedTuple):
    """An open object (``o``), array (``a``) or the top level (``r``): the schema alternatives
    that may hold there, the keys written (an object), the key whose value comes next, the
    items written (an array), and what is expected next: ``first`` (after ``{`` or ``[``),
    ``key`` (after an object's comma), ``colon``, ``value``, ``next`` (a comma or the close),
    ``done`` (the top level's value ended)."""

    kind: str
    nodes: tuple[Any, ...]
    keys: tuple[str, ...]
    key: str | None
    count: int
    expect: str


class _Lexeme(NamedTuple):
    """The lexeme being written: a string (``s``: a key or a value; its content so far and a
    pending escape), a number (``n``: its text) or a literal (``l``: its text so far)."""

    kind: str
    key: bool
    text: str
    escape: str
    nodes: tuple[Any, ...]


class _Schema:
    """The schema's alternatives per node and its shortest values, computed once per node."""

    def __init__(
        self,
        root: Any,
        cost: Callable[[str], int] | None = None,
        finish: Callable[[str], str | None] | None = None,
        any_order: bool = False,
    ) -> None:
        self.root = root
        self.cost = cost or (lambda text: len(text.encode()))
        self.finish = finish
        self.any_order = any_order
        self.defs = definitions_of(root)
        self.kept: dict[int, tuple[Any, tuple[Any, ...]]] = {}  # id → (node, alternatives)
        self.cheapest: dict[int, tuple[Any, str | None]] = {}  # id → (node, cheapest text)
        # a container's rests by its frame (kind, alternatives' ids, keys, count, expected):
        # every closing of every prefix with that frame writes the same
        self.rests: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[str]]] = {}
        # in any key order, the names a key may be, ranked by their members' cost, by frame
        self.names: dict[tuple[Any, ...], tuple[tuple[Any, ...], list[str]]] = {}
        self._bounds: FrameBounds | None = None

    @property
    def bounds(self) -> FrameBounds:
        """The schema's closing bounds per place (built when first asked)."""
        if self._bounds is None:
            self._bounds = FrameBounds(self.root)
        return self._bounds

    def alternatives(self, node: Any) -> tuple[Any, ...]:
        """The schemas ``node`` may stand for here: ``$ref`` followed, ``allOf`` merged, each
        branch of ``anyOf``/``oneOf`` (with its siblings) apart; at most ``_ALTERNATIVES``."""
        key = id(node)
        if key not in self.kept:
            self.kept[key] = (node, tuple(self._alternatives(node, 0))[:_ALTERNATIVES])
        return self.kept[key][1]

    def _alternatives(self, node: Any, depth: int) -> list[Any]:
        if node is True:
            return [{}]
        if not isinstance(node, dict):
            return []
        if depth > _DEPTH:
            return [node]
        if "$ref" in node:
            rest = {k: v for k, v in node.items() if k != "$ref"}
            target = ref_target(node, self.defs)
            # (the siblings first: their properties come before the target's, as written)
            return self._alternatives(_merged([rest, target]) if rest else target, depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                rest = {k: v for k, v in node.items() if k != key}
                out: list[Any] = []
                for branch in node[key]:
                    out += self._alternatives(_merged([rest, branch]) if rest else branch,
                                              depth + 1)  # fmt: skip
                return out
        if isinstance(node.get("allOf"), list) and "\x00merged" not in node:
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return self._alternatives(_merged([rest, *node["allOf"]]), depth + 1)
        return [node]

    def shortest(self, node: Any) -> str | None:
        """Of the short members of ``node`` that :mod:`.instance` builds, the cheapest
        (``cost``: a text's tokens, where the grammar gives it), as compact JSON."""
        key = id(node)
        if key not in self.cheapest:
            try:
                found = _Members(self.root).of(node)
            except (_GiveUp, RecursionError):
                found = []
            texts = [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in found]
            self.cheapest[key] = (node, min(texts, key=self.cost) if texts else None)
        return self.cheapest[key][1]

    def value(self, nodes: tuple[Any, ...]) -> str | None:
        """The cheapest value any of the alternatives ``nodes`` builds."""
        found = self.values(nodes)
        return found[0] if found else None

    def values(self, nodes: tuple[Any, ...]) -> list[str]:
        """The alternatives' values, distinct, the cheapest first."""
        found = dict.fromkeys(t for t in map(self.shortest, nodes) if t is not None)
        return sorted(found, key=self.cost)

    def child(self, nodes: tuple[Any, ...], key: str | int) -> tuple[Any, ...]:
        """The alternatives at an object's ``key`` (a str) or an array's item ``key`` (an int)."""
        out: list[Any] = []
        for node in nodes:
            out += self.alternatives(_member(node, key))
        return tuple(out[:_ALTERNATIVES])


# keywords that say more of a string than its length (and combinators not read here)
_STRING_SHAPES = {
    "pattern", "format", "enum", "const", "not", "anyOf", "allOf", "oneOf", "$ref", "if", "then",
    "else", "contentEncoding", "contentMediaType", "$dynamicRef",
}  # fmt: skip


# an object's keywords that do not read a key's text (beside patternProperties)
_KEY_FREE = {
    "type", "properties", "required", "patternProperties", "additionalProperties",
    "minProperties", "maxProperties", "title", "description",
}  # fmt: skip


class _Lengths:
    """A string reader (:meth:`JsonCursor.string_reader`) for schemas that bound only a
    string's length: a state is the number of characters so far, past ``least`` (the largest
    ``minLength``) and every ``maxLength`` (``most``; ``None``: one schema has none) counted
    as one; no state past ``most``. Every character is alike: a token's content is read as
    its number of characters (:attr:`counts_characters`)."""

    counts_characters = True

    _ALIKE: ClassVar[dict[int, int]] = {code: 0x61 for code in range(0x20, 0x7F)}

    def __init__(self, least: int, most: int | None) -> None:
        self.least, self.most = least, most
        self.top = max(least, -1 if most is None else most + 1)

    def representatives(self) -> dict[int, int]:
        return self._ALIKE

    def run(self, states: frozenset[int], text: str) -> frozenset[int]:
        if not states:
            return states
        count = next(iter(states)) + len(text)
        if self.most is not None and count > self.most:
            return frozenset()
        return frozenset({min(count, self.top)})

    def __eq__(self, other: object) -> bool:  # (one reading of the vocabulary for all)
        return isinstance(other, _Lengths)

    def __hash__(self) -> int:
        return hash(_Lengths)


class _Strings:
    """A string reader (:meth:`JsonCursor.string_reader`) for alternatives each a ``pattern``
    and/or length bounds (``{"type": "string", "pattern": p, "maxLength": 63}``; an ``anyOf``
    of such): per alternative still open, the pattern's automaton's states (``None``: no
    pattern) beside the characters written, counted as :class:`_Lengths` counts them. Two texts
    that leave the same states leave every alternative with the same residual, so the union's
    is the same. Characters are alike where every automaton cannot tell them apart
    (:meth:`representatives`: printable ASCII, one character a byte)."""

    counts_characters = False

    def __init__(self, branches: tuple[tuple[Any, _Lengths], ...]) -> None:
        self.branches = branches
        self._alike: dict[int, int] | None = None

    @classmethod
    def read(cls, nodes: tuple[Any, ...], text: str) -> tuple[_Strings, frozenset] | None:
        """The reader of ``nodes`` (the alternatives a string value may be) and its states
        after ``text``; ``None`` where one of them says more of a string than a pattern and
        its length, a pattern is not read here, or a character outside the Basic Multilingual
        Plane was written (one character here, perhaps two to the engine)."""
        if any(ord(c) > 0xFFFF for c in text):
            return None
        branches: list[tuple[Any, _Lengths]] = []
        for node in nodes:
            bounds = _string_bounds(node, {"pattern"})
            if bounds is None:
                return None
            if bounds is False:
                continue  # (takes no string)
            low, high = bounds
            machine = None
            if "pattern" in node:
                found = isinstance(node["pattern"], str) and pattern_states(node["pattern"], "")
                if not found:
                    return None
                machine = found[0]
            branches.append((machine, _Lengths(low, high)))
        reader = cls(tuple(branches))
        start = frozenset(
            (i, None if m is None else m.start, 0) for i, (m, _) in enumerate(branches)
        )
        return reader, reader.run(start, text)

    def representatives(self) -> dict[int, int]:
        """A ``str.translate`` table writing each printable ASCII character as the first one
        that no automaton tells apart from it (the common refinement of theirs)."""
        if self._alike is None:
            tables = [m.representatives() for m, _ in self.branches if m is not None]
            table, first = {}, {}
            for code in range(0x20, 0x7F):
                key = tuple(t[code] for t in tables)
                table[code] = first.setdefault(key, code)
            self._alike = table
        return self._alike

    def run(self, states: frozenset, text: str) -> frozenset:
        out = []
        for i, pattern, count in states:
            machine, lengths = self.branches[i]
            if machine is not None:
                pattern = machine.run(pattern, text)
                if not pattern:
                    continue
            counted = lengths.run(frozenset({count}), text)
            if counted:
                out.append((i, pattern, next(iter(counted))))
        return frozenset(out)

    def __eq__(self, other: object) -> bool:  # (the same automata: one reading of the vocabulary)
        return isinstance(other, _Strings) and self._machines() == other._machines()

    def __hash__(self) -> int:
        return hash(self._machines())

    def _machines(self) -> tuple[int, ...]:
        return tuple(id(m) for m, _ in self.branches if m is not None)


def _string_bounds(node: Any, read: set[str] | None = None) -> tuple[int, int | None] | bool | None:
    """A string alternative's ``minLength`` and ``maxLength`` (``None``: unbounded); ``False``
    where it takes no string; ``None`` where it says more of a string (a keyword of
    :data:`_STRING_SHAPES` beyond those ``read``) or a bound is not an integer."""
    node = {} if node is True else node
    if not isinstance(node, dict) or set(node) & (_STRING_SHAPES - (read or set())):
        return None
    kinds = node.get("type", "string")
    if "string" not in ([kinds] if isinstance(kinds, str) else kinds):
        return False
    low, high = node.get("minLength", 0), node.get("maxLength")
    if not isinstance(low, int) or not (high is None or isinstance(high, int)):
        return None
    return low, high


def _member(node: Any, key: str | int) -> Any:
    """The schema of an object's value at ``key`` or an array's item at index ``key``."""
    if not isinstance(node, dict):
        return True
    if isinstance(key, int):
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and key < len(prefix):
            return prefix[key]
        return node.get("items", True)
    props = node.get("properties")
    if isinstance(props, dict) and key in props:
        return props[key]
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        for pattern, sub in patterns.items():
            try:
                if re.search(pattern, key):
                    return sub
            except re.error:
                continue
    return node.get("additionalProperties", True)


def _kinds(node: Any) -> set[str] | None:
    kinds = node.get("type") if isinstance(node, dict) else None
    if kinds is None:
        return None
    return {kinds} if isinstance(kinds, str) else {k for k in kinds if isinstance(k, str)}


def _of_kind(nodes: tuple[Any, ...], kind: str) -> tuple[Any, ...]:
    """The alternatives that admit ``kind`` (all of them, where none says it does)."""
    kept = tuple(n for n in nodes if (k := _kinds(n)) is None or kind in k
                 or (kind == "integer" and "number" in k))  # fmt: skip
    return kept or nodes


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


class JsonCursor:
    """Where a JSON prefix stands, read against its schema; immutable (:meth:`feed` returns a
    new cursor). :meth:`start` makes one for a schema; ``None`` stands for a prefix that is not
    JSON.

    Example:
        >>> from hf_fvo.grammar.schema.closer import JsonCursor
        >>> schema = {"type": "object", "properties": {"name": {"type": "string"},
        ...           "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        ...           "required": ["name", "tags"]}
        >>> JsonCursor.start(schema).feed(b'{"na').closings()[0]
        'me":"","tags":[""]}'
        >>> JsonCursor.start(schema).feed(b'{"name":"Ann","tags":[').closings()[0]
        '""]}'
    """

    __slots__ = ("_lexeme", "_pending", "_reach", "_read", "_schema", "_stack")

    def __init__(
        self, schema: _Schema, stack: tuple[_Frame, ...], lexeme: _Lexeme | None, pending: bytes
    ) -> None:
        self._schema, self._stack, self._lexeme, self._pending = schema, stack, lexeme, pending
        self._read: Any = _UNREAD  # (string_reader(), once: a pure function of the cursor)
        self._reach: tuple[int, int | None] | None = None  # (reach(depth): depth, bound)

    @property
    def open_containers(self) -> int:
        """How many objects and arrays the text has opened and not closed: each completion
        writes as many closing brackets (``}`` or ``]``), and more for what it opens.

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> JsonCursor.start({}).feed(b'{"a":[{"b":"}]').open_containers
            3
        """
        return sum(frame.kind != "r" for frame in self._stack)

    def reach(self, depth: int) -> int | None:
        """Bytes that complete the text, at most, after any one more piece of it that opens
        at most ``depth`` objects and arrays (one token: its ``{`` and ``[``); ``None`` where
        not shown. From the schema's bounds (:class:`~hf_fvo.grammar.schema.closing.FrameBounds`,
        compact JSON: a completion needs no whitespace): the piece ends inside a container open
        now (those inside it closed), where it finishes what it began, then closes that
        container and each one around it (their members still required, each the shortest
        value's bound), or it closes every one. A budget whose room is at least this keeps
        every token the grammar admits without a check.

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> schema = {"type": "array", "items": {"type": "integer"}, "maxItems": 9}
            >>> cursor = JsonCursor.start(schema).feed(b"[1,2")
            >>> cursor.reach(2)
            8
            >>> JsonCursor.start({"type": "array"}).feed(b"[[").reach(2) > cursor.reach(2)
            True
        """
        if self._reach is None or self._reach[0] != depth:
            self._reach = (depth, self._reached(depth))
        return self._reach[1]

    def _reached(self, depth: int) -> int | None:
        bounds, stack = self._schema.bounds, self._stack
        if any(not f.nodes or len(f.nodes) >= _ALTERNATIVES for f in stack):
            return None  # (perhaps not all of them)
        if len(stack) == 1:  # (the top level: its value not begun, a scalar, or ended)
            if stack[0].expect == "done":
                return 0
            found = [bounds.value(node, depth) for node in stack[0].nodes]
            return None if None in found else max(found)  # type: ignore[type-var]
        best = around = 0  # (around: what closes the containers around this one)
        for i, frame in enumerate(stack[1:], 2):
            keys, count = frame.keys, frame.count
            if i < len(stack):  # (to end here, the piece closes the member being written)
                keys = (*keys, frame.key) if frame.key is not None else keys
                count += frame.kind == "a"
            inside = [bounds.inside(n, frame.kind, keys, count, depth) for n in frame.nodes]
            if None in inside:
                return None
            best = max(best, around + max(inside))  # type: ignore[type-var]
            if i < len(stack):  # (the innermost one's rest is never added)
                rests = [bounds.rest(n, frame.kind, keys, count) for n in frame.nodes]
                if None in rests:
                    return None
                around += max(rests)  # type: ignore[type-var]
        return best

    @property
    def string_value(self) -> tuple[str, tuple[Any, ...]] | None:
        """Inside a string value (not a key), at a character boundary with no escape begun:
        its text so far and the schema nodes it may be; ``None`` elsewhere.

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> schema = {"type": "object", "properties": {"id": {"pattern": "^[a-z]+$"}}}
            >>> JsonCursor.start(schema).feed(b'{"id":"ab').string_value
            ('ab', ({'pattern': '^[a-z]+$'},))
            >>> JsonCursor.start(schema).feed(b'{"i').string_value is None
            True
        """
        lexeme = self._lexeme
        if lexeme is None or lexeme.kind != "s" or lexeme.key or lexeme.escape or self._pending:
            return None
        return lexeme.text, lexeme.nodes

    @property
    def in_key(self) -> bool:
        """Inside a key, at a character boundary with no escape begun: string content written
        here leaves the text inside the key (only an unescaped quote ends it, and a colon
        must follow).

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> start = JsonCursor.start({})
            >>> start.feed(b'{"na').in_key, start.feed(b'{"a":"').in_key
            (True, False)
        """
        lexeme = self._lexeme
        return (lexeme is not None and lexeme.kind == "s" and lexeme.key
                and not lexeme.escape and not self._pending)  # fmt: skip

    def string_reader(self) -> tuple[Any, frozenset[int]] | None:
        """Inside a string value (at a character boundary) whose schemas say what finishes it
        from how it began in one of two ways: a ``pattern`` alone (``{"type": "string",
        "pattern": p}``: the pattern's automaton, :func:`~.continuation.pattern_states`), or
        no more than its length (every schema here free for strings but for ``minLength`` and
        ``maxLength``: :class:`_Lengths`), or inside a key that one ``patternProperties``
        pattern alone reads, or of an object that takes any key (:meth:`_key_reader`). The
        reader and its states after the text so far (``reader.run(states, text)`` steps it
        on; two texts that leave the same states are finished by the same strings; no states:
        none finishes it); ``None`` elsewhere.

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> schema = {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}
            >>> machine, states = JsonCursor.start(schema).feed(b'["ab').string_reader()
            >>> bool(machine.run(states, "cd")), bool(machine.run(states, "1"))
            (True, False)
            >>> short = {"type": "array", "items": {"type": "string", "maxLength": 3}}
            >>> reader, states = JsonCursor.start(short).feed(b'["ab').string_reader()
            >>> reader.run(states, "c") == reader.run(states, "d"), reader.run(states, "cd")
            (True, frozenset())
            >>> tags = {"type": "object", "patternProperties": {"^x-": {"type": "string"}},
            ...         "additionalProperties": False}
            >>> machine, states = JsonCursor.start(tags).feed(b'{"x').string_reader()
            >>> bool(machine.run(states, "-a")), bool(machine.run(states, "a"))
            (True, False)
            >>> anything, states = JsonCursor.start({}).feed(b'{"x').string_reader()
            >>> anything.run(states, "-a") == anything.run(states, "a") != frozenset()
            True
        """
        if self._read is _UNREAD:
            self._read = self._string_reader()
        return self._read

    def _string_reader(self) -> tuple[Any, frozenset[int]] | None:
        lexeme = self._lexeme
        if (lexeme is not None and lexeme.kind == "s" and lexeme.key and not lexeme.escape
                and not self._pending):  # fmt: skip
            return self._key_reader(lexeme.text)
        inside = self.string_value
        if inside is None:
            return None
        text, nodes = inside
        if len(nodes) == 1 and isinstance(nodes[0], dict) and set(nodes[0]) == {"type", "pattern"}:
            node = nodes[0]
            if node["type"] == "string" and isinstance(node["pattern"], str):
                return pattern_states(node["pattern"], text)
            return None
        if len(nodes) >= _ALTERNATIVES:
            return None  # (perhaps not all of them)
        if any(isinstance(node, dict) and "pattern" in node for node in nodes):
            return _Strings.read(nodes, text)
        least, most = 0, -1  # (most: −1 while no schema bounds the length)
        bounded = True
        for node in nodes:
            bounds = _string_bounds(node)
            if bounds is None:
                return None
            if bounds is False:
                continue  # (takes no string)
            low, high = bounds
            least = max(least, low)
            if high is None:
                bounded = False
            else:
                most = max(most, high)
        reader = _Lengths(least, most if bounded else None)
        return reader, reader.run(frozenset({0}), text)

    def _key_reader(self, text: str) -> tuple[Any, frozenset[int]] | None:
        """Inside a key of an object whose one schema names no key (no ``properties``, no
        ``required``) and says what a key's text decides through one ``patternProperties``
        pattern alone (which value schema applies: the pattern's, else
        ``additionalProperties``; nothing else reads the key): the pattern's automaton; with
        no pattern, where every key is one (``additionalProperties`` not ``false``), a reader
        of one state (:class:`_Lengths` unbounded: every text alike)."""
        nodes = self._stack[-1].nodes
        if len(nodes) != 1:
            return None
        node = {} if nodes[0] is True else nodes[0]
        if not isinstance(node, dict) or set(node) - _KEY_FREE:
            return None
        patterns = node.get("patternProperties", {})
        if node.get("properties") or node.get("required") or not isinstance(patterns, dict):
            return None
        if not patterns and node.get("additionalProperties", True) is not False:
            reader = _Lengths(0, None)
            return reader, reader.run(frozenset({0}), text)
        if len(patterns) != 1 or not isinstance(next(iter(patterns)), str):
            return None
        return pattern_states(next(iter(patterns)), text)

    @classmethod
    def start(
        cls,
        root: Any,
        cost: Callable[[str], int] | None = None,
        finish: Callable[[str], str | None] | None = None,
        any_order: bool = False,
    ) -> JsonCursor:
        """The cursor before any text of a (prepared) schema's members; ``cost(text)`` ranks
        the values it may write (the fewest tokens; by default, bytes); ``finish(escape)``,
        where given, is the cheapest text that finishes a begun escape in a free string (a
        vocabulary's: tried before the closer's own, :func:`_escape_fills`); ``any_order``: an
        object's keys may come in any order (a key the schema lists before one written may
        still follow it)."""
        schema = _Schema(root, cost, finish, any_order)
        return cls(schema, (_Frame("r", schema.alternatives(root), (), None, 0, "value"),), None,
                   b"")  # fmt: skip

    def feed(self, data: bytes) -> JsonCursor | None:
        """The cursor after ``data`` more bytes (a character split across calls waits for the
        rest); ``None`` where the text stops being a JSON prefix."""
        data = self._pending + data
        cut = _complete_utf8(data)
        try:
            text = data[:cut].decode()
        except UnicodeDecodeError:
            return None
        stack, lexeme = list(self._stack), self._lexeme
        for c in text:
            if lexeme is not None:
                lexeme, consumed = _lexed(lexeme, c, stack)
                if lexeme is _BROKEN:
                    return None
                if consumed:
                    continue
            if c in _WS:
                continue
            lexeme = self._token(c, stack)
            if lexeme is _BROKEN:
                return None
        return JsonCursor(self._schema, tuple(stack), lexeme, data[cut:])

    def _token(self, c: str, stack: list[_Frame]) -> Any:
        """Read ``c`` outside a lexeme: structure, or the first character of one."""
        top = stack[-1]
        if c == '"' and top.kind == "o" and top.expect in ("first", "key"):
            return _Lexeme("s", True, "", "", ())
        if c == ":" and top.expect == "colon":
            stack[-1] = self._keyed(top, top.key or "")._replace(expect="value")
            return None
        if c == "," and top.expect == "next" and top.kind in "oa":
            stack[-1] = top._replace(expect="key" if top.kind == "o" else "value")
            return None
        if c in "}]" and top.kind == ("o" if c == "}" else "a") and top.expect in ("first", "next"):
            stack.pop()
            return None if _valued(stack) else _BROKEN
        if not (top.expect == "value" or (top.kind == "a" and top.expect == "first")):
            return _BROKEN
        nodes = self._value_nodes(top)
        if c == "{":
            stack.append(_Frame("o", _of_kind(nodes, "object"), (), None, 0, "first"))
            return None
        if c == "[":
            stack.append(_Frame("a", _of_kind(nodes, "array"), (), None, 0, "first"))
            return None
        if c == '"':
            return _Lexeme("s", False, "", "", _of_kind(nodes, "string"))
        if c == "-" or c.isdigit():
            return _Lexeme("n", False, c, "", nodes)
        if c in _LITERALS:
            return _Lexeme("l", False, c, "", nodes)
        return _BROKEN

    def _keyed(self, top: _Frame, key: str) -> _Frame:
        """The object frame at ``key``: the alternatives that admit the key kept (a branch
        whose ``properties`` give it ``false`` is dropped), all where none does."""
        kept = tuple(n for n in top.nodes if self._schema.alternatives(_member(n, key)))
        return top._replace(key=key, nodes=kept or top.nodes)

    def _value_nodes(self, top: _Frame) -> tuple[Any, ...]:
        if top.kind == "o":
            return self._schema.child(top.nodes, top.key or "")
        if top.kind == "a":
            return self._schema.child(top.nodes, top.count)
        return top.nodes

    def closings(self) -> list[str]:
        """Texts that finish the prefix as a member, shortest choices first (at most
        ``_CLOSINGS``, the innermost choice varied: another key, enum value or branch);
        heuristic: the grammar verifies each."""
        return list(self.each_closing())

    def each_closing(self) -> Iterator[str]:
        """:meth:`closings`, each written only when the one before it is taken."""
        seen: set[str] = set()
        for variant in range(_CLOSINGS):
            text = self._closing(variant)
            if text is not None and text not in seen:
                seen.add(text)
                yield text

    def each_closing_bytes(self) -> Iterator[bytes]:
        """:meth:`each_closing` as UTF-8, also inside a character or an escape: what finishes
        it comes first (the first valid continuation bytes; an escaped backslash, or
        ``\\u0041``'s digits), then what closes the text after it.

        Example:
            >>> from hf_fvo.grammar.schema.closer import JsonCursor
            >>> cursor = JsonCursor.start({"type": "string"}).feed('"é'.encode()[:2])
            >>> cursor.closings(), next(cursor.each_closing_bytes())
            ([], b'\\x80"')
            >>> next(JsonCursor.start({"type": "string"}).feed(rb'"a\\u0').each_closing_bytes())
            b'041"'
        """
        head, cursor = b"", self
        if cursor._pending:
            fill = _utf8_fill(cursor._pending)
            cursor = None if fill is None else cursor.feed(fill)
            head += fill or b""
        lexeme = None if cursor is None else cursor._lexeme
        if cursor is None or cursor._pending:
            return
        if lexeme is None or not lexeme.escape:
            yield from (head + text.encode() for text in cursor.each_closing())
            return
        # (one a grammar's spelling admits: the parser verifies each; JSON mode's canonical
        # strings refuse `\u0041`, take `\u0000`)
        schema = cursor._schema
        fills = _escape_fills(lexeme.escape, schema.cost)
        cheapest = None if schema.finish is None else schema.finish(lexeme.escape)
        for fill in fills if cheapest is None else dict.fromkeys([cheapest, *fills]):
            ended = cursor.feed(fill.encode())
            if (
                ended is not None
                and not ended._pending
                and not (ended._lexeme and ended._lexeme.escape)
            ):
                yield from (head + fill.encode() + text.encode() for text in ended.each_closing())

    def _closing(self, variant: int) -> str | None:
        schema = self._schema
        stack, parts, lexeme = list(self._stack), [], self._lexeme
        choice = [variant]  # the first place with a choice takes the variant-th option

        def choose(options: list[Any]) -> Any:
            if len(options) < 2:  # (no choice here: the variant waits for one)
                return options[0] if options else None
            pick, choice[0] = min(choice[0], len(options) - 1), 0
            return options[pick]

        if self._pending:
            return None  # (inside a character)
        if lexeme is not None:
            if lexeme.escape:
                return None
            if lexeme.kind == "s" and lexeme.key:
                top = stack[-1]
                name = choose(self._names_to_finish(top, lexeme.text))
                if name is None:
                    return None  # (a key written already, begun again: no name is known)
                parts.append(_escaped(name[len(lexeme.text) :]) + '"')
                stack[-1] = self._keyed(top, name)._replace(expect="colon")
            else:
                end = choose(_lexeme_ends(lexeme))
                if end is None:
                    return None
                parts.append(end)
                if not _valued(stack):
                    return None
        while stack:
            top = stack.pop()
            if top.kind == "r":
                if top.expect == "value":
                    value = choose(schema.values(top.nodes))
                    if value is None:
                        return None
                    parts.append(value)
                return "".join(parts)
            if top.expect in ("colon", "value"):
                value = choose(schema.values(self._value_nodes(top)))
                if value is None:
                    return None
                parts.append((":" if top.expect == "colon" else "") + value)
                top = _valued_frame(top)
            rest = (self._object_rest(top, choose) if top.kind == "o"
                    else self._array_rest(top, choose))  # fmt: skip
            if rest is None:
                return None
            parts.append(rest)
            if not _valued(stack):
                return None
        return None

    def _names_to_finish(self, top: _Frame, begun: str) -> list[str]:
        """:meth:`_key_names` for a key begun; in any key order, the names not required
        cheapest first (their rest, then their shortest value: every listed name may follow
        there, so the first listed is no likelier to fit than any other; o21418 in its own
        key order lost ``","`` before ``title":""}`` where the closing wrote
        ``access_limited":{}}``)."""
        names = self._key_names(top, begun)
        if not self._schema.any_order:
            return names
        key = (tuple(map(id, top.nodes)), top.keys)  # (by frame: one ranking for every begun)
        kept = self._schema.names
        if key not in kept:
            if len(kept) >= _RESTS:
                kept.clear()
            kept[key] = (top.nodes, self._cheapest_names(top))  # (nodes: ids stay theirs)
        ranked = [n for n in kept[key][1] if n.startswith(begun)]
        return list(dict.fromkeys([*ranked, *names]))

    def _cheapest_names(self, top: _Frame) -> list[str]:
        """The names a key may be in any order, the required first, then the others (the
        first :data:`_KEY_CHOICES`) by the tokens of their member."""
        names = self._key_names(top, "")
        need = {n for node in top.nodes if isinstance(node, dict)
                for n in node.get("required", ()) if isinstance(n, str)}  # fmt: skip
        first = [n for n in names if n in need]
        others = [n for n in names if n not in need]

        def cost(name: str) -> int:
            value = self._schema.value(self._value_nodes(self._keyed(top, name)))
            member = '"' + _escaped(name) + '":'
            return self._schema.cost(member + value) if value is not None else 1 << 30

        return [*first, *sorted(others[:_KEY_CHOICES], key=cost), *others[_KEY_CHOICES:]]

    def _key_names(self, top: _Frame, begun: str) -> list[str]:
        """Keys that begin with ``begun`` and are not written yet: the required ones first,
        then the others listed (those after the last key written first: in the schema's key
        order only they may follow), then ``begun`` itself (an unlisted key)."""
        required, listed, later = [], [], []
        for node in top.nodes:
            props = node.get("properties") if isinstance(node, dict) else None
            need = node.get("required", []) if isinstance(node, dict) else []
            order = list(props or {})
            after = (order.index(top.keys[-1]) + 1 if top.keys and top.keys[-1] in order
                     else 0)  # fmt: skip
            for name in [*order, *(n for n in need if isinstance(n, str))]:
                if name.startswith(begun) and name not in top.keys:
                    if name in need:
                        required.append(name)
                    else:
                        (later if name in order[after:] else listed).append(name)
        listed = [*later, *listed]
        patterned = []  # (a key that matches a patternProperties pattern)
        for node in top.nodes:
            patterns = node.get("patternProperties") if isinstance(node, dict) else None
            for pattern in patterns if isinstance(patterns, dict) else ():
                rest = continuation(pattern, begun)  # (the key begun, finished to a match)
                if rest is not None:
                    patterned.append(begun + rest)
                text = shortest_pattern_text(pattern)
                if text is not None:
                    patterned += [text] if text.startswith(begun) else [begun + text]
        names = [*required, *listed, begun, *patterned]
        # a name written already, once more with its last character doubled (``1`` → ``11``
        # under ``^[0-9]+$``; ``my.permission`` → ``my.permissionn``): another key of its kind
        names += [n + (n[-1:] or "a") for n in names if n in top.keys]
        return [n for n in dict.fromkeys(names) if n not in top.keys]

    def _object_rest(self, top: _Frame, choose: Any) -> str | None:
        """What closes an object: per schema alternative at the object, the keys it still
        needs (required, then listed up to ``minProperties``), each with its shortest value,
        and ``}``; the cheapest alternatives first."""
        return choose(self._cheapest(top, self._object_rest_of))

    def _object_rest_of(self, top: _Frame, node: Any) -> str | None:
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        need = [n for n in node.get("required", []) if isinstance(n, str)]
        names = [n for n in [*props, *need] if n in need and n not in top.keys]
        names = list(dict.fromkeys(names))
        for name in props:
            if len(top.keys) + len(names) >= _count(node.get("minProperties")):
                break
            if name not in names and name not in top.keys:
                names.append(name)
        if top.expect == "key" and not names:  # (a comma was written: a key must follow)
            # the cheapest member among the names the schema's order still allows (any name,
            # in any key order): a name's own tokens count (after docker-seq's `mount`,
            # `"platform":""` takes two tokens fewer than the next listed `"read_only":true`)
            choices = self._key_names(top._replace(nodes=(node,)), "")
            if not self._schema.any_order:
                order = list(props)
                after = (order.index(top.keys[-1]) + 1 if top.keys and top.keys[-1] in order
                         else 0)  # fmt: skip
                choices = [name for name in choices if name in order[after:]] or choices
            members = []
            for name in choices[:_KEY_CHOICES]:
                value = self._schema.value(self._schema.child((node,), name))
                if value:
                    members.append(f'"{_escaped(name)}":{value}')
            return min(members, key=self._schema.cost) + "}" if members else None
        parts = []
        for i, name in enumerate(names):
            value = self._schema.value(self._schema.child((node,), name))
            if value is None:
                return None
            comma = "," if i or top.expect == "next" else ""
            parts.append(f'{comma}"{_escaped(name)}":{value}')
        return "".join(parts) + "}"

    def _array_rest(self, top: _Frame, choose: Any) -> str | None:
        """What closes an array: per schema alternative at the array, the items it still
        needs (``minItems``; one after a comma) and ``]``; the cheapest alternatives first."""
        return choose(self._cheapest(top, self._array_rest_of))

    def _array_rest_of(self, top: _Frame, node: Any) -> str | None:
        need = max(_count(node.get("minItems")), top.count + (top.expect == "value"))
        parts = []
        for i in range(top.count, need):
            value = self._schema.value(self._schema.child((node,), i))
            if value is None:
                return None
            parts.append(("," if i or top.expect == "next" else "") + value)
        if top.expect == "value" and parts and parts[0].startswith(","):
            parts[0] = parts[0][1:]  # (the comma is written)
        return "".join(parts) + "]"

    def _cheapest(self, top: _Frame, rest: Callable[[_Frame, Any], str | None]) -> list[str]:
        """The rests ``rest`` writes per alternative at ``top``, distinct, the cheapest first
        (ties: as the schema lists them); kept by frame."""
        nodes = top.nodes or ({},)
        key = (top.kind, tuple(map(id, nodes)), top.keys, top.key, top.count, top.expect)
        kept = self._schema.rests
        if key not in kept:
            if len(kept) >= _RESTS:
                kept.clear()
            found = dict.fromkeys(r for r in (rest(top, n) for n in nodes) if r is not None)
            kept[key] = (nodes, sorted(found, key=self._schema.cost))  # (nodes: ids stay theirs)
        return kept[key][1]


_BROKEN: Any = object()  # a character that makes the text not JSON


def _lexed(lexeme: _Lexeme, c: str, stack: list[_Frame]) -> tuple[Any, bool]:
    """The lexeme after ``c``, and whether it took ``c`` (a number ends at the first character
    that is not its own, which is then read as structure)."""
    if lexeme.kind == "s":
        if lexeme.escape:
            return _escaped_further(lexeme, lexeme.escape + c), True
        if c == "\\":
            return lexeme._replace(escape="\\"), True
        if c == '"':
            if lexeme.key:
                stack[-1] = stack[-1]._replace(key=lexeme.text, expect="colon")
                return None, True
            return (None if _valued(stack) else _BROKEN), True
        if c < " ":
            return _BROKEN, True
        return lexeme._replace(text=lexeme.text + c), True
    if lexeme.kind == "n":
        if c in "0123456789.eE+-":
            return lexeme._replace(text=lexeme.text + c), True
        return (None if _valued(stack) else _BROKEN), False
    target = _LITERALS[lexeme.text[0]]
    text = lexeme.text + c
    if not target.startswith(text):
        return _BROKEN, True
    if text == target:
        return (None if _valued(stack) else _BROKEN), True
    return lexeme._replace(text=text), True


def _escaped_further(lexeme: _Lexeme, escape: str) -> Any:
    """The string lexeme once its escape reads ``escape``: a short escape or ``\\uXXXX`` ends
    in its character; a high surrogate's escape goes on to its low one's (``\\uD83D\\uDE00``,
    one character), as every JSON string of hf_fvo's grammars spells it; a lone surrogate
    breaks the text (the grammars refuse it)."""
    size, c = len(escape), escape[-1]
    if size == 2 and c != "u":
        if c not in '"\\/bfnrt':
            return _BROKEN
        return lexeme._replace(text=lexeme.text + json.loads(f'"{escape}"'), escape="")
    if (size == 7 and c != "\\") or (size == 8 and c != "u"):
        return _BROKEN
    if size > 2 and size not in (7, 8) and c not in "0123456789abcdefABCDEF":
        return _BROKEN
    if size == 6:
        code = int(escape[2:], 16)
        if 0xDC00 <= code < 0xE000:
            return _BROKEN
        if code < 0xD800 or code >= 0xE000:
            return lexeme._replace(text=lexeme.text + chr(code), escape="")
    if size == 12:
        high, low = int(escape[2:6], 16), int(escape[8:], 16)
        if not 0xDC00 <= low < 0xE000:
            return _BROKEN
        code = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        return lexeme._replace(text=lexeme.text + chr(code), escape="")
    return lexeme._replace(escape=escape)


def _valued(stack: list[_Frame]) -> bool:
    """Record that the top frame's value ended (a lexeme or a container closed); ``False``
    where it expected none."""
    if not stack:
        return False
    top = stack[-1]
    if not (top.expect == "value" or (top.kind == "a" and top.expect == "first")):
        return False
    stack[-1] = _valued_frame(top)
    return True


def _valued_frame(top: _Frame) -> _Frame:
    """The frame once the value it expects is written."""
    if top.kind == "o":
        return top._replace(keys=(*top.keys, top.key or ""), key=None, expect="next")
    if top.kind == "a":
        return top._replace(count=top.count + 1, expect="next")
    return top._replace(expect="done")


def _lexeme_ends(lexeme: _Lexeme) -> list[str]:
    """What ends a value lexeme, the likeliest first."""
    if lexeme.kind == "l":
        return [_LITERALS[lexeme.text[0]][len(lexeme.text) :]]
    if lexeme.kind == "n":
        # (a bounded number's lexeme may refuse ``-0``: ``-1`` and ``-0.1`` too; a
        # ``minimum`` may want more digits, where a leading zero allows them)
        last, whole = lexeme.text[-1], lexeme.text.lstrip("-")
        if last in "-eE+":
            return ["1", "0"]
        if last == ".":
            return ["0", "1"]
        if any(c in whole for c in ".eE"):
            return ["", "1"]
        return ["", ".1"] if whole == "0" else ["", "0", ".1"]
    text, ends = lexeme.text, []
    for node in lexeme.nodes:
        if not isinstance(node, dict):
            continue
        listed = node.get("enum") if isinstance(node.get("enum"), list) else []
        if "const" in node:
            listed = [node["const"], *listed]
        ends += sorted((_escaped(v[len(text) :]) + '"' for v in listed
                        if isinstance(v, str) and v.startswith(text)), key=len)  # fmt: skip
        # (the shortest first: the closings are few, and a budget wants the fewest tokens)
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            found = _matches(pattern, text)
            if found is False:
                rest = continuation(pattern, text)  # (what the text began, finished)
                if rest is not None:
                    ends.append(_escaped(rest) + '"')
                match = shortest_pattern_text(pattern)
                if match is not None:
                    ends.append(_escaped(match) + '"')
        short = _count(node.get("minLength")) - len(text)
        if short > 0:
            ends.append("a" * short + '"')
    ends.append('"')
    return list(dict.fromkeys(ends))


def _matches(pattern: str, text: str) -> bool | None:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return None


_HEX_FILLS = ("0041", "0000", "0061", "ffff", "aaaa", "face", "feed")


def _escape_fills(escape: str, cost: Callable[[str], int] | None = None) -> list[str]:
    """What may finish a begun escape (``\\`` or ``\\u`` and some hex digits), most likely
    first: a backslash escaped, or the digits of ``\\u0041`` (``A``: a free string's or a
    pattern's letter), ``\\u0000`` (a control character: the one way canonical JSON escapes
    with ``\\u``), ``\\u0061`` (``a``) or a few codes of hex letters that the digits written
    do not contradict, else the rest as one repeated digit or letter, never a surrogate; a high
    surrogate's digits finished with zeros, then the low surrogate ``\\uDC00`` (what is left
    of it). With ``cost`` (tokens a text takes), the cheapest first (a vocabulary may spell
    ``ffff`` in one token and ``0041`` in four).

    Example:
        >>> from hf_fvo.grammar.schema.closer import _escape_fills
        >>> _escape_fills(r"\\u00")[:3], _escape_fills(r"\\uda"), _escape_fills(r"\\ud83d\\ud")
        (['41', '00', '61'], ['00\\\\udc00'], ['c00'])
        >>> _escape_fills(r"\\ud")  # (``\\udfff`` is a surrogate)
        ['000']
    """
    if escape == "\\":
        return ["\\"]
    if len(escape) >= 6:  # (a high surrogate written: its low one's rest)
        return ["\\udc00"[len(escape) - 6 :]]
    digits = escape[2:]
    if len(digits) >= 2 and digits[0] in "dD" and digits[1] in "89abAB":
        return ["0" * (4 - len(digits)) + "\\udc00"]
    rest = 4 - len(digits)
    fills = [code[len(digits) :] for code in _HEX_FILLS if code.startswith(digits)]
    fills += [c * rest for c in "0fa"]
    fills = [f for f in dict.fromkeys(fills) if not 0xD800 <= int(digits + f, 16) < 0xE000]
    return fills if cost is None else sorted(fills, key=cost)


def _utf8_fill(pending: bytes) -> bytes | None:
    """The first continuation bytes that make ``pending`` (a character's first bytes) a whole
    character; ``None`` where none do."""
    size = 2 if pending[0] < 0xE0 else 3 if pending[0] < 0xF0 else 4
    missing = size - len(pending)
    if missing <= 0:
        return None
    for second in range(0x80, 0xC0):
        fill = bytes([second]) + b"\x80" * (missing - 1)
        try:
            (pending + fill).decode()
        except UnicodeDecodeError:
            continue
        return fill
    return None


def _complete_utf8(data: bytes) -> int:
    """Where the last whole UTF-8 character of ``data`` ends."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: whole if its sequence fits
            size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= size else len(data) - back
    return len(data)


def _merged(parts: list[Any]) -> Any:
    """:func:`~.instance._merge`, marked :data:`~.closing.LOOSE` where it admits what a part
    forbids (the closings it writes are parsed; no bound is read from it)."""
    merged = _merge(parts)
    if isinstance(merged, dict) and not merged_exactly(parts, merged):
        merged[LOOSE] = True
    return merged
