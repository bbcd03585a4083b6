"""Boolean structure of JSON Schema, rewritten exactly into what a grammar engine enforces.

Grammar engines build unions (``anyOf``) and, for the keywords they merge, intersections
(``allOf``); they cannot complement a language. JSON Schema's ``not``, ``if``/``else``,
``dependencies`` and exclusive ``oneOf`` need a complement. :func:`negate` computes one wherever
the complement is itself a union of such schemas — exactly, never approximately:

- ``¬{required: [a, b]}`` = objects without ``a`` ∪ objects without ``b`` (non-objects satisfy
  ``required``);
- ``¬{type: T}`` = the other types; ``¬{enum: V}`` = values outside V (strings by an anchored
  pattern, numbers by open intervals); ``¬{minimum: x}`` = numbers below x, and so on;
- ``¬{properties: {p: S}}`` = objects holding ``p`` with a value in ``¬S``;
- ``¬anyOf`` = ``allOf`` of negations; ``¬allOf`` = ``anyOf`` of negations.

Where no such union exists (``¬{pattern}``, ``¬{items: S}``, ``¬{multipleOf}`` …) it returns
``None`` and the caller refuses the schema, naming the keyword. :func:`disjoint` is a sound (never
wrong, sometimes silent) test that two schemas share no instance, so that ``oneOf`` branches that
cannot overlap need no negation at all.

:func:`apply_strict` implements the strict-object convention (Outlines, XGrammar) by adding
``additionalProperties: false`` to each object alternative, keeping the names its conjunctive
parts declare.

Example:
    >>> from hf_fvo.grammar.schema_logic import negate
    >>> negate({"required": ["a"]}, {})
    [{'type': 'object', 'properties': {'a': False}}]
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from typing import Any

from hf_fvo.errors import UnsupportedSchemaError

__all__ = ["apply_strict", "disjoint", "negate", "rewrite_logic"]

_ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_MAX_ALTERNATIVES = 512
_MAX_UNIQUE_SEQUENCES = 4096
_MAX_COMBINATIONS = 64
# patterns every key matches (unanchored search; "^.*$" is not one: "." stops at a newline)
_UNIVERSAL = {"", ".*", "^.*", ".*$", "(.*)"}


def _defs(root: Any) -> dict[str, Any]:
    return root.get("$defs", {}) if isinstance(root, dict) else {}


def _resolve(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """Follow ``$ref`` chains (all refs point into ``$defs`` after cleaning)."""
    while isinstance(node, dict) and "$ref" in node and len(node) == 1 and depth < 64:
        node = defs.get(node["$ref"].rsplit("/", 1)[-1], True)
        depth += 1
    return node


def _ref_target(node: dict[str, Any], defs: dict[str, Any]) -> Any:
    return defs.get(node["$ref"].rsplit("/", 1)[-1], True)


def _any_of(parts: list[Any]) -> Any:
    if not parts:
        return False
    if len(parts) == 1:
        return parts[0]
    return {"anyOf": parts}


def _all_of(parts: list[Any]) -> Any:
    parts = list({_json_key(p): p for p in parts if p is not True and p != {}}.values())
    if any(p is False for p in parts):
        return False
    if not parts:
        return True
    if len(parts) == 1:
        return parts[0]
    return {"allOf": parts}


# -- types -----------------------------------------------------------------------------------


def _types_of(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> set[str]:
    """JSON types an instance of ``node`` can have ("integer" counts as "number")."""
    if node is True:
        return set(_ALL_TYPES)
    if node is False:
        return set()
    out = set(_ALL_TYPES)
    kind = node.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        out &= {"number" if t == "integer" else t for t in names}
    for key in ("const", "enum"):
        if key in node:
            values = [node["const"]] if key == "const" else node["enum"]
            out &= {_json_type(v) for v in values}
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            out &= _types_of(defs.get(name, True), defs, seen | {name})
    for sub in node.get("allOf", []):
        out &= _types_of(sub, defs, seen)
    for key in ("anyOf", "oneOf"):
        if key in node:
            union: set[str] = set()
            for sub in node[key]:
                union |= _types_of(sub, defs, seen)
            out &= union
    return out


def _declared_types(node: Any, defs: dict[str, Any]) -> set[str]:
    """Types an instance of ``node`` can have, keeping "integer" apart from "number"."""
    node = _resolve(node, defs)
    if node is True or not isinstance(node, dict):
        return set() if node is False else {*_ALL_TYPES, "integer"}
    out = {*_ALL_TYPES, "integer"}
    kind = node.get("type")
    if kind is not None:
        out &= _widen({kind} if isinstance(kind, str) else set(kind))
    for key in ("const", "enum"):
        if key in node:
            values = [node["const"]] if key == "const" else node["enum"]
            out &= {_value_type(v) for v in values}
    for sub in node.get("allOf", []):
        out &= _declared_types(sub, defs)
    return out


def _widen(names: set[str]) -> set[str]:
    """Type names with "number" standing for itself and "integer"."""
    return names | {"integer"} if "number" in names else set(names)


def _value_type(value: Any) -> str:
    kind = _json_type(value)
    if kind == "number" and float(value).is_integer():
        return "integer"
    return kind


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _except(types: set[str]) -> dict[str, Any] | None:
    rest = [t for t in _ALL_TYPES if t not in types]
    if not rest:
        return None
    return {"type": rest[0] if len(rest) == 1 else rest}


# -- negation --------------------------------------------------------------------------------


def _literals_complement(words: list[str]) -> str:
    """An anchored regex matching every string except ``words`` (via their trie)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def esc(ch: str) -> str:
        return re.escape(ch) if ch not in "\n\t" else {"\n": "\\n", "\t": "\\t"}[ch]

    def cls(chars: list[str]) -> str:
        return "".join("\\" + c if c in "\\]^-[" else esc(c) for c in chars)

    def build(node: dict[str, Any]) -> str:
        kids = [c for c in node if c]
        branches = [] if "" in node else [""]  # ending here is outside the set
        branches.append(f"[^{cls(kids)}][\\s\\S]*" if kids else "[\\s\\S]+")
        branches.extend(esc(c) + build(node[c]) for c in kids)
        return "(?:" + "|".join(branches) + ")"

    return "^" + build(trie) + "$"


def _numbers_complement(values: list[float]) -> list[dict[str, Any]]:
    """Numbers different from every value: the open intervals between them."""
    points = sorted(set(values))
    parts: list[dict[str, Any]] = [{"type": "number", "exclusiveMaximum": points[0]}]
    for lo, hi in itertools.pairwise(points):
        parts.append({"type": "number", "exclusiveMinimum": lo, "exclusiveMaximum": hi})
    parts.append({"type": "number", "exclusiveMinimum": points[-1]})
    return parts


def _negate_values(values: list[Any]) -> list[Any]:
    """Schemas whose union holds exactly the JSON values different from every one of
    ``values`` (any JSON values: objects and arrays are compared key by key, item by item)."""
    by_type: dict[str, list[Any]] = {}
    for v in values:
        by_type.setdefault(_json_type(v), []).append(v)
    out: list[Any] = []
    rest = _except(set(by_type))
    if rest:
        out.append(rest)
    if "boolean" in by_type:
        missing = [b for b in (True, False) if b not in by_type["boolean"]]
        out.extend({"const": b} for b in missing)
    if "string" in by_type:
        pattern = _literals_complement(sorted(set(by_type["string"])))
        out.append({"type": "string", "pattern": pattern})
    if "number" in by_type:
        out.extend(_numbers_complement(by_type["number"]))
    for kind in ("object", "array"):
        distinct = {_json_key(v): v for v in by_type.get(kind, [])}.values()
        whole = _all_of([_any_of(_differs_from(v)) for v in distinct])
        if distinct and whole is not False:
            out.append(whole)
    return out


def _differs_from(value: dict[str, Any] | list[Any]) -> list[Any]:
    """Objects (arrays) different from ``value``: a key missing, a key's value different, or a
    key more (a length different, or an item different)."""
    if isinstance(value, dict):
        out: list[Any] = [{"type": "object", "properties": {k: False}} for k in value]
        for k, v in value.items():
            out.append({"type": "object", "required": [k],
                        "properties": {k: _any_of(_negate_values([v]))}})  # fmt: skip
        out.append({"type": "object", "minProperties": len(value) + 1})
        return out
    n = len(value)
    out = [{"type": "array", "maxItems": n - 1}] if n else []
    out.append({"type": "array", "minItems": n + 1})
    for i, item in enumerate(value):
        prefix = [True] * i + [_any_of(_negate_values([item]))]
        out.append({"type": "array", "minItems": n, "maxItems": n, "prefixItems": prefix})
    return out


_RANGE_FLIP = {
    "minimum": "exclusiveMaximum",
    "exclusiveMinimum": "maximum",
    "maximum": "exclusiveMinimum",
    "exclusiveMaximum": "minimum",
}


def negate(
    node: Any, defs: dict[str, Any], context: Any = None, depth: int = 0
) -> list[Any] | None:
    """Schemas U with U ∩ C = C ∖ node, where C is ``context`` (everything when ``None``): the
    complement of ``node`` among the instances of ``context``; ``None`` where this module cannot
    state one.

    Without a context U is the exact complement. With one (a sibling ``oneOf`` branch, say), only
    what lies inside C matters, which lets complements of closed objects, of properties C never
    holds and of disjoint items be stated.

    Args:
        node: A cleaned schema (references point into ``defs``).
        defs: The root's ``$defs``.
        context: A schema every instance considered also satisfies.

    Example:
        >>> from hf_fvo.grammar.schema_logic import negate
        >>> negate({"type": "string", "enum": ["a"]}, {})[-1]
        {'type': 'string', 'pattern': '^(?:|[^a][\\\\s\\\\S]*|a(?:[\\\\s\\\\S]+))$'}
    """
    if depth > 32:
        return None
    if node is True:
        return []
    if node is False:
        return [True]
    if context is not None and disjoint(context, node, defs):
        return [True]  # nothing in the context satisfies node
    if context is not None:
        by_kind = _complement_by_kind(node, context, defs)
        if by_kind is not None:
            return by_kind
    out: list[Any] = []
    for key, value in node.items():
        part = _negate_keyword(node, key, value, defs, context, depth)
        if part is None:
            return None
        out.extend(part)
    if context is not None:  # parts of types the context never has add nothing
        kinds = _types_of(context, defs)
        out = [p for p in out if _types_of(p, defs) & kinds]
    return out


def _negate_keyword(
    node: dict[str, Any], key: str, value: Any, defs: dict[str, Any], context: Any, depth: int
) -> list[Any] | None:
    if key == "$defs":
        return []
    if key == "$ref":
        return negate(_ref_target(node, defs), defs, context, depth + 1)
    if key == "type":
        names = {value} if isinstance(value, str) else set(value)
        theirs = _declared_types(context, defs) if context is not None else None
        if theirs is not None and theirs <= _widen(names):
            return []  # every instance of the context has one of these types
        if "integer" in names and "number" not in names:
            if theirs is None or "number" in theirs:
                return None  # the complement holds the non-integral numbers: no schema says so
            rest_types = sorted(theirs - _widen(names))
            return [{"type": rest_types[0] if len(rest_types) == 1 else rest_types}]
        rest = _except({"number" if t == "integer" else t for t in names})
        return [rest] if rest else []
    if key in ("enum", "const"):
        return _negate_values([value] if key == "const" else value)
    if key == "required":  # non-objects satisfy it: only objects lacking a name fail it
        needed = _object_facts(context, defs)[0] if context is not None else set()
        return [{"type": "object", "properties": {n: False}} for n in value if n not in needed]
    if key == "properties":
        return _negate_properties(value, defs, context, depth)
    if key == "additionalProperties":
        return _negate_additional(node, value, defs, context, depth)
    if key in ("dependentRequired", "dependentSchemas"):
        out = []
        for name, dep in value.items():
            if key == "dependentRequired":
                out.extend(
                    {"type": "object", "required": [name], "properties": {d: False}} for d in dep
                )
                continue
            negs = negate(dep, defs, context, depth + 1)
            if negs is None:
                return None
            if negs:
                out.append(_all_of([{"type": "object", "required": [name]}, _any_of(negs)]))
        return out
    if key in _RANGE_FLIP:
        return [{"type": "number", _RANGE_FLIP[key]: value}]
    if key in ("minLength", "minItems"):
        kind, other = ("string", "maxLength") if key == "minLength" else ("array", "maxItems")
        return [] if value == 0 else [{"type": kind, other: value - 1}]
    if key == "minProperties":
        return [] if value == 0 else [{"type": "object", "maxProperties": value - 1}]
    if key == "maxProperties":
        return [{"type": "object", "minProperties": value + 1}]
    if key in ("maxLength", "maxItems"):
        kind, other = ("string", "minLength") if key == "maxLength" else ("array", "minItems")
        return [{"type": kind, other: value + 1}]
    if key == "prefixItems":
        out = []
        for i, sub in enumerate(value):
            negs = negate(sub, defs, None, depth + 1)
            if negs is None:
                return None
            if negs:
                prefix = [True] * i + [_any_of(negs)]
                out.append({"type": "array", "minItems": i + 1, "prefixItems": prefix})
        return out
    if key == "items":
        return _negate_items(node, value, defs, context, depth)
    if key == "allOf":
        out = []
        for sub in value:
            negs = negate(sub, defs, context, depth + 1)
            if negs is None:
                return None
            out.extend(negs)
        return out
    if key == "not":
        return [value]  # ¬¬S = S
    if key in ("oneOf", "anyOf"):
        complements = []  # ¬S_i for each branch
        for sub in value:
            negs = negate(sub, defs, context, depth + 1)
            if negs is None:
                return None
            complements.append(_any_of(negs))
        none = _all_of(complements)
        out = [] if none is False else [none]
        if key == "oneOf":  # not exactly one: none of them, or two at once
            for x, y in itertools.combinations(value, 2):
                if not disjoint(x, y, defs):
                    out.append(_all_of([x, y]))
        return out
    return None  # pattern, multipleOf, uniqueItems, propertyNames, …: no complement


def _negate_properties(
    value: dict[str, Any], defs: dict[str, Any], context: Any, depth: int
) -> list[Any] | None:
    """Objects holding some listed property with a value outside its schema."""
    closed = _closed_keys(context, defs) if context is not None else None
    out = []
    for name, sub in value.items():
        if closed is not None and name not in closed:
            continue  # the context never holds this property
        theirs = _property(context, name, defs) if context is not None else None
        if theirs is not None and theirs == sub:
            continue  # the context's own schema for this property
        if theirs is not None and disjoint(theirs, sub, defs):
            out.append({"type": "object", "required": [name]})
            continue
        values = _value_set(theirs, defs) if theirs is not None else None
        if values is not None and all(_satisfies(v, sub, defs) for v in values):
            continue  # every value the context allows here satisfies the schema
        negs = negate(sub, defs, theirs, depth + 1)
        if negs is None:
            return None
        if negs:
            out.append({"type": "object", "required": [name], "properties": {name: _any_of(negs)}})
    return out


def _closed_keys(node: Any, defs: dict[str, Any]) -> set[str] | None:
    """The only keys an object satisfying ``node`` may hold, if ``node`` says so directly."""
    node = _resolve(node, defs)
    if not isinstance(node, dict):
        return None
    values = _value_set(node, defs)
    if values is not None and all(isinstance(v, dict) for v in values):
        return {k for v in values for k in v}  # one of finitely many objects
    if node.get("additionalProperties") is False and not node.get("patternProperties"):
        return {k for k, v in node.get("properties", {}).items() if v is not False}
    for sub in node.get("allOf", []):
        keys = _closed_keys(sub, defs)
        if keys is not None:
            return keys
    return None


def _negate_additional(
    node: dict[str, Any], value: Any, defs: dict[str, Any], context: Any, depth: int
) -> list[Any] | None:
    """Objects holding a key outside ``properties`` whose value fails ``additionalProperties``:
    stated only when ``context`` closes the set of keys (then those keys are finitely many)."""
    if value is True:
        return []
    if node.get("patternProperties"):
        return None
    keys = _closed_keys(context, defs) if context is not None else None
    if keys is None:
        return None
    extra = [k for k in sorted(keys) if k not in node.get("properties", {})]
    if value is False:
        return [{"type": "object", "required": [k]} for k in extra]
    out = []
    for k in extra:
        negs = negate(value, defs, _property(context, k, defs), depth + 1)
        if negs is None:
            return None
        if negs:
            out.append({"type": "object", "required": [k], "properties": {k: _any_of(negs)}})
    return out


def _negate_items(
    node: dict[str, Any], value: Any, defs: dict[str, Any], context: Any, depth: int
) -> list[Any] | None:
    """Arrays with an item (past ``prefixItems``) outside ``items``: stated for ``items: false``
    (arrays longer than the prefix), for items disjoint from the context's items (then any
    non-empty array qualifies) and for items containing the context's (then none does)."""
    start = len(node.get("prefixItems", []))
    if value is True:
        return []
    if value is False:
        return [{"type": "array", "minItems": start + 1}]
    if start == 0 and context is not None:
        ctx = _resolve(context, defs)
        theirs = ctx.get("items") if isinstance(ctx, dict) and not ctx.get("prefixItems") else None
        if theirs is not None and disjoint(theirs, value, defs):
            return [{"type": "array", "minItems": 1}]
        if theirs is not None and negate(value, defs, theirs, depth + 1) == []:
            return []  # the context's items all satisfy these items
    return None


def _complement_by_kind(node: Any, context: Any, defs: dict[str, Any]) -> list[Any] | None:
    """C ∖ node split by JSON type, where for every type of the context C, ``node`` accepts
    all of its values (C ∖ node holds none), none of them, or C and ``node`` are disjoint on it
    (C ∖ node holds all of C's); ``None`` where some type is none of these."""
    outside = []
    for kind in sorted(_types_of(context, defs)):
        verdict = _on_kind(node, kind, defs)
        if verdict == "all":
            continue
        if verdict is None and not _disjoint_on(kind, context, node, defs, 0):
            return None
        outside.append(kind)
    if not outside:
        return []
    return [{"type": outside[0] if len(outside) == 1 else outside}]


# keywords that constrain values of one JSON type only
_KIND_KEYWORDS = {
    "null": (),
    "boolean": (),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
              "contains", "minContains", "maxContains", "unevaluatedItems"),
    "object": ("properties", "required", "additionalProperties", "patternProperties",
               "propertyNames", "minProperties", "maxProperties", "dependencies",
               "dependentRequired", "dependentSchemas", "unevaluatedProperties"),
}  # fmt: skip


def _on_kind(node: Any, kind: str, defs: dict[str, Any], depth: int = 0) -> str | None:
    """Whether ``node`` accepts ``"all"`` or ``"none"`` of the JSON values of type ``kind``
    (``None``: some, or unknown). Sound: never wrong, sometimes ``None``."""
    node = _resolve(node, defs)
    if node is True:
        return "all"
    if node is False:
        return "none"
    if not isinstance(node, dict) or depth > 16:
        return None
    if kind not in _types_of(node, defs):
        return "none"
    if "const" in node or "enum" in node or "if" in node:
        return None
    if kind == "number" and "number" not in _declared_types(node, defs):
        return None  # integers only
    if any(key in node for key in _KIND_KEYWORDS[kind]):
        return None
    parts = list(node.get("allOf", []))
    if "$ref" in node:
        parts.append(_ref_target(node, defs))
    verdicts = [_on_kind(sub, kind, defs, depth + 1) for sub in parts]
    if "not" in node:
        inner = _on_kind(node["not"], kind, defs, depth + 1)
        verdicts.append({"all": "none", "none": "all"}.get(inner) if inner else None)
    if "anyOf" in node:
        alts = [_on_kind(sub, kind, defs, depth + 1) for sub in node["anyOf"]]
        verdicts.append("all" if "all" in alts else "none" if all(v == "none" for v in alts)
                        else None)  # fmt: skip
    if "oneOf" in node:
        alts = [_on_kind(sub, kind, defs, depth + 1) for sub in node["oneOf"]]
        alls, nones = alts.count("all"), alts.count("none")
        if alls >= 2 or nones == len(alts):
            verdicts.append("none")
        elif alls == 1 and alls + nones == len(alts):
            verdicts.append("all")
        else:
            verdicts.append(None)
    if "none" in verdicts:
        return "none"
    return "all" if all(v == "all" for v in verdicts) else None


# -- disjointness ----------------------------------------------------------------------------


def _value_set(node: Any, defs: dict[str, Any]) -> list[Any] | None:
    """The finite set of values ``node`` allows, where its conjunctive parts state one
    (``const``/``enum``; several parts: their intersection)."""
    node = _resolve(node, defs)
    if not isinstance(node, dict):
        return None
    sets: list[list[Any]] = []
    if "const" in node:
        sets.append([node["const"]])
    if "enum" in node:
        sets.append(list(node["enum"]))
    for sub in node.get("allOf", []):
        values = _value_set(sub, defs)
        if values is not None:
            sets.append(values)
    if not sets:
        return None
    keys = set.intersection(*({_json_key(v) for v in values} for values in sets))
    return [v for v in sets[0] if _json_key(v) in keys]


def _json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _object_facts(node: Any, defs: dict[str, Any]) -> tuple[set[str], set[str], set[str] | None]:
    """(required names, forbidden names, closed key set or None) stated by ``node``'s
    conjunctive parts."""
    node = _resolve(node, defs)
    required: set[str] = set()
    forbidden: set[str] = set()
    closed: set[str] | None = None
    if not isinstance(node, dict):
        return required, forbidden, closed
    required |= set(node.get("required", []))
    forbidden |= {k for k, v in node.get("properties", {}).items() if v is False}
    closed = _closed_keys(node, defs)
    for sub in node.get("allOf", []):
        r, f, c = _object_facts(sub, defs)
        required |= r
        forbidden |= f
        if c is not None:
            closed = c if closed is None else closed & c
    return required, forbidden, closed


def _property_count_bounds(node: Any, defs: dict[str, Any], depth: int = 0) -> tuple[float, float]:
    """(fewest, most) properties an object satisfying ``node`` can hold, as far as its
    ``required``, ``minProperties``/``maxProperties``, closed key sets and logic say (sound)."""
    node = _resolve(node, defs)
    if not isinstance(node, dict) or depth > 16:
        return 0, math.inf
    low = max(len(set(node.get("required", []))), node.get("minProperties", 0))
    closed = _closed_keys(node, defs)
    high = min(node.get("maxProperties", math.inf), math.inf if closed is None else len(closed))
    parts = list(node.get("allOf", []))
    if "$ref" in node:
        parts.append(_ref_target(node, defs))
    for sub in parts:
        lo, hi = _property_count_bounds(sub, defs, depth + 1)
        low, high = max(low, lo), min(high, hi)
    for key in ("anyOf", "oneOf"):
        if node.get(key):
            bounds = [_property_count_bounds(sub, defs, depth + 1) for sub in node[key]]
            low = max(low, min(lo for lo, _ in bounds))
            high = min(high, max(hi for _, hi in bounds))
    return low, high


def _property(node: Any, name: str, defs: dict[str, Any]) -> Any:
    """The schema ``node``'s conjunctive parts give property ``name`` (their intersection), or
    ``None`` where none lists it."""
    node = _resolve(node, defs)
    if not isinstance(node, dict):
        return None
    found = []
    if name in node.get("properties", {}):
        found.append(node["properties"][name])
    for sub in node.get("allOf", []):
        part = _property(sub, name, defs)
        if part is not None:
            found.append(part)
    if not found:
        return None
    return found[0] if len(found) == 1 else {"allOf": found}


def disjoint(a: Any, b: Any, defs: dict[str, Any], depth: int = 0) -> bool:
    """True only if no JSON value satisfies both ``a`` and ``b`` (sound, not complete).

    Example:
        >>> from hf_fvo.grammar.schema_logic import disjoint
        >>> disjoint({"type": "string"}, {"type": "null"}, {}), disjoint({}, {"type": "null"}, {})
        (True, False)
    """
    if depth > 16:
        return False
    if a is False or b is False:
        return True
    common = _types_of(a, defs) & _types_of(b, defs)
    return all(_disjoint_on(kind, a, b, defs, depth) for kind in common)


def _disjoint_on(kind: str, a: Any, b: Any, defs: dict[str, Any], depth: int) -> bool:
    """No value of JSON type ``kind`` satisfies both schemas (sound, not complete)."""
    va, vb = _value_set(a, defs), _value_set(b, defs)
    if va is not None:
        return not any(_satisfies(v, b, defs) for v in va if _json_type(v) == kind)
    if vb is not None:
        return not any(_satisfies(v, a, defs) for v in vb if _json_type(v) == kind)
    if kind == "object":
        ra, fa, ca = _object_facts(a, defs)
        rb, fb, cb = _object_facts(b, defs)
        if ra & fb or rb & fa:
            return True
        if (ca is not None and rb - ca) or (cb is not None and ra - cb):
            return True
        for name in ra | rb:
            pa, pb = _property(a, name, defs), _property(b, name, defs)
            if pa is not None and pb is not None and disjoint(pa, pb, defs, depth + 1):
                return True
        low_a, high_a = _property_count_bounds(a, defs)
        low_b, high_b = _property_count_bounds(b, defs)
        return low_a > high_b or low_b > high_a
    if kind == "number":
        la, ha = _bounds(a, defs)
        lb, hb = _bounds(b, defs)
        return _below(ha, lb) or _below(hb, la)
    if kind == "string":
        pa, pb = _patterns(a, defs), _patterns(b, defs)
        if pa and pb:
            from hf_fvo.grammar.pushdown import patterns_intersect

            return not patterns_intersect(tuple(pa + pb))
    return False


def _satisfies(value: Any, node: Any, defs: dict[str, Any]) -> bool:
    """Whether ``value`` is an instance of ``node`` (validated with ``jsonschema``; ``True`` when
    it cannot tell, which keeps :func:`disjoint` sound)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        validator = Draft202012Validator({"$defs": defs, "allOf": [node]})
        return bool(validator.is_valid(value))
    except (SchemaError, re.error, RecursionError, ValueError, TypeError):
        return True


def _patterns(node: Any, defs: dict[str, Any], depth: int = 0) -> list[str]:
    """Patterns every string of ``node`` must match (its conjunctive closure)."""
    node = _resolve(node, defs)
    if not isinstance(node, dict) or depth > 16:
        return []
    out = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    for sub in node.get("allOf", []):
        out += _patterns(sub, defs, depth + 1)
    if "$ref" in node:
        out += _patterns(_ref_target(node, defs), defs, depth + 1)
    return out


def _bounds(node: Any, defs: dict[str, Any]) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """((low, exclusive), (high, exclusive)) that ``node`` states for numbers."""
    low, high = (-float("inf"), False), (float("inf"), False)
    node = _resolve(node, defs)
    if not isinstance(node, dict):
        return low, high
    if "minimum" in node:
        low = max(low, (node["minimum"], False))
    if "exclusiveMinimum" in node:
        low = max(low, (node["exclusiveMinimum"], True))
    if "maximum" in node:
        high = min(high, (node["maximum"], False), key=lambda x: (x[0], not x[1]))
    if "exclusiveMaximum" in node:
        high = min(high, (node["exclusiveMaximum"], True), key=lambda x: (x[0], not x[1]))
    for sub in node.get("allOf", []):
        (sl, sh) = _bounds(sub, defs)
        low = max(low, sl)
        high = min(high, sh, key=lambda x: (x[0], not x[1]))
    return low, high


def _below(high: tuple[float, bool], low: tuple[float, bool]) -> bool:
    """Every number ≤ high lies below every number ≥ low."""
    if high[0] != low[0]:
        return high[0] < low[0]
    return high[1] or low[1]


# -- strict objects --------------------------------------------------------------------------


def _declared(
    node: Any, defs: dict[str, Any], seen: frozenset[str]
) -> tuple[list[str], list[str], bool, bool, bool]:
    """(names, patterns, listed, open, alternatives) over ``node``'s conjunctive closure: the
    names and patterns it declares, whether it lists ``properties``/``patternProperties`` at
    all, whether it already says what extra keys may be (``open``), and whether an
    ``anyOf``/``oneOf`` sits inside a conjunctive member (``alternatives``)."""
    if not isinstance(node, dict):
        return [], [], False, False, False
    names = list(node.get("properties", {}))
    names += node.get("required", [])
    for key, deps in node.get("dependentRequired", {}).items():
        names += [key, *deps]
    names += list(node.get("dependentSchemas", {}))
    patterns = list(node.get("patternProperties", {}))
    listed = "properties" in node or "patternProperties" in node
    is_open = "additionalProperties" in node
    alternatives = False
    members = list(node.get("allOf", []))
    members += [node[k] for k in ("if", "then", "else") if k in node]
    members += list(node.get("dependentSchemas", {}).values())
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            seen = seen | {name}
            members.append(defs.get(name, True))
    for sub in members:
        n, p, lst, o, alt = _declared(sub, defs, seen)
        names += n
        patterns += p
        listed = listed or lst
        is_open = is_open or o
        alternatives = (
            alternatives
            or alt
            or (isinstance(sub, dict) and any(k in sub for k in ("anyOf", "oneOf")))
        )
    return names, patterns, listed, is_open, alternatives


class _Strict:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.defs = _defs(root)
        self.strict_defs: dict[tuple[Any, ...], str] = {}
        self.pending: list[tuple[str, str, list[str], list[str], bool]] = []

    def run(self) -> Any:
        root = self.visit(self.root, instance=True)
        for name in list(self.defs):
            self.defs[name] = self.visit(self.defs[name], instance=False)
        while self.pending:
            name, copy_name, names, patterns, listed = self.pending.pop()
            target = copy.deepcopy(self.defs[name])
            self.defs[copy_name] = self.restrict(target, names, patterns, listed)
        if isinstance(root, dict) and self.defs:
            root["$defs"] = self.defs
        return root

    def visit(self, node: Any, instance: bool) -> Any:
        """Recurse into ``node``'s children (instance locations restricted), then restrict
        ``node`` itself when it sits at an instance location."""
        if not isinstance(node, dict):
            return node
        node = dict(node)
        for key in ("properties", "patternProperties"):
            if key in node:
                node[key] = {k: self.visit(v, True) for k, v in node[key].items()}
        for key in ("additionalProperties", "items"):
            if key in node:
                node[key] = self.visit(node[key], True)
        if "prefixItems" in node:
            node["prefixItems"] = [self.visit(v, True) for v in node["prefixItems"]]
        for key in ("allOf", "anyOf", "oneOf"):
            if key in node:
                node[key] = [self.visit(v, False) for v in node[key]]
        for key in ("if", "then", "else"):
            if key in node:
                node[key] = self.visit(node[key], False)
        if "dependentSchemas" in node:
            node["dependentSchemas"] = {
                k: self.visit(v, False) for k, v in node["dependentSchemas"].items()
            }
        # "not", "contains" and "propertyNames" keep the spec's meaning inside
        return self.restrict(node, [], [], False) if instance else node

    def restrict(self, node: Any, names: list[str], patterns: list[str], listed: bool) -> Any:
        """Close the object alternatives of ``node`` (an instance location), given the names
        and patterns its conjunctive ancestors declare."""
        if not isinstance(node, dict):
            return node
        if set(node) == {"$ref"}:
            target = _ref_target(node, self.defs)
            _, _, target_listed, is_open, nested = _declared(target, self.defs, frozenset())
            alternatives = isinstance(target, dict) and any(k in target for k in ("anyOf", "oneOf"))
            if is_open or nested or not (target_listed or listed or alternatives):
                return node
            # a shared definition may be used elsewhere where it must stay open: close a copy
            name = self.strict_copy(node["$ref"], names, patterns, listed)
            return {"$ref": f"#/$defs/{name}"}
        own_names, own_patterns, own_listed, is_open, nested = _declared(
            node, self.defs, frozenset()
        )
        if is_open or nested:
            return node  # the schema says what extra keys may be, or alternatives combine
        names = names + own_names
        patterns = patterns + own_patterns
        listed = listed or own_listed
        alternatives = [k for k in ("anyOf", "oneOf") if k in node]
        if alternatives:
            node = dict(node)
            for key in alternatives:
                node[key] = [self.restrict(m, names, patterns, listed) for m in node[key]]
            return node
        if not listed:
            return node
        closed = self.close(node, names, patterns)
        return node if closed is None else closed

    def strict_copy(self, ref: str, names: list[str], patterns: list[str], listed: bool) -> str:
        """A copy of the referenced definition with its alternatives closed (the definition
        itself may also be used where it must stay open, e.g. as an allOf member)."""
        name = ref.rsplit("/", 1)[-1]
        key = (name, tuple(names), tuple(patterns), listed)
        if key not in self.strict_defs:
            copy_name = f"{name}_strict{len(self.strict_defs)}"
            self.strict_defs[key] = copy_name
            self.defs[copy_name] = True  # filled in once every definition is visited
            self.pending.append((name, copy_name, names, patterns, listed))
        return self.strict_defs[key]

    def inline(self, node: dict[str, Any], seen: frozenset[str]) -> dict[str, Any] | None:
        """``node`` with the references among its conjunctive parts replaced by their targets'
        content (one level each; ``None`` on a cycle), so closing it intersects plain schemas
        rather than a recursive reference, which the engine cannot merge."""
        node = dict(node)
        if "$ref" in node:
            name = node.pop("$ref").rsplit("/", 1)[-1]
            if name in seen:
                return None
            node["allOf"] = [{"$ref": f"#/$defs/{name}"}, *node.get("allOf", [])]
        members = []
        for member in node.get("allOf", []):
            if isinstance(member, dict) and "$ref" in member:
                name = member["$ref"].rsplit("/", 1)[-1]
                if name in seen:
                    return None
                target = self.defs.get(name, True)
                rest = {k: v for k, v in member.items() if k != "$ref"}
                member = {**rest, "allOf": [target, *rest.get("allOf", [])]} if rest else target
                member = self.inline(member, seen | {name}) if isinstance(member, dict) else member
                if member is None:
                    return None
            elif isinstance(member, dict) and "allOf" in member:
                member = self.inline(member, seen)
                if member is None:
                    return None
            members.append(copy.deepcopy(member))
        if members:
            node["allOf"] = members
        return node

    def close(
        self, node: dict[str, Any], names: list[str], patterns: list[str]
    ) -> dict[str, Any] | None:
        """``node`` admitting only the declared names and patterns as keys (``None`` when that
        would intersect a recursive reference)."""
        if any(k in node for k in ("$ref", "allOf")):
            node = self.inline(node, frozenset())
            if node is None:
                return None
        props = dict(node.get("properties", {}))
        out = dict(node)
        out["properties"] = {n: props.get(n, True) for n in dict.fromkeys([*props, *names])}
        if patterns:
            extra = {p: True for p in dict.fromkeys(patterns)}
            out["patternProperties"] = {**extra, **out.get("patternProperties", {})}
        out["additionalProperties"] = False
        return out


def apply_strict(root: Any) -> Any:
    """Close every object alternative that lists properties and says nothing of extra keys.

    Example:
        >>> from hf_fvo.grammar.schema_logic import apply_strict
        >>> apply_strict({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})
        {'anyOf': [{'properties': {'a': {}}, 'additionalProperties': False},
                   {'properties': {'b': {}}, 'additionalProperties': False}]}
    """
    return _prune(_Strict(root).run())


def _prune(root: Any) -> Any:
    """Drop definitions nothing refers to (the open originals of strict copies, say)."""
    defs = _defs(root)
    if not defs:
        return root
    used: set[str] = set()
    stack = [{k: v for k, v in root.items() if k != "$defs"}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in used and name in defs:
                    used.add(name)
                    stack.append(defs[name])
            stack.extend(v for k, v in node.items() if k not in ("enum", "const"))
        elif isinstance(node, list):
            stack.extend(node)
    root = dict(root)
    kept = {k: v for k, v in defs.items() if k in used}
    if kept:
        root["$defs"] = kept
    else:
        root.pop("$defs")
    return root


# -- rewriting -------------------------------------------------------------------------------


class _Logic:
    """Rewrites logic keywords bottom-up. Complements are computed from the cleaned schemas as
    written (``raw_defs``, the operands before their own rewrite: ``not: {enum: …}`` is still an
    ``enum`` there, not the pattern it becomes) and then rewritten themselves."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.defs = _defs(root)
        self.raw_defs = copy.deepcopy(self.defs)

    def run(self) -> Any:
        for name in list(self.defs):
            self.defs[name] = self.node(self.defs[name], f"#/$defs/{name}")
        root = self.node(self.root, "#")
        if isinstance(root, dict) and self.defs:
            root["$defs"] = self.defs
        return root

    def node(self, node: Any, path: str) -> Any:
        if not isinstance(node, dict):
            return node
        raw = node
        node = dict(node)
        for key in ("properties", "patternProperties", "dependentSchemas"):
            if key in node:
                node[key] = {k: self.node(v, f"{path}/{key}/{k}") for k, v in node[key].items()}
        for key in ("additionalProperties", "items", "not", "if", "then", "else",
                    "propertyNames", "contains"):  # fmt: skip
            if key in node:
                node[key] = self.node(node[key], f"{path}/{key}")
        for key in (*_IN_PLACE_LISTS, "prefixItems"):
            if key in node:
                node[key] = [self.node(v, f"{path}/{key}/{i}") for i, v in enumerate(node[key])]
        conj: list[Any] = []
        if "not" in node:
            node.pop("not")
            negs = negate(raw["not"], self.raw_defs, context=_context(raw))
            if negs is None:
                raise UnsupportedSchemaError(
                    f"{path}/not: its complement cannot be built exactly (it negates a pattern, "
                    "multipleOf, items, uniqueItems or an open object)"
                )
            conj.append(self.node(_any_of(negs), f"{path}/not"))
        if "if" in node:
            conj.append(self.conditional(node, raw, path))
        # keys that require the same names form one condition: (no such key) or (the names)
        groups: dict[tuple[str, ...], list[str]] = {}
        for name, deps in node.pop("dependentRequired", {}).items():
            groups.setdefault(tuple(dict.fromkeys(deps)), []).append(name)
        for deps, names in groups.items():
            if deps:
                absent = {"properties": {n: False for n in names}}
                conj.append({"anyOf": [absent, {"required": list(deps)}]})
        for name, dep in node.pop("dependentSchemas", {}).items():
            present = _all_of([{"required": [name]}, dep])
            conj.append({"anyOf": [{"properties": {name: False}}, present]})
        if "propertyNames" in node:
            node = self.property_names(node, path)
        if "uniqueItems" in node:
            node = self.unique_items(node, path)
        if "contains" in node:
            raise UnsupportedSchemaError(
                f"{path}/contains: contains/minContains/maxContains are not supported"
            )
        if "oneOf" in node:
            conj.append(self.one_of(node.pop("oneOf"), raw["oneOf"], path))
        if "minProperties" in node or "maxProperties" in node:
            counts = self.property_counts(node, path)
            if counts is not None:
                node = {
                    k: v for k, v in node.items() if k not in ("minProperties", "maxProperties")
                }
                conj.extend(counts)
        if conj:
            node["allOf"] = [*node.get("allOf", []), *conj]
        if node.get("properties") and node.get("patternProperties"):
            node = self.universal_pattern(node)
        if node.get("properties") and node.get("patternProperties"):
            node = self.shared_patterns(node)
        if "allOf" in node:
            node = _flatten_all_of(node)
        if isinstance(node, dict) and "allOf" in node:
            node = self.without_implied(node)
        if isinstance(node, dict) and "allOf" in node:
            node = self.expand_alternatives(node)
        if isinstance(node, dict):
            node = self.without_empty_strings(node)
        return self.distribute_type(node) if isinstance(node, dict) else node

    def without_implied(self, node: dict[str, Any]) -> Any:
        """Drop ``allOf`` members that accept every value of the types the node already
        restricts to (a recursive object schema beside ``{"type": "integer"}``): the engine
        would otherwise intersect the recursion with nothing to gain."""
        kinds = _types_of({k: v for k, v in node.items() if k != "allOf"}, self.defs)
        for member in node["allOf"]:
            if not _is_logic(member):
                kinds &= _types_of(member, self.defs)
        if not kinds or kinds == set(_ALL_TYPES):
            return node
        kept = [  # only members that did not supply the restriction may go
            m for m in node["allOf"]
            if not (_is_logic(m) and all(_on_kind(m, k, self.defs) == "all" for k in kinds))
        ]  # fmt: skip
        if len(kept) == len(node["allOf"]):
            return node
        rest = {k: v for k, v in node.items() if k != "allOf"}
        if kept:
            return {**rest, "allOf": kept}
        return rest or True

    def without_empty_strings(self, node: dict[str, Any]) -> Any:
        """A node whose patterns no string matches together (a ``pattern`` contradicting a
        ``format``, say) admits no string: say so with ``type`` (the engine would refuse the
        whole schema, though an optional property with this schema is merely absent)."""
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        patterns += [m["pattern"] for m in node.get("allOf", [])
                     if isinstance(m, dict) and isinstance(m.get("pattern"), str)]  # fmt: skip
        if len(patterns) < 2:
            return node
        from hf_fvo.grammar.pushdown import patterns_intersect

        if patterns_intersect(tuple(patterns)):
            return node
        kinds = [t for t in _ALL_TYPES if t != "string"]
        if "type" in node:
            named = {node["type"]} if isinstance(node["type"], str) else set(node["type"])
            kinds = [t for t in [*_ALL_TYPES, "integer"] if t in named and t != "string"]
        if not kinds:
            return False
        return {**node, "type": kinds[0] if len(kinds) == 1 else kinds}

    def expand_alternatives(self, node: dict[str, Any]) -> Any:
        """Several ``anyOf`` members of one ``allOf`` as one ``anyOf`` of their combinations,
        leaving out combinations whose parts exclude each other. Where that is still too many,
        split on whether a discriminating property is present: conditionals keyed on one
        property then combine into a handful of branches (absent: every ``then``; present: one
        value's ``then``; and non-objects apart), where the engine would enumerate the whole
        product."""
        unions = [m for m in node["allOf"] if isinstance(m, dict) and set(m) == {"anyOf"}]
        if len(unions) < 2:
            return node
        context = {k: v for k, v in node.items() if k != "allOf"}
        rest = [m for m in node["allOf"] if not any(m is u for u in unions)]
        combos = self.combinations(unions, [context] if context else [])
        if combos is None:
            for name in self.discriminators(unions):
                cases = (
                    _except({"object"}),
                    {"type": "object", "properties": {name: False}},
                    {"type": "object", "required": [name]},
                )
                parts = [
                    self.combinations(unions, [*([context] if context else []), case], name)
                    for case in cases
                ]
                if all(p is not None for p in parts):
                    combos = [[case, *c] for case, p in zip(cases, parts, strict=True) for c in p]
                    break
            else:
                return node  # too many: leave the product to the engine
        expanded = _any_of([_merged(c) for c in combos])
        return {**context, "allOf": [*rest, expanded]}

    def combinations(
        self, unions: list[Any], given: list[Any], name: str | None = None
    ) -> list[list[Any]] | None:
        """Branch choices, one per union, whose parts (and ``given``) do not exclude each
        other, each reduced to the parts the others do not imply; ``None`` beyond the size
        limit. With ``name``, combinations leaving that property no allowed value (of the
        finitely many the parts allow) are excluded as well."""
        combos: list[list[Any]] = [[]]
        for union in unions:
            grown = []
            for combo in combos:
                for branch in union["anyOf"]:
                    parts = [*given, *combo]
                    if any(disjoint(_all_of([*given, part]) if given else part, branch, self.defs)
                           for part in parts):  # fmt: skip
                        continue
                    if name is not None and not self.some_value(name, [*parts, branch]):
                        continue
                    grown.append([*combo, branch])
                    if len(grown) > _MAX_COMBINATIONS:
                        return None
            combos = grown
        return [self.reduce(combo, given) for combo in combos]

    def some_value(self, name: str, parts: list[Any]) -> bool:
        """Whether property ``name`` keeps a value every part allows (True when the parts do not
        restrict it to finitely many)."""
        schemas = [p for p in (_property(part, name, self.defs) for part in parts) if p is not None]
        values = _value_set(_all_of(schemas), self.defs) if schemas else None
        if values is None:
            return True
        return any(all(_satisfies(v, sch, self.defs) for sch in schemas) for v in values)

    def reduce(self, combo: list[Any], given: list[Any]) -> list[Any]:
        """Drop the parts of a combination the other parts imply."""
        kept = list(combo)
        for part in combo:
            others = [*given, *(p for p in kept if p is not part)]
            if others and negate(part, self.defs, context=_all_of(others)) == []:
                kept = [p for p in kept if p is not part]
        return kept

    @staticmethod
    def discriminators(unions: list[Any]) -> list[str]:
        """Properties given a constant or enum in branches of at least two unions."""
        seen: dict[str, set[int]] = {}
        stack = [(i, b) for i, u in enumerate(unions) for b in u["anyOf"]]
        while stack:
            i, node = stack.pop()
            if not isinstance(node, dict):
                continue
            for name, sub in node.get("properties", {}).items():
                if isinstance(sub, dict) and ("const" in sub or "enum" in sub):
                    seen.setdefault(name, set()).add(i)
            stack.extend((i, m) for m in node.get("allOf", []))
        return [name for name, where in seen.items() if len(where) >= 2]

    def universal_pattern(self, node: dict[str, Any]) -> dict[str, Any]:
        """A pattern matching every key (``.*``) applies to the listed properties too; make that
        explicit — each listed property takes the intersection of its schema and the pattern's
        (simplified where one contains the other) and the pattern becomes "any other key" — so
        the engine never intersects the two itself (it cannot for recursive schemas)."""
        patterns = node["patternProperties"]
        universal = [p for p in patterns if p in _UNIVERSAL]
        if len(universal) != 1 or len(patterns) != 1:
            return node
        rule = patterns[universal[0]]
        props = {n: self.intersect(sub, rule) for n, sub in node["properties"].items()}
        others = _literals_complement(sorted(props))
        return {**node, "properties": props, "patternProperties": {others: rule}}

    def intersect(self, a: Any, b: Any) -> Any:
        """``a`` ∧ ``b``, as one of them where it contains the other."""
        if b is True or a is False or a == b:
            return a
        if a is True or b is False:
            return b
        if disjoint(a, b, self.defs):
            return False
        if negate(b, self.defs, context=a) == []:
            return a
        if negate(a, self.defs, context=b) == []:
            return b
        return {"allOf": [a, b]}

    def shared_patterns(self, node: dict[str, Any]) -> dict[str, Any]:
        """A listed property whose name also matches a ``patternProperties`` pattern must satisfy
        both schemas. Where the listed schema adds nothing (``true``, or the pattern's own
        schema), let the pattern alone constrain it: drop an optional property (the pattern
        admits the key, now in any position among the pattern keys) or list a required one as
        ``true``. The engine would otherwise intersect a schema with itself, which it cannot do
        for a recursive one."""
        from hf_fvo.grammar.pushdown import patterns_intersect

        required = set(node.get("required", []))
        props = dict(node["properties"])
        for name, sub in list(props.items()):
            if sub is False:
                continue
            for pattern, theirs in node["patternProperties"].items():
                if (sub is True or theirs == sub) and patterns_intersect(
                    (pattern, f"^{re.escape(name)}$")
                ):
                    if name in required:
                        props[name] = True
                    else:
                        del props[name]
                    break
        return {**node, "properties": props}

    def distribute_type(self, node: dict[str, Any]) -> dict[str, Any]:
        """``{"anyOf": [...], "type": T}`` as ``{"anyOf": [...]}`` with T moved into the
        branches, where each branch either implies T already or takes it directly. The engine
        cannot merge a sibling ``type`` into a branch that refers back to its own definition."""
        if set(node) != {"anyOf", "type"}:
            return node
        names = {node["type"]} if isinstance(node["type"], str) else set(node["type"])
        branches = []
        for branch in node["anyOf"]:
            if _declared_types(branch, self.defs) <= _widen(names):
                branches.append(branch)
            elif isinstance(branch, dict) and "$ref" not in branch and "type" not in branch:
                branches.append({**branch, "type": node["type"]})
            else:
                return node
        return {"anyOf": branches}

    def conditional(self, node: dict[str, Any], raw: dict[str, Any], path: str) -> Any:
        condition = node.pop("if")
        then, otherwise = node.pop("then", True), node.pop("else", True)
        negs = negate(raw["if"], self.raw_defs, context=_context(raw))
        if negs is None:
            raise UnsupportedSchemaError(
                f"{path}/if: the schemas failing 'if' cannot be described exactly, so else "
                "cannot be applied"
            )
        failing = self.node(_any_of(negs), f"{path}/if")
        return _any_of(
            [
                p
                for p in (_all_of([condition, then]), _all_of([failing, otherwise]))
                if p is not False
            ]
        )

    def one_of(self, branches: list[Any], raw: list[Any], path: str) -> Any:
        """Exactly one branch: each branch conjoined with the complement of every branch it
        may overlap (complements from the branches as written, ``raw``)."""
        parts = []
        for i, bi in enumerate(branches):
            complements = []
            for j, bj in enumerate(raw):
                if i == j or disjoint(raw[i], bj, self.raw_defs):
                    continue
                negs = negate(bj, self.raw_defs, context=raw[i])
                if negs is None:
                    raise UnsupportedSchemaError(
                        f"{path}/oneOf: branches {i} and {j} may both match and the instances "
                        f"failing branch {j} cannot be described exactly, so 'exactly one' "
                        "cannot be enforced; use anyOf if overlap is acceptable"
                    )
                complements.append(negs)
            excluded = self.node(
                _conjunction_of_unions(_absorbed(complements)), f"{path}/oneOf/{i}"
            )
            part = _all_of([bi, excluded])
            if part is not False:
                parts.append(part)
        if len(parts) > _MAX_ALTERNATIVES:
            raise UnsupportedSchemaError(f"{path}/oneOf: too many exclusive alternatives")
        return _any_of(parts)

    def property_counts(self, node: dict[str, Any], path: str) -> list[Any] | None:
        """``minProperties``/``maxProperties`` as unions over which optional properties are
        present (the engine counts keys only once every listed property is fixed present or
        absent); ``None`` when nothing is optional, which the engine handles itself."""
        props = node.get("properties", {})
        required = list(node.get("required", []))
        optional = [n for n, s in props.items() if s is not False and n not in required]
        if not optional:
            return None
        low, high = node.get("minProperties", 0), node.get("maxProperties")
        closed = node.get("additionalProperties") is False and not node.get("patternProperties")
        k, need = len(optional), low - len(required)
        conj: list[Any] = []
        if need > 0:
            # at least ``need`` optional properties (or, when the object is open, fewer of them
            # and enough other keys, which the engine counts once the listed ones are fixed)
            branches = [{"required": list(s)} for s in itertools.combinations(optional, need)]
            if not closed:
                for j in range(need):
                    for s in itertools.combinations(optional, j):
                        absent = {o: False for o in optional if o not in s}
                        branches.append({"required": list(s), "properties": absent,
                                         "minProperties": low})  # fmt: skip
            conj.append(_any_of(branches))
        if high is not None:
            room = high - len(required)
            if room < 0:
                return [False]
            if room < k or not closed:
                branches = []
                for j in range(min(room, k) + 1):
                    for s in itertools.combinations(optional, j):
                        branch: dict[str, Any] = {
                            "properties": {o: False for o in optional if o not in s}
                        }
                        if not closed:
                            branch["required"] = list(s)
                            branch["maxProperties"] = high
                        branches.append(branch)
                conj.append(_any_of(branches))
        if sum(len(c["anyOf"]) if isinstance(c, dict) and "anyOf" in c else 1 for c in conj) > (
            _MAX_ALTERNATIVES
        ):
            raise UnsupportedSchemaError(
                f"{path}: minProperties/maxProperties over {k} optional properties need too many "
                "alternatives"
            )
        return conj

    def property_names(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``propertyNames`` over a finite name set (``enum``/``const``) or a bare pattern."""
        spec = _resolve(node.pop("propertyNames"), self.defs)
        if spec is True or spec == {} or spec == {"type": "string"}:
            return node
        where = f"{path}/propertyNames"
        values = _value_set(spec, self.defs) if isinstance(spec, dict) else None
        extra = node.get("additionalProperties", True)
        if spec is False:
            return {**node, "maxProperties": 0}
        if node.get("patternProperties"):
            raise UnsupportedSchemaError(f"{where}: not supported next to patternProperties")
        props = dict(node.get("properties", {}))
        if values is not None and all(isinstance(v, str) for v in values):
            allowed = set(values)
            out = {n: (s if n in allowed else False) for n, s in props.items()}
            if extra is not False:
                out.update({n: extra for n in values if n not in props})
            return {**node, "properties": out, "additionalProperties": False}
        keys = set(spec) - {"type"}
        if (
            isinstance(spec, dict)
            and keys <= {"pattern"}
            and spec.get("type", "string") == "string"
        ):
            pattern = spec.get("pattern", "")
            rx = re.compile(pattern)
            out = {n: (s if rx.search(n) else False) for n, s in props.items()}
            result = {**node, "properties": out, "additionalProperties": False}
            if extra is not False and pattern:
                result["patternProperties"] = {pattern: extra}
            return result
        raise UnsupportedSchemaError(
            f"{where}: only a finite set of names (enum/const) or a single pattern is supported"
        )

    def unique_items(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``uniqueItems`` where it is trivial (at most one item) or the items are finitely many
        values (then every repetition-free sequence is listed)."""
        node = dict(node)
        node.pop("uniqueItems")
        if node.get("maxItems", 2) <= 1:
            return node
        items = node.get("items", True)
        values = _value_set(items, self.defs)
        if values is None and isinstance(_resolve(items, self.defs), dict):
            kinds = _types_of(items, self.defs)
            if kinds == {"boolean"}:
                values = [True, False]
            elif kinds == {"null"}:
                values = [None]
        if values is None or node.get("prefixItems"):
            raise UnsupportedSchemaError(
                f"{path}/uniqueItems: uniqueness over infinitely many possible items is not "
                "regular or context-free; it cannot be enforced by a grammar"
            )
        distinct = list({_json_key(v): v for v in values}.values())
        low, high = node.pop("minItems", 0), node.pop("maxItems", len(distinct))
        sequences = [
            {"prefixItems": [{"const": v} for v in seq], "items": False, "minItems": len(seq)}
            for k in range(low, min(high, len(distinct)) + 1)
            for seq in itertools.permutations(distinct, k)
        ]
        if len(sequences) > _MAX_UNIQUE_SEQUENCES:
            raise UnsupportedSchemaError(
                f"{path}/uniqueItems: {len(sequences)} repetition-free sequences; too many to list"
            )
        node.setdefault("allOf", []).append({"anyOf": [_except({"array"}), *sequences]})
        return node


def _absorbed(unions: list[list[Any]]) -> list[list[Any]]:
    """The same conjunction of unions without repeats, and without any union whose parts include
    another's (U₁ ⊆ U₂ makes U₁ ∩ U₂ = U₁): n overlapping ``oneOf`` branches give n − 1
    complements each, mostly alike, which the engine would otherwise multiply out."""
    keyed = {tuple(sorted({_json_key(p) for p in u})): u for u in unions}
    keys = sorted(keyed, key=len)
    kept: list[tuple[str, ...]] = []
    for key in keys:
        if not any(set(k) <= set(key) for k in kept):
            kept.append(key)
    return [keyed[k] for k in kept]


def _conjunction_of_unions(unions: list[list[Any]]) -> Any:
    """∧_j (∨ unions[j]), with the disjuncts every union shares factored out:
    (C ∨ R_1) ∧ (C ∨ R_2) ∧ … = C ∨ (R_1 ∧ R_2 ∧ …). (Overlapping ``oneOf`` branches often
    differ from one another by the same discriminating key, whose presence then settles them
    all at once.)"""
    if not unions:
        return True
    keys = [{_json_key(p) for p in u} for u in unions]
    shared = set.intersection(*keys)
    common = [p for p in unions[0] if _json_key(p) in shared]
    rests = [[p for p in u if _json_key(p) not in shared] for u in unions]
    remainder = False if any(not r for r in rests) else _all_of([_any_of(r) for r in rests])
    return _any_of([*common, *([remainder] if remainder is not False else [])])


_MERGEABLE = {"type", "properties", "required"}


def _merged(parts: list[Any]) -> Any:
    """The intersection of ``parts`` with nested ``allOf`` spliced and the parts that state only
    types, properties and required names merged into one schema (the engine recurses once per
    ``allOf`` member it intersects, so a long flat list of small parts is what it handles
    worst)."""
    flat: list[Any] = []
    stack = list(reversed(parts))
    while stack:
        part = stack.pop()
        if isinstance(part, dict) and set(part) == {"allOf"}:
            stack.extend(reversed(part["allOf"]))
        elif part is not True and part != {}:
            flat.append(part)
    if any(p is False for p in flat):
        return False
    simple = [p for p in flat if isinstance(p, dict) and set(p) <= _MERGEABLE]
    others = [p for p in flat if not (isinstance(p, dict) and set(p) <= _MERGEABLE)]
    merged: dict[str, Any] = {}
    for part in simple:
        if "type" in part:
            names = {part["type"]} if isinstance(part["type"], str) else set(part["type"])
            if "type" in merged:
                here = {merged["type"]} if isinstance(merged["type"], str) else set(merged["type"])
                both = (here & _widen(names)) | (names & _widen(here))
                if not both:
                    return False
                names = both
            merged["type"] = sorted(names)[0] if len(names) == 1 else sorted(names)
        if "required" in part:
            merged["required"] = list(dict.fromkeys([*merged.get("required", []),
                                                     *part["required"]]))  # fmt: skip
        for name, sub in part.get("properties", {}).items():
            props = merged.setdefault("properties", {})
            props[name] = _all_of([props[name], sub]) if name in props else sub
    return _all_of([merged, *others] if merged else others)


def _context(node: dict[str, Any]) -> dict[str, Any]:
    """What a node says besides its logic keywords: the context its ``not``/``if`` negate in."""
    skip = ("not", "if", "then", "else", "oneOf", "dependentSchemas", "dependentRequired")
    return {k: v for k, v in node.items() if k not in skip}


def _is_logic(node: Any) -> bool:
    """A schema whose type restriction is not read off directly (a reference or a union)."""
    return isinstance(node, dict) and bool({"$ref", "anyOf", "oneOf", "not", "if"} & set(node))


def _flatten_all_of(node: dict[str, Any]) -> Any:
    """Splice nested ``allOf``s and drop trivial members; ``{"allOf": [X]}`` is X. (The engine
    merges every ``allOf`` level, and cannot merge a recursive reference with siblings.)"""
    members: list[Any] = []
    for member in node["allOf"]:
        if isinstance(member, dict) and set(member) == {"allOf"}:
            members.extend(member["allOf"])
        elif member is not True and member != {}:
            members.append(member)
    if any(m is False for m in members):
        return False
    members = list({_json_key(m): m for m in members}.values())  # X ∧ X = X
    rest = {k: v for k, v in node.items() if k != "allOf"}
    if not members:
        return rest
    if not rest and len(members) == 1:
        return members[0]
    return {**rest, "allOf": members}


def rewrite_logic(root: Any) -> Any:
    """Replace ``not``, ``if``/``then``/``else``, dependencies, ``oneOf``, ``propertyNames`` and
    ``uniqueItems`` by exactly equivalent ``anyOf``/``allOf`` structure, or refuse.

    Example:
        >>> from hf_fvo.grammar.schema_logic import rewrite_logic
        >>> rewrite_logic({"oneOf": [{"type": "string"}, {"type": "null"}]})
        {'anyOf': [{'type': 'string'}, {'type': 'null'}]}
    """
    if isinstance(root, dict):
        root = dict(root)
        if "$defs" in root:
            root["$defs"] = dict(root["$defs"])
    return _inline_booleans(_Logic(root).run())


def _inline_booleans(root: Any) -> Any:
    """References to ``true``/``false`` definitions replaced by the boolean itself (the engine
    refuses a schema that reaches ``false`` through a reference even where ``false`` only means
    "this property is absent")."""
    defs = _defs(root)
    constant = {name for name, d in defs.items() if isinstance(d, bool)}
    if not constant:
        return root

    def visit(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"$ref"} and node["$ref"].rsplit("/", 1)[-1] in constant:
                return defs[node["$ref"].rsplit("/", 1)[-1]]
            return {k: (v if k in ("enum", "const") else visit(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [visit(x) for x in node]
        return node

    return _prune(visit(root))
