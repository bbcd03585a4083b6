"""What every member of a JSON schema spells, and the fewest tokens that can spell it: a lower
bound on a member's tokens that holds where no regular superset of the schema compiles.

A schema with many required properties in the schema's key order (a configuration file, an API
object) has members of hundreds of tokens, and a regular superset of it too many states for the
automaton backend. Its members still share text: every one writes ``{"name":`` for each required
name, in order, with the listed names spelled canonically (:mod:`.lark`, :mod:`.regex` and
llguidance's JSON mode all do). :func:`literal_blocks` lists such blocks — byte strings that occur
in every member's compact text, in this order, with anything (maybe nothing) between two blocks —
and :func:`fewest_tokens` the fewest tokens of any text that contains them so: a token that
covers a block's bytes either matches them exactly, or starts or ends in the free text beside
the block, and each case is bounded by what the vocabulary holds. It is a lower bound on every
member's tokens, never a claim that a member that short exists.

Only what holds for every member is read: required names of ``type: object`` nodes declared in
``properties``, brackets of arrays with ``minItems``, quotes of strings, what a ``pattern`` (a
format, once prepared) makes every match write, a number's last byte (a digit: a class, whose
tokens reach no further than the longest that holds a digit; SmolLM2's hold one), ``null``; a
node with ``enum``,
``const``, combinators or a ``$ref`` beside other keywords counts as free text. Pure: no engine
import.

Where an object's members may come in any order (``key_order="any"``), :func:`unordered_blocks`
reads the same text as segments whose order is free — the text before an object's members, each
member, the text after them — and :func:`fewest_tokens_unordered` bounds any arrangement of them:
each segment's fewest tokens, less one per boundary between segments (a token may cover both
sides of one boundary, and tokens do not overlap).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from hf_fvo.grammar.schema.facts import definitions_of, ref_target
from hf_fvo.grammar.schema.patterns import python_tree

__all__ = [
    "ending_bytes",
    "fewest_tokens",
    "fewest_tokens_unordered",
    "literal_blocks",
    "pattern_items",
    "unordered_blocks",
]

_MAX_BYTES = 1 << 16  # blocks read at most (a prefix of the blocks bounds as soundly)
# keywords that make a node free text here (several spellings, or an order merged from parts)
_FREE = ("enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "$ref", "dependentSchemas")
_GAP = None
_CUT = "cut"  # (unordered reading) a boundary between segments whose order is free
_DIGIT = frozenset(b"0123456789")  # a JSON number's last byte, however it is spelled
_Item = bytes | frozenset[int] | None  # literal bytes, one byte of a class, or free text
# bytes a pattern's character is written as, one byte each, in the canonical JSON string text
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord('"'), ord("\\")}
_MAX_ITEMS = 4096
# keywords beside a $ref that say nothing of the value (the reference alone decides)
_REF_SIBLINGS = {"$ref", "$defs", "definitions", "$schema", "$id", "$comment", "title",
                 "description", "default", "examples"}  # fmt: skip


_SPACE = frozenset(b" \t\n\r")  # JSON's whitespace: a layout may end a text with it
_ANY_END = frozenset(b'}]"0123456789el')  # the last byte of any JSON value
_TYPE_END = {"object": b"}", "array": b"]", "string": b'"', "integer": b"0123456789",
             "number": b"0123456789", "boolean": b"e", "null": b"l"}  # fmt: skip
_OPAQUE = ("not", "if", "allOf", "dependentSchemas")  # (read as: any value's last byte)


def ending_bytes(schema: Any) -> frozenset[int]:
    """The bytes a member's JSON text can end with, however it is spaced: its value's last
    byte (``}`` for an object, ``]``, ``"``, a digit however a number is spelled, ``e`` of
    true and false, ``l`` of null), then JSON's whitespace. Read from the root's ``type``,
    ``const``, ``enum``, ``anyOf``/``oneOf`` and plain ``$ref``; anything else counts as any
    JSON value (a superset: never a byte too few).

    Example:
        >>> from hf_fvo.grammar.schema.literals import ending_bytes
        >>> def shown(ends):  # (the bytes past JSON's whitespace)
        ...     return "".join(sorted(chr(b) for b in ends if b > 32))
        >>> shown(ending_bytes({"type": "object"})), len(ending_bytes({"type": "object"}))
        ('}', 5)
        >>> shown(ending_bytes({"anyOf": [{"type": "integer"}, {"enum": [True, None]}]}))
        '0123456789el'
    """
    return _ends(schema, definitions_of(schema), 0) | _SPACE


def _ends(s: Any, defs: dict[str, Any], depth: int) -> frozenset[int]:
    if depth > 64 or not isinstance(s, dict):
        return _ANY_END
    if "$ref" in s:
        if isinstance(s["$ref"], str) and set(s) <= _REF_SIBLINGS:
            return _ends(ref_target(s, defs), defs, depth + 1)
        return _ANY_END
    if any(k in s for k in _OPAQUE):
        return _ANY_END
    out = _ANY_END
    kind = s.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
        if kinds is None or not all(isinstance(k, str) and k in _TYPE_END for k in kinds):
            return _ANY_END
        out = frozenset(b"".join(_TYPE_END[k] for k in kinds))
    values = [s["const"]] if "const" in s else s.get("enum") if "enum" in s else None
    if isinstance(values, list):
        last = frozenset(b"".join(_value_end(v) for v in values))
        out &= last if last <= _ANY_END else _ANY_END
    for key in ("anyOf", "oneOf"):
        branches = s.get(key)
        if isinstance(branches, list):
            out &= frozenset().union(*(_ends(b, defs, depth + 1) for b in branches))
    return out


def _value_end(v: Any) -> bytes:
    """The bytes a JSON value equal to ``v`` can end with (a number: any digit, as ``1.0`` and
    ``1e0`` equal ``1``)."""
    if isinstance(v, bool) or v is None:
        return b"e" if v is not None else b"l"
    if isinstance(v, int | float):
        return _TYPE_END["number"]
    if isinstance(v, str):
        return b'"'
    return b"}" if isinstance(v, dict) else b"]" if isinstance(v, list) else bytes(_ANY_END)


def literal_blocks(schema: Any, compact: bool = True) -> list[bytes | frozenset[int]]:
    """Byte strings that every member of a prepared schema's language writes, in this order, with
    free text (maybe empty) between consecutive blocks; a frozenset is one byte of a class (a
    pattern's, :func:`pattern_items`; a number's last byte). ``compact=False`` where whitespace
    may separate JSON's tokens.

    Example:
        >>> from hf_fvo.grammar.schema.literals import literal_blocks
        >>> literal_blocks({"type": "object", "properties": {"a": {"type": "string"},
        ...                 "b": {"type": "null"}}, "required": ["a", "b"]})
        [b'{', b'"a":"', b'"', b'"b":null', b'}']
        >>> sorted(literal_blocks({"type": "integer"})[0]) == sorted(b"0123456789")
        True
        >>> literal_blocks({"type": "array", "items": {"type": "object"}, "minItems": 2})
        [b'[{', b'},{', b'}', b']']
    """
    reader = _Reader(schema, compact)
    reader.node(schema, 0)
    return _joined(reader.items)


def unordered_blocks(schema: Any, compact: bool = True) -> list[list[bytes | frozenset[int]]]:
    """What every member of a prepared schema writes where each object's members may come in
    any order: segments of :func:`literal_blocks` whose order among themselves is free (each
    object's members, a segment each; the text around them), for
    :func:`fewest_tokens_unordered`. A member that ``minProperties`` asks beyond the required
    ones writes its key's quotes and colon.

    Example:
        >>> from hf_fvo.grammar.schema.literals import unordered_blocks
        >>> unordered_blocks({"type": "object", "properties": {"a": {"type": "string"},
        ...                   "b": {}}, "required": ["a", "b"]})
        [[b'{'], [b'"a":"', b'"'], [b'"b":'], [b'}']]
    """
    reader = _Reader(schema, compact)
    reader.cuts = True
    reader.node(schema, 0)
    cuts = [i for i, x in enumerate(reader.items) if x is _CUT]
    segments, start = [], 0
    for end in [*cuts, len(reader.items)]:
        blocks = _joined(reader.items[start:end])
        if blocks:
            segments.append(blocks)
        start = end + 1
    return segments


def _joined(items: Sequence[Any]) -> list[bytes | frozenset[int]]:
    """Items as blocks: consecutive bytes joined, a class a block of its own, gaps dropped."""
    blocks: list[bytes | frozenset[int]] = []
    run: list[bytes] = []
    for item in [*items, _GAP]:
        if isinstance(item, bytes):
            run.append(item)
            continue
        if run:
            blocks.append(b"".join(run))
        run = []
        if isinstance(item, frozenset):  # a class: a block of its own
            blocks.append(item)
    return blocks


def fewest_tokens_unordered(
    segments: Sequence[Sequence[bytes | frozenset[int]]], token_bytes: Iterable[bytes | None]
) -> int:
    """The fewest tokens of any text that holds each segment's blocks in order, the segments in
    any order (free text between any two blocks), at least: the sum of each segment's
    :func:`fewest_tokens`, less one per boundary between two segments.

    Example:
        >>> from hf_fvo.grammar.schema.literals import fewest_tokens_unordered
        >>> vocab = [b"a", b"b", b"c", b"ab", b"xabc"]
        >>> fewest_tokens_unordered([[b"ab"], [b"cc"], [b"cab"]], vocab)
        3
    """
    table = _Table.of(tuple(token_bytes))
    counts = [_fewest(table, blocks) for blocks in segments]
    return max(0, sum(counts) - max(0, len(counts) - 1))


def fewest_tokens(
    blocks: Sequence[bytes | frozenset[int]], token_bytes: Iterable[bytes | None]
) -> int:
    """The fewest tokens of any text that holds ``blocks`` in order (free text between them),
    at least: a lower bound on the tokens of every member that :func:`literal_blocks` reads.

    A token that covers block bytes from a position inside a block starts there, so it is those
    bytes exactly, or has the rest of the block as a prefix and then covers at most its
    remaining length of later blocks; one that covers a block's first byte may start in the free
    text before it (a suffix of the token, or the whole block inside the token). A block that is
    a set of bytes (one byte of a pattern's class) is covered by a token that holds one of them.
    Relaxing where the token ends only lowers the count.

    Example:
        >>> from hf_fvo.grammar.schema.literals import fewest_tokens
        >>> vocab = [b"a", b"b", b"c", b"ab", b"xabc"]
        >>> fewest_tokens([b"abc"], vocab), fewest_tokens([b"abab"], vocab)
        (1, 2)
        >>> fewest_tokens([b"ccc", b"cc"], vocab), fewest_tokens([frozenset(b"ab")] * 3, vocab)
        (5, 1)
    """
    return _fewest(_Table.of(tuple(token_bytes)), blocks)


def _fewest(table: _Table, blocks: Sequence[bytes | frozenset[int]]) -> int:
    classes: dict[int, frozenset[int]] = {}  # position: the bytes a class block allows there
    spelled: list[bytes] = []
    ends: list[int] = []  # per position: where its block ends
    for block in blocks:
        if isinstance(block, frozenset):
            classes[len(ends)] = block
            block = b"\x00"  # a stand-in: class positions are never read as bytes
        spelled.append(block)
        ends.extend([len(ends) + len(block)] * len(block))
    chain = b"".join(spelled)[:_MAX_BYTES]
    size = len(chain)
    ends = [min(e, size) for e in ends[:size]]
    cap = [table.reach_of(classes[p]) if p in classes else size for p in range(size)]
    inf = size + 1
    best = [0] + [inf] * size
    for a in range(size):
        here = best[a] + 1
        if here > inf:
            continue
        end = ends[a]
        if a in classes:  # a token that holds one of the class's bytes
            reach = cap[a]
        else:
            start = a == 0 or ends[a - 1] != end  # the block's first byte
            exact = table.suffixes if start else table.tokens
            for b in range(a + 1, min(end, a + table.longest + 1)):  # ends inside the block
                if chain[a:b] in exact and here < best[b]:
                    best[b] = here
            held = chain[a:end]
            reach = table.containing(held) if start else table.prefixed.get(held, 0)
        for b in range(end, min(a + reach, size) + 1):  # covers the block's end, maybe more:
            if b > end and b - a > cap[b - 1]:  # no longer than a class it covers allows
                break
            if here < best[b]:
                best[b] = here
    return best[size] if best[size] <= size else 0


def pattern_items(pattern: str) -> list[_Item]:
    """What every string a JSON Schema ``pattern`` matches writes, in its canonical JSON text:
    bytes, one-byte classes (a frozenset of the bytes allowed there) and gaps (``None``: any
    text). ECMA-262 reading: ``\\d`` is ``[0-9]``, ``\\w`` ``[A-Za-z0-9_]``; a character that
    may need more than one byte (outside printable ASCII, ``"``, ``\\``), alternatives of
    different lengths, unbounded repeats beyond their minimum and constructs Python's parser
    reads otherwise are gaps.

    Example:
        >>> from hf_fvo.grammar.schema.literals import pattern_items
        >>> items = pattern_items("^Z\\\\d{2}(-x|-y)?$")
        >>> items[0], sorted(items[1]) == list(b"0123456789"), items[3]
        (b'Z', True, None)
        >>> pattern_items("ab")
        [None, b'a', b'b', None]
    """
    import re._constants as c

    tree = python_tree(pattern, strict=True)  # a class Python reads otherwise: not read
    if tree is None:
        return [_GAP]
    if tree.state.flags & (c.SRE_FLAG_IGNORECASE | c.SRE_FLAG_MULTILINE | c.SRE_FLAG_DOTALL):
        return [_GAP]
    seq = list(tree)
    head = [] if seq and seq[0] == (c.AT, c.AT_BEGINNING) else [_GAP]
    tail = [] if seq and seq[-1] == (c.AT, c.AT_END) else [_GAP]
    try:
        body = _Pattern(c).items(seq)
    except RecursionError:
        return [_GAP]
    return [*head, *body[:_MAX_ITEMS], *tail]


class _Pattern:
    """A parse tree of :mod:`re._parser` as forced items (:func:`pattern_items`)."""

    def __init__(self, constants: Any) -> None:
        self.c = constants

    def items(self, seq: Sequence[Any]) -> list[_Item]:
        out: list[_Item] = []
        for op, av in seq:
            if len(out) > _MAX_ITEMS:
                break
            out += self.item(op, av)
        return out

    def item(self, op: Any, av: Any) -> list[_Item]:
        c = self.c
        fixed = self.fixed([(op, av)])
        if fixed is not None:
            return [bytes(f) if len(f) == 1 else f for f in fixed]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, high, sub = av
            once = self.items(list(sub))
            out = once * min(low, _MAX_ITEMS // max(len(once), 1))
            return out if high == low else [*out, _GAP]
        if op is c.SUBPATTERN and not av[1] and not av[2]:
            return self.items(list(av[3]))
        if op is c.ATOMIC_GROUP:
            return self.items(list(av))
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            return []  # zero width: it only narrows the matches
        return [_GAP]

    def fixed(self, seq: Sequence[Any]) -> list[frozenset[int]] | None:
        """The class of each byte where every match of ``seq`` has the same length in one-byte
        characters, else ``None``."""
        c = self.c
        out: list[frozenset[int]] = []
        for op, av in seq:
            if op is c.LITERAL:
                if av not in _PLAIN:
                    return None
                out.append(frozenset((av,)))
            elif op is c.IN:
                allowed = self.charset(av)
                if allowed is None:
                    return None
                out.append(allowed)
            elif op is c.SUBPATTERN and not av[1] and not av[2]:
                inner = self.fixed(list(av[3]))
                if inner is None:
                    return None
                out += inner
            elif op is c.BRANCH:
                arms = [self.fixed(list(arm)) for arm in av[1]]
                if any(a is None or len(a) != len(arms[0]) for a in arms):
                    return None
                out += [frozenset().union(*col) for col in zip(*arms, strict=True)]
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                low, high, sub = av
                inner = self.fixed(list(sub))
                if inner is None or low != high or len(out) + low * len(inner) > _MAX_ITEMS:
                    return None
                out += inner * low
            elif op not in (c.AT, c.ASSERT, c.ASSERT_NOT):
                return None
        return out

    def charset(self, items: Sequence[Any]) -> frozenset[int] | None:
        """The bytes a class ``[...]`` allows, where all of them are one-byte characters."""
        c = self.c
        allowed: set[int] = set()
        for op, av in items:
            if op is c.LITERAL and av in _PLAIN:
                allowed.add(av)
            elif op is c.RANGE and av[0] in _PLAIN and av[1] in _PLAIN:
                allowed.update(x for x in range(av[0], av[1] + 1))
            elif op is c.CATEGORY and av is c.CATEGORY_DIGIT:
                allowed.update(b"0123456789")
            elif op is c.CATEGORY and av is c.CATEGORY_WORD:
                allowed.update(b"0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
            else:  # a negation, a character that needs an escape or more bytes, \\s …
                return None
        if not allowed <= _PLAIN:
            return None
        return frozenset(allowed)


class _Reader:
    """Walks a prepared schema and writes its literal items (bytes, or a gap)."""

    def __init__(self, root: Any, compact: bool) -> None:
        self.defs = definitions_of(root)
        self.ws = () if compact else (_GAP,)
        self.items: list[_Item | str] = []
        self.size = 0
        self.cuts = False  # mark where an object's members begin and end (any key order)

    def put(self, *items: _Item | str) -> None:
        for item in items:
            self.items.append(item)
            if isinstance(item, frozenset):
                self.size += 1
            elif isinstance(item, bytes):
                self.size += len(item)

    def node(self, s: Any, depth: int) -> None:
        if self.size > _MAX_BYTES or depth > 64 or not isinstance(s, dict):
            return self.put(_GAP)
        if isinstance(s.get("$ref"), str) and set(s) <= _REF_SIBLINGS:
            return self.node(ref_target(s, self.defs), depth + 1)
        kind = s.get("type")
        if any(k in s for k in _FREE) or not isinstance(kind, str):
            return self.put(_GAP)
        if kind == "string":
            pattern = s.get("pattern")
            inner = pattern_items(pattern) if isinstance(pattern, str) else [_GAP]
            return self.put(b'"', *inner, b'"')
        if kind == "object":
            return self.object(s, depth)
        if kind == "array":
            return self.array(s, depth)
        if kind in ("integer", "number"):  # several spellings, each ending in a digit
            return self.put(_GAP, _DIGIT)
        if kind == "null":
            return self.put(b"null")
        return self.put(_GAP)  # true/false: a class of their bytes would reach too far

    def object(self, s: dict, depth: int) -> None:
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        required = set(s.get("required") or ()) if isinstance(s.get("required"), list) else set()
        self.put(b"{")
        cut = (_CUT,) if self.cuts else ()
        written = 0
        for name, sub in props.items():
            if name not in required:
                continue
            self.put(_GAP, *cut, *_key(name), *self.ws, b":", *self.ws)
            self.node(sub, depth + 1)
            written += 1
        if self.cuts:  # members beyond these that minProperties asks: a key's quotes and colon
            more = s.get("minProperties", 0)
            more = more if isinstance(more, int) and not isinstance(more, bool) else 0
            for _ in range(min(more - written, 4096)):
                self.put(_GAP, _CUT, b'"', _GAP, b'"', *self.ws, b":")
        self.put(_GAP, *cut, b"}")

    def array(self, s: dict, depth: int) -> None:
        need = s.get("minItems", 0)
        need = need if isinstance(need, int) and not isinstance(need, bool) else 0
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        items = s.get("items", True)
        if isinstance(items, list):  # draft 4–2019 tuple form
            prefix, items = items, s.get("additionalItems", True)
        self.put(b"[", *self.ws)
        for k in range(need):
            if k:
                self.put(*self.ws, b",", *self.ws)
            self.node(prefix[k] if k < len(prefix) else items, depth + 1)
            if self.size > _MAX_BYTES:
                break
        self.put(_GAP, b"]")


def _key(name: str) -> list[bytes | None]:
    """A listed name's canonical spelling as blocks: a control character or U+007F, which has
    two spellings, as a gap."""
    items: list[bytes | None] = [b'"']
    for c in name:
        if ord(c) < 0x20 or c == "\x7f":
            items.append(_GAP)
        else:
            items.append(json.dumps(c, ensure_ascii=False)[1:-1].encode())
    items.append(b'"')
    return items


class _Table:
    """One vocabulary's token strings as sets: whole, their suffixes, their prefixes with the
    longest token that starts so; built once per vocabulary."""

    def __init__(self, tokens: tuple[bytes | None, ...]) -> None:
        spelled = sorted({t for t in tokens if t}, key=len, reverse=True)
        self.by_length = spelled
        self.longest = len(spelled[0]) if spelled else 0
        self.tokens = set(spelled)
        self.suffixes = {t[i:] for t in spelled for i in range(len(t))}
        self.prefixed: dict[bytes, int] = {}
        for t in reversed(spelled):  # shortest first, so the longest wins
            for i in range(1, len(t) + 1):
                self.prefixed[t[:i]] = len(t)
        self._joined = b"\x00".join(spelled)  # a first test, in C, before the scan
        self.reach = [0] * 256  # per byte: the longest token that holds it
        for t in spelled:
            for x in set(t):
                self.reach[x] = max(self.reach[x], len(t))
        self._containing: dict[bytes, int] = {}

    @staticmethod
    @functools.lru_cache(maxsize=2)
    def of(tokens: tuple[bytes | None, ...]) -> _Table:
        return _Table(tokens)

    def reach_of(self, allowed: frozenset[int]) -> int:
        """The length of the longest token that holds one of the ``allowed`` bytes."""
        return max((self.reach[x] for x in allowed), default=0)

    def containing(self, block: bytes) -> int:
        """The length of the longest token that holds ``block`` (0: none does)."""
        if block not in self._containing:
            held = len(block) <= self.longest and block in self._joined
            self._containing[block] = next(
                (len(t) for t in self.by_length if held and block in t), 0
            )
        return self._containing[block]
