"""How short a member of a JSON schema's language can be: a lower bound in bytes, from the schema.

A budget refuses a request when no member fits it. The pushdown grammar proves a member fits by
finding one (a search over parser states); proving that none does needs a bound from below, and
searching for one that cannot exist costs the search's whole limit. :func:`shortest_bound` gives
that bound without an engine: a member's compact JSON text is at least this many bytes, and no
member exists at all when it is infinite (a required ``$ref`` cycle that never closes, a required
part that admits nothing).

The bound ignores every keyword it does not read, which only enlarges the language and so only
lowers its shortest member: it stays a lower bound for any schema. ``$ref`` cycles are solved as
shortest derivations (iterated from infinity until nothing changes). Pure: no engine import.
"""

from __future__ import annotations

import math
from typing import Any

from hf_fvo.grammar.schema.facts import definitions_of, ref_target

__all__ = ["pattern_width", "relaxed", "shortest_bound"]

_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_RELAXED = ("pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def shortest_bound(schema: Any) -> float:
    """Bytes of the shortest member of a prepared schema's language (compact JSON), at least;
    ``math.inf`` when the schema admits no finite text. A ``$ref`` outside the prepared
    schema's ``$defs`` counts as any value.

    Example:
        >>> from hf_fvo.grammar.schema import prepare_json_schema
        >>> from hf_fvo.grammar.schema.shortest import shortest_bound
        >>> shortest_bound({"type": "object", "properties": {"ok": {"type": "boolean"}},
        ...                 "required": ["ok"]})  # {"ok":true}
        11
        >>> shortest_bound({"type": "string", "pattern": "(.{10}){100}"})
        1002
        >>> cycle = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
        >>> shortest_bound(prepare_json_schema(cycle).schema)
        inf
    """
    return _Shortest(schema).solve()


def relaxed(schema: Any) -> Any:
    """A schema whose language contains the given one's, without what the automaton lowering
    (:mod:`.regex`) refuses of strings and numbers: a ``pattern`` becomes the ``minLength`` of
    its shortest match (:func:`pattern_width`), number bounds and ``multipleOf`` go. The fewest
    tokens of its members is a lower bound on the given schema's.

    Example:
        >>> from hf_fvo.grammar.schema.shortest import relaxed
        >>> relaxed({"type": "string", "pattern": "^Z[0-9]{6}$", "minLength": 2})
        {'type': 'string', 'minLength': 7}
        >>> relaxed({"type": "integer", "minimum": 5})
        {'type': 'integer'}
    """
    if isinstance(schema, list):
        return [relaxed(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in _RELAXED:
            continue
        if key in _MAPS and isinstance(value, dict):  # names, not keywords, as keys
            out[key] = {name: relaxed(sub) for name, sub in value.items()}
        else:
            out[key] = value if key in ("enum", "const") else relaxed(value)
    if isinstance(schema.get("pattern"), str):
        width = max(pattern_width(schema["pattern"]), _int(schema.get("minLength")))
        if width:
            out["minLength"] = width
    return out


def pattern_width(pattern: str) -> int:
    """Characters in the shortest string a regex matches, at least (0 where Python's regex
    parser reads it otherwise than JSON Schema's ECMA-262 dialect would, or not at all).

    Example:
        >>> from hf_fvo.grammar.schema.shortest import pattern_width
        >>> pattern_width("^[a-z]{3,}@x$"), pattern_width("(?<name>a)")
        (5, 0)
    """
    import re._parser as parser  # the standard library's own reading of a pattern
    import warnings

    try:
        with warnings.catch_warnings():  # "possible nested set" ([[:alpha:]], &&, --): a
            warnings.simplefilter("error", FutureWarning)  # class Python reads otherwise
            low = parser.parse(pattern).getwidth()[0]
    except Exception:  # an ECMA-only construct (named groups, \\u{…}, [^]…): no bound
        return 0
    return int(low)


class _Shortest:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.defs = definitions_of(root)  # a prepared schema's $refs all point here
        self.table: dict[str, float] = {}  # per $ref: its bound so far (from infinity down)
        self.changed = False

    def solve(self) -> float:
        rounds = 0
        while True:
            self.changed = False
            value = self.value(self.root)
            for ref in list(self.table):
                new = self.value(ref_target({"$ref": ref}, self.defs))
                if new < self.table[ref]:
                    self.table[ref], self.changed = new, True
            rounds += 1
            if not self.changed:
                return value
            if rounds > 2 * len(self.table) + 4:  # a shortest derivation nests each $ref once
                return 0

    # -- one schema: the shortest of its types, at least ----------------------------------------

    def value(self, s: Any) -> float:
        if s is False:
            return math.inf
        if not isinstance(s, dict):
            return 1  # true: any value, 0
        best = self.own(s)
        ref = s.get("$ref")
        if isinstance(ref, str):  # beside its siblings: a member satisfies both
            if ref not in self.table:
                self.table[ref], self.changed = math.inf, True
            best = max(best, self.table[ref])
        for part in s.get("allOf") or ():
            best = max(best, self.value(part))
        for key in ("anyOf", "oneOf"):
            if s.get(key):
                best = max(best, min(self.value(b) for b in s[key]))
        return best

    def own(self, s: dict) -> float:
        if "const" in s:
            return _literal(s["const"])
        if isinstance(s.get("enum"), list):
            return min((_literal(v) for v in s["enum"]), default=math.inf)
        types = s.get("type")
        if types is None:
            return 1
        types = [types] if isinstance(types, str) else list(types)
        return min((self.typed(s, t) for t in types), default=math.inf)

    def typed(self, s: dict, kind: str) -> float:
        if kind in ("boolean", "null"):
            return 4  # true, null
        if kind in ("integer", "number"):
            return 1
        if kind == "string":
            width = pattern_width(s["pattern"]) if isinstance(s.get("pattern"), str) else 0
            return 2 + max(width, _int(s.get("minLength")))
        if kind == "array":
            return self.array(s)
        if kind == "object":
            return self.object(s)
        return 1  # an unknown type name: no bound

    def array(self, s: dict) -> float:
        need = _int(s.get("minItems"))
        if not need:
            return 2
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        items = s.get("items", True)
        if isinstance(items, list):  # draft 4–2019 tuple form
            prefix, items = items, s.get("additionalItems", True)
        schemas = [*prefix[:need], *[items] * max(need - len(prefix), 0)]
        return 2 + sum(self.value(x) for x in schemas) + need - 1

    def object(self, s: dict) -> float:
        required = s.get("required") if isinstance(s.get("required"), list) else []
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        names = [n for n in dict.fromkeys(required) if isinstance(n, str)]
        if not names:
            return 2
        # a name not among the properties may be matched by patternProperties: any value
        body = sum(len(n) + 3 + (self.value(props[n]) if n in props else 1) for n in names)
        return 2 + body + len(names) - 1


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _literal(value: Any) -> float:
    """Bytes of the shortest JSON text of ``value``, at least (numbers: one digit)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, bool) or value is None:
        return 4
    if isinstance(value, (int, float)):
        return 1
    if isinstance(value, list):
        return 2 + sum(_literal(v) for v in value) + max(len(value) - 1, 0)
    if isinstance(value, dict):
        return 2 + sum(len(k) + 3 + _literal(v) for k, v in value.items()) + max(len(value) - 1, 0)
    return 1
