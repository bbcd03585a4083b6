"""A short member of a JSON schema's language, built from the schema: an upper bound for budgets.

A budget is feasible when some member fits it. The pushdown backend proves that by finding a
completion with a search over parser states, which can fail (patterns, formats, required keys
nested deep) and then proves nothing. For JSON schemas the shortest member is constructive:
:func:`shortest_member` builds one bottom-up, in compact JSON and the schema's key order —

- a string: the shortest text of each ``pattern`` (read off the regex's parse tree: a repeat
  taken its fewest times, the shortest branch, a class's plainest character), padded to
  ``minLength``; formats arrive here as patterns (:mod:`.prepare`);
- a number: 0, or the bound nearest to it that ``minimum``/``maximum``/``multipleOf`` leave;
- an object: its required keys (properties' order first), then optional ones up to
  ``minProperties``, each with its shortest value; an array: ``minItems`` items, the
  ``contains`` ones first, distinct ones under ``uniqueItems``;
- ``enum``/``const``: the shortest listed value; ``anyOf``/``oneOf``: each branch with its
  siblings, the shortest that holds; ``allOf``: its parts merged;

and keeps only candidates that ``jsonschema`` validates against the node. It is a heuristic
for the *shortest* member but never a wrong *member*: the result is validated against the whole
schema, and the grammar walks its tokens before trusting it (``None`` where nothing was built).
Pure: no engine import.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from hf_fvo.grammar.schema.facts import definitions_of, ref_target, string_patterns
from hf_fvo.grammar.schema.patterns import python_tree

__all__ = ["pattern_texts", "shortest_member", "shortest_pattern_text"]

_WIDTH = 4  # candidates kept per node (distinct items and anyOf branches need a few)
_WORK = 10_000  # node visits per schema at most: a pathological schema gives up, never hangs
_PLAIN = "a1b0A2 cB-_."  # characters tried first: one byte in UTF-8 and in JSON
_MERGED = "\x00merged"  # marks a node _merge built (its allOf holds only leftovers)


def shortest_member(schema: Any) -> str | None:
    """A member of a prepared schema's language as compact JSON text (keys in the schema's
    order), as short as the construction finds; ``None`` where it finds none.

    Example:
        >>> from hf_fvo.grammar.schema.instance import shortest_member
        >>> shortest_member({"type": "object", "properties": {"name": {"type": "string"},
        ...                  "n": {"type": "integer", "minimum": 5}}, "required": ["name", "n"]})
        '{"name":"","n":5}'
        >>> shortest_member({"type": "string", "pattern": "^Z\\\\d{6}$"})
        '"Z111111"'
        >>> shortest_member({"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2,
        ...                  "uniqueItems": True})
        '[1,2]'
        >>> shortest_member({"not": {}}) is None
        True
    """
    try:
        found = _Members(schema).of(schema)
    except (_GiveUp, RecursionError):
        return None
    if not found:
        return None
    return json.dumps(found[0], ensure_ascii=False, separators=(",", ":"))


def shortest_pattern_text(pattern: str) -> str | None:
    """The shortest text the regex's parse tree spells (fewest repeats, shortest branches,
    plain characters), checked to match ``pattern`` as JSON Schema reads it (ECMA-262,
    unanchored); ``None`` where it does not or the pattern is not read.

    Example:
        >>> from hf_fvo.grammar.schema.instance import shortest_pattern_text
        >>> shortest_pattern_text("^(\\\\([0-9]{3}\\\\))?[0-9]{3}-[0-9]{4}$")
        '111-1111'
        >>> shortest_pattern_text("^mailto:[^@]+@x")
        'mailto:a@x'
    """
    return _pattern_text(pattern)


class _GiveUp(Exception):
    pass


def pattern_texts(schema: Any, most: int = 16) -> tuple[str, ...]:
    """The shortest matches of the patterns a JSON schema names (``pattern``, and the keys of
    ``patternProperties``), as JSON string content (escaped), shortest first, at most
    ``most``: what a completion search writes where a string's content must match one.

    Example:
        >>> from hf_fvo.grammar.schema.instance import pattern_texts
        >>> pattern_texts({"properties": {"d": {"type": "string", "pattern": r"\\d{2}-\\d{2}"}},
        ...                "patternProperties": {"^x-": {}}})
        ('x-', '11-11')
    """
    found: dict[str, None] = {}
    seen: set[int] = set()

    def visit(node: Any, depth: int) -> None:
        if depth > 64 or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, list):
            for item in node:
                visit(item, depth + 1)
            return
        if not isinstance(node, dict):
            return
        patterns = list(node.get("patternProperties") or {}) if isinstance(
            node.get("patternProperties"), dict) else []  # fmt: skip
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        for pattern in patterns:
            text = _pattern_text(pattern)
            if text:
                found[json.dumps(text)[1:-1]] = None
        for value in node.values():
            visit(value, depth + 1)

    visit(schema, 0)
    return tuple(sorted(found, key=len)[:most])


@functools.lru_cache(maxsize=4096)
def _pattern_text(pattern: str) -> str | None:
    import re._constants as c

    from hf_fvo.grammar.schema.check import _search

    tree = python_tree(pattern, strict=False)  # the text is checked against ECMA below
    if tree is None:
        return None
    groups: dict[int, str] = {}

    def char_of(items: list[Any]) -> str | None:
        negate = bool(items) and items[0][0] is c.NEGATE
        if negate:
            items = items[1:]

        def hits(ch: str) -> bool:
            o = ord(ch)
            for op, av in items:
                if op is c.LITERAL and av == o:
                    return True
                if op is c.RANGE and av[0] <= o <= av[1]:
                    return True
                if op is c.CATEGORY and _in_category(av, ch, c):
                    return True
            return False

        for ch in _PLAIN:
            if hits(ch) != negate:
                return ch
        if negate:
            return next((chr(o) for o in range(32, 0x3000) if not hits(chr(o))), None)
        for op, av in items:
            if op is c.LITERAL:
                return chr(av)
            if op is c.RANGE:
                return chr(av[0])
        return None

    def spell(seq: Any) -> str:
        out = []
        for op, av in seq:
            if op is c.LITERAL:
                out.append(chr(av))
            elif op is c.NOT_LITERAL:
                out.append("a" if av != ord("a") else "b")
            elif op is c.ANY:
                out.append("a")
            elif op is c.IN:
                ch = char_of(list(av))
                if ch is None:
                    raise _GiveUp
                out.append(ch)
            elif op is c.CATEGORY:
                ch = char_of([(c.CATEGORY, av)])
                if ch is None:
                    raise _GiveUp
                out.append(ch)
            elif op is c.BRANCH:
                out.append(min((spell(b) for b in av[1]), key=len))
            elif op is c.SUBPATTERN:
                text = spell(av[-1])
                if av[0] is not None:
                    groups[av[0]] = text
                out.append(text)
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                out.append(spell(av[2]) * av[0] if av[0] else "")
            elif op is c.ATOMIC_GROUP:
                out.append(spell(av))
            elif op is c.GROUPREF:
                out.append(groups.get(av, ""))
            elif op in (c.AT, c.ASSERT, c.ASSERT_NOT):
                continue  # anchors and look-arounds spell nothing: the check below decides
            else:
                raise _GiveUp
        return "".join(out)

    try:
        text = spell(tree)
        return text if _search(pattern, text) else None
    except (_GiveUp, ValueError, RecursionError):
        return None


def _in_category(name: Any, ch: str, c: Any) -> bool:
    word = ch.isalnum() or ch == "_"
    table = {
        c.CATEGORY_DIGIT: ch.isdigit(),
        c.CATEGORY_NOT_DIGIT: not ch.isdigit(),
        c.CATEGORY_SPACE: ch.isspace(),
        c.CATEGORY_NOT_SPACE: not ch.isspace(),
        c.CATEGORY_WORD: word,
        c.CATEGORY_NOT_WORD: not word,
    }
    return table.get(name, False)


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _size(value: Any) -> int:
    return len(_text(value).encode())


class _Members:
    """Candidates per schema node, shortest first, each validated against its node."""

    def __init__(self, root: Any) -> None:
        self.defs = definitions_of(root)
        self.work = _WORK
        self.open: set[str] = set()  # $refs being built (a cycle through one gives nothing)
        self.memo: dict[str, list[Any]] = {}
        self.cuts = 0  # cycles cut so far: a $ref built across a cut is not memoised
        self.validators: dict[int, tuple[Any, Any]] = {}

    def valid(self, value: Any, node: Any) -> bool:
        from jsonschema import Draft202012Validator

        key = id(node)
        if key not in self.validators:  # the node is kept alive beside it: ids stay unique
            self.validators[key] = (node, Draft202012Validator({"$defs": self.defs,
                                                                "allOf": [node]}))  # fmt: skip
        try:
            return bool(self.validators[key][1].is_valid(value))
        except Exception:  # a schema jsonschema cannot read: no candidate is trusted
            return False

    def of(self, node: Any) -> list[Any]:
        self.work -= 1
        if self.work < 0:
            raise _GiveUp
        if node is True or node == {}:
            return [0, ""]
        if not isinstance(node, dict):
            return []
        found = {_text(v): v for v in self.built(node) if self.valid(v, node)}
        # distinct as JSON texts (Python's == takes 1 for true), shortest first
        return [found[t] for t in sorted(found, key=lambda t: len(t.encode()))][:_WIDTH]

    def built(self, node: dict[str, Any]) -> list[Any]:
        """Candidates that may hold (the caller validates them)."""
        if "$ref" in node:
            ref = node["$ref"]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if not rest:
                return self.ref(ref)
            if ref in self.open:
                self.cuts += 1
                return []
            self.open.add(ref)  # the target merged with its siblings, one level
            try:
                merged = _merge([ref_target(node, self.defs), rest])
                return self.built(merged) if isinstance(merged, dict) else []
            finally:
                self.open.discard(ref)
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                rest = {k: v for k, v in node.items() if k != key}
                out = []
                for branch in node[key]:
                    out += self.of(_merge([rest, branch]) if rest else branch)
                return out
        if isinstance(node.get("allOf"), list) and _MERGED not in node:
            merged = _merge([{k: v for k, v in node.items() if k != "allOf"}, *node["allOf"]])
            return self.built(merged) if isinstance(merged, dict) else []
        if "const" in node:
            return [node["const"]]
        if isinstance(node.get("enum"), list):
            return sorted(node["enum"], key=_size)[: 4 * _WIDTH]
        types = node.get("type")
        if types is None:
            types = _implied_types(node)
        types = [types] if isinstance(types, str) else list(types)
        out = []
        for kind in types:
            out += self.typed(node, kind)
        return out

    def ref(self, ref: str) -> list[Any]:
        if ref in self.memo:
            return self.memo[ref]
        if ref in self.open:
            self.cuts += 1
            return []
        self.open.add(ref)
        cuts = self.cuts
        try:
            found = self.of(ref_target({"$ref": ref}, self.defs))
        finally:
            self.open.discard(ref)
        if self.cuts == cuts:
            self.memo[ref] = found
        return found

    def typed(self, node: dict[str, Any], kind: str) -> list[Any]:
        if kind == "null":
            return [None]
        if kind == "boolean":
            return [True, False]
        if kind in ("integer", "number"):
            return _numbers(node, kind == "integer")
        if kind == "string":
            return self.strings(node)
        if kind == "array":
            return self.array(node)
        if kind == "object":
            return self.object(node)
        return []

    def strings(self, node: dict[str, Any]) -> list[str]:
        low = _count(node.get("minLength"))
        patterns = string_patterns(node, self.defs)
        seeds = [""] + [t for t in map(_pattern_text, patterns) if t is not None]
        out = []
        for seed in seeds:
            if len(seed) >= low:
                out.append(seed)
            else:
                pad = low - len(seed)
                out += [seed + "a" * pad, "a" * pad + seed, seed + "0" * pad]
        return out

    def array(self, node: dict[str, Any]) -> list[Any]:
        need = _count(node.get("minItems"))
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = node.get("items", True)
        contains = node.get("contains")
        if contains is not None:
            need = max(need, _count(node.get("minContains"), 1))
        if need == 0:
            return [[]]
        out = []
        for start in range(_WIDTH if node.get("uniqueItems") else 1):
            row = []
            for i in range(need):
                part = prefix[i] if i < len(prefix) else items
                if contains is not None and i < _count(node.get("minContains"), 1):
                    part = _merge([part, contains]) if isinstance(part, dict) else contains
                choices = self.of(part)
                if not choices:
                    return out
                row.append(choices[(i + start) % len(choices)] if node.get("uniqueItems")
                           else choices[0])  # fmt: skip
            out.append(row)
        return out

    def object(self, node: dict[str, Any]) -> list[Any]:
        props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
        required = [n for n in node.get("required", []) if isinstance(n, str)]
        names = [n for n in props if n in required] + [n for n in required if n not in props]
        names = list(dict.fromkeys(names))
        want = _count(node.get("minProperties"))
        for n in props:
            if len(names) >= want:
                break
            if n not in names:
                names.append(n)
        extra = iter("abcdefghijklmnopqrstuvwxyz")
        while len(names) < want:
            name = next(extra, None)
            if name is None:
                raise _GiveUp
            if name not in names:
                names.append(name)
        value: dict[str, Any] = {}
        for name in names:
            choices = self.of(self.property(node, props, name))
            if not choices:
                return []
            value[name] = choices[0]
        listed = [n for n in props if n in value]
        return [{n: value[n] for n in [*listed, *(n for n in value if n not in props)]}]

    def property(self, node: dict[str, Any], props: dict[str, Any], name: str) -> Any:
        if name in props:
            return props[name]
        matched = [s for p, s in (node.get("patternProperties") or {}).items()
                   if _safe_search(p, name)]  # fmt: skip
        if matched:
            return matched[0] if len(matched) == 1 else {"allOf": matched}
        extra = node.get("additionalProperties", True)
        return {} if extra is True else extra


def _safe_search(pattern: str, text: str) -> bool:
    from hf_fvo.grammar.schema.check import _search

    try:
        return _search(pattern, text)
    except ValueError:
        return False


def _implied_types(node: dict[str, Any]) -> list[str]:
    kinds = []
    if any(k in node for k in ("properties", "required", "minProperties", "patternProperties",
                               "additionalProperties")):  # fmt: skip
        kinds.append("object")
    if any(k in node for k in ("items", "prefixItems", "minItems", "contains")):
        kinds.append("array")
    if any(k in node for k in ("pattern", "minLength", "maxLength")):
        kinds.append("string")
    return [*kinds, "integer", "string", "null", "boolean", "array", "object"]


def _numbers(node: dict[str, Any], integral: bool) -> list[Any]:
    """0 and the values nearest 0 that the bounds and ``multipleOf`` leave (a few each side)."""
    step = node.get("multipleOf")
    step = step if isinstance(step, (int, float)) and step > 0 else None
    out: list[Any] = [0]
    for key, sign in (("minimum", 1), ("exclusiveMinimum", 1), ("maximum", -1),
                      ("exclusiveMaximum", -1)):  # fmt: skip
        bound = node.get(key)
        if not isinstance(bound, (int, float)) or isinstance(bound, bool):
            continue
        if not math.isfinite(bound):
            continue
        grain = step if step is not None else 1
        if step is None and not integral and not key.startswith("exclusive"):
            out.append(bound)
        k = math.ceil(bound / grain) if sign > 0 else math.floor(bound / grain)
        for j in range(3):
            v = (k + sign * j) * grain
            out.append(int(v) if float(v).is_integer() and abs(v) < 2**53 else v)
    if integral:
        out = [v for v in out if float(v).is_integer()]
    return out


def _count(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return int(value)


def _merge(parts: list[Any]) -> Any:
    """One schema for building what every part admits: the parts' keywords side by side, the
    union of ``required``, each property's schemas joined, nested ``allOf`` flattened; a keyword
    two parts give differently stays in an ``allOf`` of one-keyword schemas, which building
    reads (a second ``pattern``) and validation against the original node enforces."""
    out: dict[str, Any] = {_MERGED: True}
    rest: list[Any] = []
    todo = list(parts)
    while todo:
        part = todo.pop(0)
        if part is False:
            return False
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == _MERGED:
                continue
            if key == "properties" and isinstance(value, dict):
                mine = out.setdefault("properties", {})
                for name, sub in value.items():
                    mine[name] = sub if name not in mine else {"allOf": [mine[name], sub]}
            elif key == "required" and isinstance(value, list):
                out["required"] = list(dict.fromkeys([*out.get("required", []), *value]))
            elif key == "allOf" and isinstance(value, list):
                todo += value
            elif key not in out:
                out[key] = value
            elif out[key] != value:
                rest.append({key: value})
    if rest:
        out["allOf"] = rest
    return out
