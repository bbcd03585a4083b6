"""How far from acceptance any prefix of a JSON text can be: a bound in bytes, from the schema.

A budgeted pushdown grammar must keep every token whose next state can still finish inside the
budget. Checking each candidate costs a parser walk per token; :func:`closing_bound` says when
no check is needed: if every viable prefix of a member completes within C more bytes (so within
C single-byte tokens), a row with at least C tokens of room admits its whole mask.

The bound is computed for compact JSON (or ``[ ]?`` whitespace, which a completion never needs)
over the *prepared* schema (:func:`~hf_fvo.grammar.schema.prepare.prepare_json_schema`). Only
keywords whose effect on completions is understood are bounded; anything else (formats, free
values that nest without limit, recursion, ``multipleOf``…) gives ``None``, and the grammar
then checks candidates near the end of every budget. A node with ``allOf``, or ``anyOf`` or
``$ref`` beside other keywords, is bounded as the schemas it stands for (:meth:`_Bounds.ways`),
where their merge says exactly what its parts say (:func:`merged_exactly`); a node with no
``type`` as any type its keywords allow. Per place (:class:`FrameBounds`, a bounded number of
levels), a reference may come back to itself. A ``pattern`` is bounded from the
standard library's parse tree of the regex (:func:`pattern_bounds`) where it has only
characters, classes, groups, alternatives, repetitions and outer anchors. Pure: no engine
import.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from hf_fvo.grammar.schema.instance import _MERGED, _merge

__all__ = ["LOOSE", "FrameBounds", "closing_bound", "merged_exactly", "pattern_bounds"]

_ANY_LEVEL = 4  # any value, one level deeper: `{"` then `":0}` (an empty key, `0`) or `[` `0]`
_ESCAPE = 7  # a string left after a high surrogate "\\uD83D" needs "\\uDC00" and its quote
_NUMBER_SLACK = 4  # '-', '.', 'e', a sign: each needs one more digit
_CHARACTER = 11  # a string left inside a character: "\\" needs "uD83D\\uDC00" at most
_WIDEST = 12  # bytes of any character in a JSON string (a surrogate pair's two escapes)
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "id",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$anchor",
    "definitions", "$defs", _MERGED,
})  # fmt: skip
LOOSE = "\x00loose"  # marks a merge that admits more than its parts (no bound read from it)
_KINDS = ("null", "boolean", "integer", "number", "string", "array", "object")  # no `type`: any
_WAYS = 64  # the schemas one node may stand for (its allOf merged, its anyOf's branches apart)
_KEPT = 4096  # shortest values and merged ways kept per schema (by node)
_HOPS = 16  # $ref, allOf and anyOf levels followed at one node
_COMBINED = ("allOf", "anyOf", "oneOf", "$ref")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


class _Unbounded(Exception):
    pass


def closing_bound(schema: Any) -> int | None:
    """Bytes that complete any viable prefix of a member of ``schema``'s compact JSON language,
    at most; ``None`` when not shown.

    Example:
        >>> from hf_fvo.grammar.schema.closing import closing_bound
        >>> closing_bound({"type": "object", "properties": {"ok": {"type": "boolean"}},
        ...                "required": ["ok"], "additionalProperties": False})
        35
        >>> closing_bound({"type": "string", "format": "date"}) is None
        True
    """
    try:
        return _Bounds(schema).closing(schema, ())
    except (_Unbounded, RecursionError, TypeError, ValueError, LookupError, AttributeError):
        return None


class FrameBounds:
    """:func:`closing_bound`'s bounds per place of one schema's members, for a cursor that
    reads a prefix (:meth:`JsonCursor.reach <hf_fvo.grammar.schema.closer.JsonCursor.reach>`):
    what completes a value begun at a node, what completes an object or array from inside it
    (its keys written, its items counted), what closes it after the member being written, each
    in bytes, over the prefixes that open at most ``depth`` more objects and arrays; ``None``
    where not shown. Kept per node (the schema's own nodes: ids stay theirs).

    Example:
        >>> from hf_fvo.grammar.schema.closing import FrameBounds
        >>> item = {"type": "object", "properties": {"id": {"type": "integer"}},
        ...         "required": ["id"]}
        >>> bounds = FrameBounds(item)
        >>> bounds.inside(item, "o", ("id",), 0, 1), bounds.inside(item, "o", (), 0, 1)
        (17, 24)
        >>> bounds.rest(item, "o", (), 0), bounds.value({}, 2) < bounds.value({}, 3)
        (9, True)
    """

    _KEPT = 4096  # bounds kept (a cursor's frames repeat: the same node, keys and depth)

    def __init__(self, root: Any) -> None:
        self._bounds = _Bounds(root, tight=True)
        self._kept: dict[tuple[Any, ...], tuple[Any, int | None]] = {}

    def value(self, node: Any, depth: int) -> int | None:
        """Completes any prefix of a value of ``node`` (nothing written yet included)."""
        return self._kept_bound(("v", id(node), depth), node,
                                lambda: self._bounds.bound(node, (), True, depth))  # fmt: skip

    def inside(
        self, node: Any, kind: str, keys: tuple[str, ...], count: int, depth: int
    ) -> int | None:
        """Completes an object (``kind`` ``"o"``, ``keys`` written) or array (``"a"``,
        ``count`` items) of ``node`` from anywhere inside it, its members begun included."""
        key = ("i", id(node), kind, keys, count, depth)
        return self._kept_bound(
            key, node, lambda: self._container(node, kind, keys, count, depth + 1)
        )

    def rest(self, node: Any, kind: str, keys: tuple[str, ...], count: int) -> int | None:
        """Closes an object or array of ``node`` once the member being written has ended
        (``keys``: those written, that member's included; ``count``: items, likewise)."""
        return self._kept_bound(("r", id(node), kind, keys, count), node,
                                lambda: self._container(node, kind, keys, count, None))  # fmt: skip

    def _container(
        self, node: Any, kind: str, keys: tuple[str, ...], count: int, depth: int | None
    ) -> int:
        bounds = self._bounds
        s, seen = bounds.resolve(node, (), free=True)
        closing = depth is not None
        if s is True or (isinstance(s, dict) and not set(s) - _ANNOTATIONS):
            s = {"type": "object" if kind == "o" else "array"}  # (any value: any key, item)
        if not isinstance(s, dict):
            raise _Unbounded("no object or array here")
        if "const" in s or "enum" in s:  # (a value listed: what remains of the longest)
            return bounds.bound(s, seen, closing)
        if any(key in s for key in _COMBINED):
            # the text is in one of the schemas it stands for (each its own container)
            return max(self._container(way, kind, keys, count, depth)
                       for way, _ in bounds.ways(s, seen, True))  # fmt: skip
        bounds.check(s)
        types = s.get("type", _KINDS)
        types = [types] if isinstance(types, str) else list(types)
        if kind == "o" and "object" in types:
            return bounds.object(s, seen, closing, depth, written=keys)
        if kind == "a" and "array" in types:
            return bounds.array(s, seen, closing, depth, count=count)
        raise _Unbounded("a container its schema does not type")

    def _kept_bound(self, key: tuple[Any, ...], node: Any, compute: Any) -> int | None:
        kept = self._kept
        known = kept.get(key)  # (threads may share it: one lookup, no clear between)
        if known is not None:
            return known[1]
        try:
            found = compute()
        except (_Unbounded, RecursionError, TypeError, ValueError, LookupError, AttributeError):
            found = None
        if len(kept) >= self._KEPT:
            kept.clear()
        kept[key] = (node, found)  # (the node: its id stays its own)
        return found


class _Bounds:
    """``tight``: a listed string (a key, an ``enum`` or ``const`` value) counted as its compact
    JSON, each escape at six bytes (:func:`_size`), plus an escape's slack where a prefix may
    stop inside it; otherwise at six bytes a character (:func:`_dump`)."""

    def __init__(self, root: Any, tight: bool = False) -> None:
        self.root = root
        self.tight = tight
        self._shortest: dict[int, tuple[Any, Any]] = {}  # id → (node, bound or why none)
        self._ways: dict[tuple[int, bool], tuple[Any, list[Any]]] = {}  # (id, free) → (node, ways)

    def size(self, value: Any, inside: bool = False) -> int:
        """Bytes of ``value``'s JSON, at most (``inside``: what is left of it where a prefix
        has begun it)."""
        if not self.tight:
            return len(_dump(value))
        return _size(value) + (_ESCAPE if inside else 0)

    # -- one recursion, two quantities ---------------------------------------------------------
    # closing=True: max over viable prefixes of a value of the shortest completion;
    # closing=False: an upper bound on the length of the shortest value.

    def closing(self, s: Any, seen: tuple[str, ...]) -> int:
        return self.bound(s, seen, closing=True)

    def shortest(self, s: Any, seen: tuple[str, ...]) -> int:
        return self.bound(s, seen, closing=False)

    def bound(self, s: Any, seen: tuple[str, ...], closing: bool, depth: int | None = None) -> int:
        """``depth``: with ``closing``, over the prefixes that open at most ``depth`` objects
        and arrays inside the value (the value itself one of them); ``None``: any. With a
        ``depth``, a ``$ref`` may come back to itself (each level deeper opens a container);
        without, recursion is not bounded."""
        if not closing and not seen:  # (a value's shortest: the same wherever it is asked)
            key = id(s)
            if key not in self._shortest:
                if len(self._shortest) >= _KEPT:
                    self._shortest.clear()
                try:
                    self._shortest[key] = (s, self._bound(s, seen, False, None))
                except _Unbounded as error:
                    self._shortest[key] = (s, error)
            found = self._shortest[key][1]
            if isinstance(found, _Unbounded):
                raise found
            return found
        return self._bound(s, seen, closing, depth)

    def _bound(self, s: Any, seen: tuple[str, ...], closing: bool, depth: int | None) -> int:
        free = closing and depth is not None
        s, seen = self.resolve(s, seen, free)
        if s is True or (isinstance(s, dict) and not set(s) - _ANNOTATIONS):
            if not closing:
                return 1  # 0
            if depth is None:
                raise _Unbounded("any value: nesting without limit")
            # a scalar begun (a string: its escape, then its quote), or an object or array
            # opened: a key begun and its value (``":0``), or an item, inside it, then its
            # bracket
            return _ESCAPE + 2 + _ANY_LEVEL * depth
        if s is False:
            if not closing:
                raise _Unbounded("false has no member")
            return 0
        if not isinstance(s, dict):
            raise _Unbounded("not a schema")
        # (a value listed: whatever else the node says, its members are among them)
        if "const" in s:
            return self.size(s["const"], closing)
        if "enum" in s:
            return max(self.size(v, closing) for v in s["enum"])  # some member is one of them
        if any(key in s for key in _COMBINED):
            # a value of one of the schemas it stands for (a prefix: viable in one of them)
            ways = self.ways(s, seen, free)
            if not ways:
                return self.bound(False, seen, closing, depth)
            return self._over([lambda w=way, r=refs: self.bound(w, r, closing, depth)
                               for way, refs in ways], closing)  # fmt: skip
        self.check(s)
        types = s.get("type", _KINDS)
        types = [types] if isinstance(types, str) else list(types)
        return self._over([lambda t=t: self.typed(s, t, seen, closing, depth) for t in types],
                          closing)  # fmt: skip

    @staticmethod
    def _over(bounds: list[Any], closing: bool) -> int:
        """Of a value that is one of several kinds: a prefix's closing is its own kind's (the
        largest of them), the shortest value any one's (the smallest that has one)."""
        if closing:
            return max(bound() for bound in bounds)
        found = []
        for bound in bounds:
            try:
                found.append(bound())
            except _Unbounded:
                continue
        if not found:
            raise _Unbounded("no kind has a value shown")
        return min(found)

    def ways(self, s: dict, seen: tuple[str, ...], free: bool) -> list[tuple[Any, tuple[str, ...]]]:
        """The schemas ``s`` stands for, each one node without ``allOf``, ``anyOf`` or
        ``$ref`` (with the references followed to it): its ``$ref`` and ``allOf`` parts merged
        (:func:`~.instance._merge`, then :meth:`settled`), its ``anyOf``/``oneOf`` branches
        apart (each merged with the rest). A merge is kept only where it says exactly what
        its parts say together (:meth:`exact`); at most ``_WAYS`` of them."""
        key = (id(s), free)
        known = self._ways.get(key) if free or not seen else None
        if known is not None:
            return known[1]
        out = []
        for parts, refs in self._conjunctions(s, seen, free, 0):
            merged = self.settled(_merge(parts))
            if merged is False:
                continue  # (no member this way)
            self.exact(parts, merged)
            out.append((merged, refs))
        if free or not seen:
            if len(self._ways) >= _KEPT:
                self._ways.clear()
            self._ways[key] = (s, out)  # (the node: its id stays its own)
        return out

    def never(self, s: Any, seen: tuple[str, ...], free: bool) -> bool:
        """Whether ``s`` is shown to admit no value (``false``, or parts that contradict)."""
        if s is False:
            return True
        if not isinstance(s, dict) or not any(key in s for key in _COMBINED):
            return False
        try:
            return not self.ways(s, seen, free)
        except _Unbounded:
            return False

    def _conjunctions(
        self, s: Any, seen: tuple[str, ...], free: bool, hops: int
    ) -> list[tuple[list[Any], tuple[str, ...]]]:
        if hops > _HOPS:
            raise _Unbounded("combinators nested too deep")
        if s is True:
            return [([], seen)]
        if s is False:
            return []
        if not isinstance(s, dict):
            raise _Unbounded("not a schema")
        own = {k: v for k, v in s.items() if k not in _COMBINED}
        ways = [([own], seen)]
        for part in s.get("allOf") or []:
            ways = self._product(ways, self._conjunctions(part, seen, free, hops + 1))
        if "$ref" in s:
            target, after = self.resolve({"$ref": s["$ref"]}, seen, free)
            ways = self._product(ways, self._conjunctions(target, after, free, hops + 1))
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches: list[tuple[list[Any], tuple[str, ...]]] = []
                for branch in s[key]:
                    branches += self._conjunctions(branch, seen, free, hops + 1)
                ways = self._product(ways, branches)
        return ways

    @staticmethod
    def _product(
        ways: list[tuple[list[Any], tuple[str, ...]]], more: list[tuple[list[Any], tuple[str, ...]]]
    ) -> list[tuple[list[Any], tuple[str, ...]]]:
        out = [([*a, *b], tuple(dict.fromkeys((*x, *y)))) for a, x in ways for b, y in more]
        if len(out) > _WAYS:
            raise _Unbounded("too many ways")
        return out

    @staticmethod
    def settled(merged: Any) -> Any:
        """A merge's keywords that two parts gave differently, met where their meeting is
        one keyword: the types both allow, the values both list, the larger of two lower
        bounds and the smaller of two upper ones; ``False`` where nothing is left."""
        if not isinstance(merged, dict) or "allOf" not in merged:
            return merged
        out = {k: v for k, v in merged.items() if k != "allOf"}
        rest = []
        listed = [[out.pop("const")]] if "const" in out else []
        if "enum" in out:
            listed.append(list(out.pop("enum")))
        for part in merged["allOf"]:
            ((key, value),) = part.items()
            numbers = isinstance(value, (int, float)) and not isinstance(value, bool)
            if key == "type":
                out["type"] = _types_met(out["type"], value)
                if not out["type"]:
                    return False
            elif key in ("enum", "const"):
                listed.append([value] if key == "const" else list(value))
            elif key in _LOWER and numbers:
                out[key] = max(out[key], value)
            elif key in _UPPER and numbers:
                out[key] = min(out[key], value)
            else:
                rest.append(part)
        if listed:
            common = [v for v in listed[0]
                      if all(any(_same(v, w) for w in other) for other in listed[1:])]  # fmt: skip
            if not common:
                return False
            out["enum"] = common
        if rest:
            out["allOf"] = rest
        return out

    @staticmethod
    def exact(parts: list[Any], merged: dict) -> None:
        """Raise unless ``merged`` admits exactly what every part admits: no keyword two parts
        give differently, and :func:`merged_exactly`."""
        if "allOf" in merged:
            raise _Unbounded("allOf: parts that disagree")
        if not merged_exactly(parts, merged):
            raise _Unbounded("allOf: a merge that admits what a part forbids")

    def typed(
        self, s: dict, kind: str, seen: tuple[str, ...], closing: bool, depth: int | None = None
    ) -> int:
        if kind in ("boolean", "null"):
            return 5
        if kind in ("integer", "number"):
            return self.number_yield(s, kind) + (_NUMBER_SLACK if closing else 0)
        if kind == "string":
            if "format" in s:
                raise _Unbounded("format")
            if "pattern" in s:
                bounds = pattern_bounds(s["pattern"])
                if bounds is None:
                    raise _Unbounded("pattern")
                shortest, farthest = bounds
                # a maxLength never lengthens the shortest completion of a prefix that can
                # still finish (every completion is at least as long); a minLength may ask for
                # that many characters more, each at most _WIDEST bytes
                pad = _WIDEST * int(s.get("minLength", 0))
                # inside: finish the character, then the regex, then the closing quote
                return _CHARACTER + farthest + pad + 1 if closing else shortest + pad + 2
            return int(s.get("minLength", 0)) + (_ESCAPE if closing else 0) + 2
        if kind == "array":
            return self.array(s, seen, closing, depth)
        if kind == "object":
            return self.object(s, seen, closing, depth)
        raise _Unbounded(kind)

    # -- containers and numbers -----------------------------------------------------------------

    # ``count`` items or the keys ``written`` already: only what is still needed is counted (a
    # container's frame, :class:`FrameBounds`); ``depth`` 0: the value not begun

    def array(
        self, s: dict, seen: tuple[str, ...], closing: bool, depth: int | None = None,
        count: int = 0,
    ) -> int:  # fmt: skip
        if s.get("contains") is not None or s.get("uniqueItems"):
            raise _Unbounded("contains/uniqueItems")
        prefix = list(s.get("prefixItems", []))
        items = s.get("items", True)
        need = max(int(s.get("minItems", 0)), 0)
        schemas = prefix + ([items] * max(need - len(prefix), 0))
        body = sum(self.shortest(x, seen) + 1 for x in schemas[count:need]) + 2
        if not closing or depth == 0:
            return body
        inner = [x for x in [*prefix[count:], items] if not self.never(x, seen, depth is not None)]
        within = None if depth is None else depth - 1
        worst = max((self.bound(x, seen, True, within) for x in inner), default=0)
        if not prefix and count < need:  # (the item begun is one the body counts)
            worst = max(worst - self.shortest(items, seen) - 1, 0)
        return body + worst + 1

    def object(
        self, s: dict, seen: tuple[str, ...], closing: bool, depth: int | None = None,
        written: tuple[str, ...] = (),
    ) -> int:  # fmt: skip
        for key in ("propertyNames", "dependentRequired", "dependencies", "dependentSchemas",
                    "minProperties", "unevaluatedProperties"):  # fmt: skip
            if s.get(key):
                raise _Unbounded(key)
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        required = list(s.get("required", []))
        pattern, matched = self.patterned(s, props)
        body = 2
        entries: dict[str, int] = {}  # (what the body counts for each required key)
        for name in required:
            if name in written:
                continue
            value = props[name] if name in props else matched if (
                pattern is not None and re.search(pattern, name)) else extra  # fmt: skip
            entries[name] = self.size(name) + 2 + self.shortest(value, seen)
            body += entries[name]
        if not closing or depth == 0:
            return body
        # per key a member may begin with: what finishes the key (its rest, the quote and
        # ":"), the schema of its value, and what the body counts for it (a required key's
        # member, begun, stands for its entry)
        free = depth is not None
        members = [(self.size(k, True) + 1, v, entries.get(k, 0)) for k, v in props.items()
                   if not self.never(v, seen, free)]  # fmt: skip
        if pattern is not None and not self.never(matched, seen, free):
            far = pattern_bounds(pattern)
            if far is None:
                raise _Unbounded("patternProperties' pattern")
            members.append((_CHARACTER + far[1] + 2, matched, 0))  # (finished to a match)
        if not self.never(extra, seen, free):
            members.append((_ESCAPE + 1, extra, 0))
        if not members:
            return body
        # inside a key then its value's shortest, or inside (or before) a value; then the
        # other required members
        within = None if depth is None else depth - 1
        worst = max(
            max(key + self.shortest(v, seen), self.bound(v, seen, True, within)) - counted
            for key, v, counted in members
        )
        worst = max(worst, 0)
        return body + worst + 2

    @staticmethod
    def patterned(s: dict, props: dict) -> tuple[str | None, Any]:
        """An object's one ``patternProperties`` pattern and its schema (``None``: none); more
        than one, or one a listed key matches (a value under two schemas at once, whose
        intersection may be longer than either), is not bounded."""
        patterns = s.get("patternProperties") or {}
        if not patterns:
            return None, None
        if len(patterns) > 1:
            raise _Unbounded("patternProperties: several patterns")
        ((pattern, matched),) = patterns.items()
        try:
            if any(re.search(pattern, name) for name in props):
                raise _Unbounded("patternProperties: a listed key matches")
        except re.error as error:
            raise _Unbounded("patternProperties: not a Python pattern") from error
        return pattern, matched

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

    def resolve(
        self, s: Any, seen: tuple[str, ...], free: bool = False
    ) -> tuple[Any, tuple[str, ...]]:
        """``s`` with a bare ``$ref`` followed (one beside other keywords: kept, see
        :meth:`ways`); ``free``: a reference may come back (the caller bounds the depth)."""
        for _ in range(_HOPS):
            if not (isinstance(s, dict) and "$ref" in s) or set(s) - _ANNOTATIONS - {"$ref"}:
                return s, seen
            ref = s["$ref"]
            if ref in seen and not free:
                raise _Unbounded("recursive $ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise _Unbounded("external $ref")
            target: Any = self.root
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target[int(part)] if isinstance(target, list) else target[part]
            s, seen = target, seen if free else (*seen, ref)
        raise _Unbounded("$ref chain")

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


_SHORT_ESCAPE = re.compile(r"\\[^u]")  # two-byte escapes in json.dumps' text: \n, \", \\…


def _size(value: Any) -> int:
    """Bytes of ``value``'s compact JSON at most, whichever spelling of its strings the grammar
    takes: ``json.dumps``' ASCII form counts a non-ASCII character as a ``\\uXXXX`` escape (6
    bytes, 12 a surrogate pair; its UTF-8 takes at most 4), and each two-byte escape
    (``\\n``, ``\\"``…) is counted as the six bytes of its ``\\u00XX`` form."""
    text = json.dumps(value, separators=(",", ":"))
    return len(text) + 4 * len(_SHORT_ESCAPE.findall(text))


def _dump(value: Any) -> str:
    """A stand-in as long as any serialisation of ``value`` in bytes can be: compact JSON, and
    six bytes per character where strings are involved (any character may be written as a
    ``\\uXXXX`` escape)."""
    text = json.dumps(value, separators=(",", ":"))
    return text * 6 if isinstance(value, (str, list, dict)) else text


def merged_exactly(parts: list[Any], merged: Any) -> bool:
    """Whether :func:`~.instance._merge`'s one schema for ``parts`` admits no value a part
    forbids through the keywords it reads per part: no name one part lists that another's
    ``additionalProperties`` or ``patternProperties`` speaks for, no items under two parts'
    different ``prefixItems``. (Keywords two parts give differently stay in its ``allOf``.)

    Example:
        >>> from hf_fvo.grammar.schema.closing import merged_exactly
        >>> from hf_fvo.grammar.schema.instance import _merge
        >>> closed = {"properties": {"a": {}}, "additionalProperties": False}
        >>> parts = [closed, {"required": ["a"]}]
        >>> merged_exactly(parts, _merge(parts))
        True
        >>> parts = [closed, {"properties": {"b": {}}}]
        >>> merged_exactly(parts, _merge(parts))
        False
    """
    if not isinstance(merged, dict):
        return True
    names = set(merged.get("properties") or {})
    for part in parts:
        if not isinstance(part, dict):
            continue
        extra = part.get("additionalProperties", True)
        closed = not (extra is True or (isinstance(extra, dict)
                                        and not set(extra) - _ANNOTATIONS))  # fmt: skip
        if closed and not names <= set(part.get("properties") or {}):
            return False
        if part.get("patternProperties") and merged.get("patternProperties") != part.get(
                "patternProperties"):  # fmt: skip
            return False
    arrays = [part for part in parts if isinstance(part, dict)
              and ("items" in part or "prefixItems" in part)]  # fmt: skip
    return len({json.dumps(part.get("prefixItems", []), sort_keys=True) for part in arrays}) < 2


def _types_met(one: Any, other: Any) -> list[str]:
    """The JSON types both ``type`` keywords allow (an integer is a number)."""

    def allowed(types: Any) -> set[str]:
        types = {types} if isinstance(types, str) else set(types)
        return types | {"integer"} if "number" in types else types

    return sorted(allowed(one) & allowed(other))


def _same(one: Any, other: Any) -> bool:
    """JSON equality (``1`` and ``true`` differ; ``1`` and ``1.0`` do not)."""
    if isinstance(one, bool) or isinstance(other, bool):
        return one is other
    if isinstance(one, (int, float)) and isinstance(other, (int, float)):
        return one == other
    return json.dumps(one, sort_keys=True) == json.dumps(other, sort_keys=True)
