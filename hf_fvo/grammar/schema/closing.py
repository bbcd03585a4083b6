"""How far from acceptance any prefix of a JSON text can be: a bound in bytes, from the schema.

A budgeted pushdown grammar must keep every token whose next state can still finish inside the
budget. Checking each candidate costs a parser walk per token; :func:`closing_bound` says when
no check is needed: if every viable prefix of a member completes within C more bytes (so within
C single-byte tokens), a row with at least C tokens of room admits its whole mask.

The bound is computed for compact JSON (or ``[ ]?`` whitespace, which a completion never needs)
over the *prepared* schema (:func:`~hf_fvo.grammar.schema.prepare.prepare_json_schema`). Only
keywords whose effect on completions is understood are bounded; anything else (formats, free
values that nest without limit, recursion, ``multipleOf``…) gives ``None``, and the grammar
then checks candidates near the end of every budget. A ``pattern`` is bounded from the
standard library's parse tree of the regex (:func:`pattern_bounds`) where it has only
characters, classes, groups, alternatives, repetitions and outer anchors. Pure: no engine
import.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["closing_bound", "pattern_bounds"]

_ESCAPE = 7  # a string left after a high surrogate "\\uD83D" needs "\\uDC00" and its quote
_NUMBER_SLACK = 4  # '-', '.', 'e', a sign: each needs one more digit
_CHARACTER = 11  # a string left inside a character: "\\" needs "uD83D\\uDC00" at most
_WIDEST = 12  # bytes of any character in a JSON string (a surrogate pair's two escapes)
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "id",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$anchor",
    "definitions", "$defs",
})  # fmt: skip


class _Unbounded(Exception):
    pass


def closing_bound(schema: Any) -> int | None:
    """Bytes that complete any viable prefix of a member of ``schema``'s compact JSON language,
    at most; ``None`` when not shown.

    Example:
        >>> from hf_fvo.grammar.schema.closing import closing_bound
        >>> closing_bound({"type": "object", "properties": {"ok": {"type": "boolean"}},
        ...                "required": ["ok"], "additionalProperties": False})
        65
        >>> closing_bound({"type": "string", "format": "date"}) is None
        True
    """
    try:
        return _Bounds(schema).closing(schema, ())
    except (_Unbounded, RecursionError, TypeError, ValueError, LookupError, AttributeError):
        return None


class _Bounds:
    def __init__(self, root: Any) -> None:
        self.root = root

    # -- one recursion, two quantities ---------------------------------------------------------
    # closing=True: max over viable prefixes of a value of the shortest completion;
    # closing=False: an upper bound on the length of the shortest value.

    def closing(self, s: Any, seen: tuple[str, ...]) -> int:
        return self.bound(s, seen, closing=True)

    def shortest(self, s: Any, seen: tuple[str, ...]) -> int:
        return self.bound(s, seen, closing=False)

    def bound(self, s: Any, seen: tuple[str, ...], closing: bool) -> int:
        s, seen = self.resolve(s, seen)
        if s is True or s == {}:
            if closing:
                raise _Unbounded("any value: nesting without limit")
            return 1  # 0
        if s is False:
            if not closing:
                raise _Unbounded("false has no member")
            return 0
        self.check(s)
        if "const" in s:
            return len(_dump(s["const"]))
        if "enum" in s:
            return max(len(_dump(v)) for v in s["enum"])  # some member is one of them
        branches = s.get("anyOf") or s.get("oneOf")
        if branches is not None:
            rest = {k: v for k, v in s.items() if k not in ("anyOf", "oneOf")}
            if closing and set(rest) - _ANNOTATIONS:
                raise _Unbounded("anyOf beside other keywords")
            return max(self.bound(b, seen, closing) for b in branches)
        types = s.get("type")
        if types is None:
            raise _Unbounded("no type")
        types = [types] if isinstance(types, str) else list(types)
        return max(self.typed(s, t, seen, closing) for t in types)

    def typed(self, s: dict, kind: str, seen: tuple[str, ...], closing: bool) -> int:
        if kind in ("boolean", "null"):
            return 5
        if kind in ("integer", "number"):
            return self.number_yield(s, kind) + (_NUMBER_SLACK if closing else 0)
        if kind == "string":
            if "format" in s:
                raise _Unbounded("format")
            if "pattern" in s:
                if "minLength" in s or "maxLength" in s:
                    raise _Unbounded("pattern beside a length")
                bounds = pattern_bounds(s["pattern"])
                if bounds is None:
                    raise _Unbounded("pattern")
                shortest, farthest = bounds
                # inside: finish the character, then the regex, then the closing quote
                return _CHARACTER + farthest + 1 if closing else shortest + 2
            return int(s.get("minLength", 0)) + (_ESCAPE if closing else 0) + 2
        if kind == "array":
            return self.array(s, seen, closing)
        if kind == "object":
            return self.object(s, seen, closing)
        raise _Unbounded(kind)

    # -- containers and numbers -----------------------------------------------------------------

    def array(self, s: dict, seen: tuple[str, ...], closing: bool) -> int:
        if s.get("contains") is not None or s.get("uniqueItems"):
            raise _Unbounded("contains/uniqueItems")
        prefix = list(s.get("prefixItems", []))
        items = s.get("items", True)
        need = max(int(s.get("minItems", 0)), 0)
        schemas = prefix + ([items] * max(need - len(prefix), 0))
        body = sum(self.shortest(x, seen) + 1 for x in schemas[:need]) + 2
        if not closing:
            return body
        inner = [x for x in [*prefix, items] if x is not False]
        worst = max((self.closing(x, seen) for x in inner), default=0)
        return body + worst + 1

    def object(self, s: dict, seen: tuple[str, ...], closing: bool) -> int:
        for key in ("patternProperties", "propertyNames", "dependentRequired", "dependencies",
                    "dependentSchemas", "minProperties", "unevaluatedProperties"):  # fmt: skip
            if s.get(key):
                raise _Unbounded(key)
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        required = list(s.get("required", []))
        body = 2
        for name in required:
            value = props.get(name, extra)
            body += len(_dump(name)) + 2 + self.shortest(value, seen)
        if not closing:
            return body
        values = [v for v in props.values() if v is not False]
        keys = [len(_dump(k)) + 1 for k in props]
        if extra is not False:
            values.append(extra)
            keys.append(_ESCAPE + 1)
        if not values:
            return body
        # inside a key, or inside (or before) a value, then the other required members
        worst = max(
            max(keys) + max(self.shortest(v, seen) for v in values),
            max(self.closing(v, seen) for v in values),
        )
        return body + worst + 2

    def number_yield(self, s: dict, kind: str) -> int:
        if "multipleOf" in s:
            raise _Unbounded("multipleOf")
        keys = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        bounds = [s[k] for k in keys if isinstance(s.get(k), (int, float)) and s[k] is not True
                  and s[k] is not False]  # fmt: skip
        if not bounds:
            return 1
        if any(not math.isfinite(b) for b in bounds):
            raise _Unbounded("non-finite bound")
        return max(len(_dump(b)) for b in bounds) + 2 * _NUMBER_SLACK

    # -- references -----------------------------------------------------------------------------

    def resolve(self, s: Any, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if ref in seen or set(s) - _ANNOTATIONS - {"$ref"}:
                raise _Unbounded("recursive or combined $ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise _Unbounded("external $ref")
            target: Any = self.root
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target[int(part)] if isinstance(target, list) else target[part]
            s, seen = target, (*seen, ref)
        return s, seen

    @staticmethod
    def check(s: dict) -> None:
        known = {
            "type", "const", "enum", "anyOf", "oneOf", "properties", "required",
            "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
            "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "pattern", "format", "multipleOf", "contains", "uniqueItems",
            "patternProperties", "propertyNames", "dependentRequired", "dependencies",
            "dependentSchemas", "minProperties", "maxProperties", "unevaluatedProperties",
            "x-guidance",
        }  # fmt: skip
        unknown = set(s) - known - _ANNOTATIONS
        if unknown:
            raise _Unbounded(f"keywords {sorted(unknown)}")


def pattern_bounds(pattern: str) -> tuple[int, int] | None:
    r"""Bytes of a JSON string's content matching ``pattern`` (JSON Schema: found anywhere in
    the string): an upper bound on its shortest content, and on the bytes that complete any
    viable prefix of content (made of whole characters) into a match; ``None`` where the regex
    is not read (look-around, backreferences, word boundaries, inner anchors, ECMA-only
    syntax).

    A viable prefix ends before a match (write a whole match), inside one (finish it) or after
    one (nothing), so the second bound is the regex's own: a sequence finishes its current
    item then writes the shortest of each later one, a repetition finishes its copy then
    writes its minimum of copies, and a character costs its cheapest JSON spelling (1 byte for
    printable ASCII, 2 for ``"``, ``\`` and the short escapes, 6 for other control characters,
    12 where no ASCII character matches).

    Example:
        >>> from hf_fvo.grammar.schema.closing import pattern_bounds
        >>> pattern_bounds("^[a-z]{3,}@x$"), pattern_bounds(r"\d{4}-\d{2}")
        ((5, 5), (7, 7))
        >>> pattern_bounds("(a|bcd)*e"), pattern_bounds(r"\bword\b") is None
        ((1, 4), True)
    """
    from hf_fvo.grammar.schema.patterns import inner_anchor, python_tree

    tree = python_tree(pattern, strict=True)
    if tree is None or inner_anchor(pattern):
        return None
    try:
        return _Regex(tree.state).sequence(list(tree.data), outer=True)
    except (_Unbounded, RecursionError, ValueError, TypeError):
        return None


class _Regex:
    """(shortest, closing) in bytes over :mod:`re._parser`'s nodes."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def sequence(self, items: list[Any], outer: bool = False) -> tuple[int, int]:
        if outer:  # a leading ^ and a trailing $ only restrict where the match stands
            last = len(items) - 1
            items = [it for i, it in enumerate(items)
                     if not (str(it[1]) in _OUTER_ANCHORS and i in (0, last))]  # fmt: skip
        bounds = [self.node(op, av) for op, av in items]
        shortest = sum(b[0] for b in bounds)
        farthest, after = 0, 0
        for short, far in reversed(bounds):  # finish item i, then the shortest of the rest
            farthest = max(farthest, far + after)
            after += short
        return shortest, farthest

    def node(self, op: Any, av: Any) -> tuple[int, int]:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "CATEGORY"):
            cost = self.cheapest(op, av)
            return cost, cost
        if name == "SUBPATTERN":
            return self.sequence(list(av[-1]))
        if name == "BRANCH":
            bounds = [self.sequence(list(b)) for b in av[1]]
            return min(b[0] for b in bounds), max(b[1] for b in bounds)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, body = av
            if high == 0:
                return 0, 0
            short, far = self.sequence(list(body))
            return low * short, far + max(low - 1, 0) * short
        raise _Unbounded(name)  # AT inside, ASSERT, GROUPREF, ATOMIC_GROUP, POSSESSIVE_REPEAT…

    def cheapest(self, op: Any, av: Any) -> int:
        """The fewest bytes a JSON string spells one character matching the node in."""
        import re._compiler as compiler
        import re._parser as parser

        one = compiler.compile(parser.SubPattern(self.state, [(op, av)]), self.state.flags)
        for cost, chars in _SPELLINGS:
            if any(one.fullmatch(ch) for ch in chars):
                return cost
        return _WIDEST


_OUTER_ANCHORS = ("AT_BEGINNING", "AT_BEGINNING_STRING", "AT_END", "AT_END_STRING")

# characters by the bytes of their cheapest spelling in a JSON string
_SPELLINGS = (
    (1, [chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\']),
    (2, ['"', "\\", "\b", "\f", "\n", "\r", "\t"]),
    (6, [chr(c) for c in range(0x20) if chr(c) not in "\b\f\n\r\t"]),
)


def _dump(value: Any) -> str:
    """A stand-in as long as any serialisation of ``value`` in bytes can be: compact JSON, and
    six bytes per character where strings are involved (any character may be written as a
    ``\\uXXXX`` escape)."""
    text = json.dumps(value, separators=(",", ":"))
    return text * 6 if isinstance(value, (str, list, dict)) else text
