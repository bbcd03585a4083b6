"""Exact complements of JSON schemas, as unions of schemas a grammar engine enforces.

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
``None`` and the caller refuses the schema, naming the keyword.

Example:
    >>> from hf_fvo.grammar.schema.negation import negate
    >>> negate({"required": ["a"]}, {})
    [{'type': 'object', 'properties': {'a': False}}]
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from hf_fvo.grammar.schema.disjoint import disjoint, disjoint_on
from hf_fvo.grammar.schema.facts import (
    Intersect,
    all_of,
    any_of,
    closed_keys,
    declared_types,
    json_key,
    json_type,
    object_facts,
    on_kind,
    property_schema,
    ref_target,
    resolve,
    satisfies,
    types_except,
    types_of,
    value_set,
    widen,
)

__all__ = ["literals_complement", "negate"]

# -- negation --------------------------------------------------------------------------------


def literals_complement(words: list[str]) -> str:
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
        by_type.setdefault(json_type(v), []).append(v)
    out: list[Any] = []
    rest = types_except(set(by_type))
    if rest:
        out.append(rest)
    if "boolean" in by_type:
        missing = [b for b in (True, False) if b not in by_type["boolean"]]
        out.extend({"const": b} for b in missing)
    if "string" in by_type:
        pattern = literals_complement(sorted(set(by_type["string"])))
        out.append({"type": "string", "pattern": pattern})
    if "number" in by_type:
        out.extend(_numbers_complement(by_type["number"]))
    for kind in ("object", "array"):
        distinct = {json_key(v): v for v in by_type.get(kind, [])}.values()
        whole = all_of([any_of(_differs_from(v)) for v in distinct])
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
                        "properties": {k: any_of(_negate_values([v]))}})  # fmt: skip
        out.append({"type": "object", "minProperties": len(value) + 1})
        return out
    n = len(value)
    out = [{"type": "array", "maxItems": n - 1}] if n else []
    out.append({"type": "array", "minItems": n + 1})
    for i, item in enumerate(value):
        prefix = [True] * i + [any_of(_negate_values([item]))]
        out.append({"type": "array", "minItems": n, "maxItems": n, "prefixItems": prefix})
    return out


_RANGE_FLIP = {
    "minimum": "exclusiveMaximum",
    "exclusiveMinimum": "maximum",
    "maximum": "exclusiveMinimum",
    "exclusiveMaximum": "minimum",
}


def negate(
    node: Any,
    defs: dict[str, Any],
    context: Any = None,
    depth: int = 0,
    *,
    intersect: Intersect | None = None,
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
        >>> from hf_fvo.grammar.schema.negation import negate
        >>> negate({"type": "string", "enum": ["a"]}, {})[-1]
        {'type': 'string', 'pattern': '^(?:|[^a][\\\\s\\\\S]*|a(?:[\\\\s\\\\S]+))$'}
    """
    if depth > 32:
        return None
    if node is True:
        return []
    if node is False:
        return [True]
    if context is not None and disjoint(context, node, defs, intersect=intersect):
        return [True]  # nothing in the context satisfies node
    if context is not None:
        by_kind = _complement_by_kind(node, context, defs, intersect=intersect)
        if by_kind is not None:
            return by_kind
    out: list[Any] = []
    for key, value in node.items():
        part = _negate_keyword(node, key, value, defs, context, depth, intersect=intersect)
        if part is None:
            return None
        out.extend(part)
    if context is not None:  # parts of types the context never has add nothing
        kinds = types_of(context, defs)
        out = [p for p in out if types_of(p, defs) & kinds]
    return out


def _negate_keyword(
    node: dict[str, Any],
    key: str,
    value: Any,
    defs: dict[str, Any],
    context: Any,
    depth: int,
    *,
    intersect: Intersect | None = None,
) -> list[Any] | None:
    if key == "$defs":
        return []
    if key == "$ref":
        return negate(ref_target(node, defs), defs, context, depth + 1, intersect=intersect)
    if key == "type":
        names = {value} if isinstance(value, str) else set(value)
        theirs = declared_types(context, defs) if context is not None else None
        if theirs is not None and theirs <= widen(names):
            return []  # every instance of the context has one of these types
        if "integer" in names and "number" not in names:
            if theirs is None or "number" in theirs:
                return None  # the complement holds the non-integral numbers: no schema says so
            rest_types = sorted(theirs - widen(names))
            return [{"type": rest_types[0] if len(rest_types) == 1 else rest_types}]
        rest = types_except({"number" if t == "integer" else t for t in names})
        return [rest] if rest else []
    if key in ("enum", "const"):
        return _negate_values([value] if key == "const" else value)
    if key == "required":  # non-objects satisfy it: only objects lacking a name fail it
        needed = object_facts(context, defs)[0] if context is not None else set()
        return [{"type": "object", "properties": {n: False}} for n in value if n not in needed]
    if key == "properties":
        return _negate_properties(value, defs, context, depth, intersect=intersect)
    if key == "additionalProperties":
        return _negate_additional(node, value, defs, context, depth, intersect=intersect)
    if key in ("dependentRequired", "dependentSchemas"):
        out = []
        for name, dep in value.items():
            if key == "dependentRequired":
                out.extend(
                    {"type": "object", "required": [name], "properties": {d: False}} for d in dep
                )
                continue
            negs = negate(dep, defs, context, depth + 1, intersect=intersect)
            if negs is None:
                return None
            if negs:
                out.append(all_of([{"type": "object", "required": [name]}, any_of(negs)]))
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
            negs = negate(sub, defs, None, depth + 1, intersect=intersect)
            if negs is None:
                return None
            if negs:
                prefix = [True] * i + [any_of(negs)]
                out.append({"type": "array", "minItems": i + 1, "prefixItems": prefix})
        return out
    if key == "items":
        return _negate_items(node, value, defs, context, depth, intersect=intersect)
    if key == "allOf":
        out = []
        for sub in value:
            negs = negate(sub, defs, context, depth + 1, intersect=intersect)
            if negs is None:
                return None
            out.extend(negs)
        return out
    if key == "not":
        return [value]  # ¬¬S = S
    if key in ("oneOf", "anyOf"):
        complements = []  # ¬S_i for each branch
        for sub in value:
            negs = negate(sub, defs, context, depth + 1, intersect=intersect)
            if negs is None:
                return None
            complements.append(any_of(negs))
        none = all_of(complements)
        out = [] if none is False else [none]
        if key == "oneOf":  # not exactly one: none of them, or two at once
            for x, y in itertools.combinations(value, 2):
                if not disjoint(x, y, defs, intersect=intersect):
                    out.append(all_of([x, y]))
        return out
    return None  # pattern, multipleOf, uniqueItems, propertyNames, …: no complement


def _negate_properties(
    value: dict[str, Any],
    defs: dict[str, Any],
    context: Any,
    depth: int,
    *,
    intersect: Intersect | None = None,
) -> list[Any] | None:
    """Objects holding some listed property with a value outside its schema."""
    closed = closed_keys(context, defs) if context is not None else None
    out = []
    for name, sub in value.items():
        if closed is not None and name not in closed:
            continue  # the context never holds this property
        theirs = property_schema(context, name, defs) if context is not None else None
        if theirs is not None and theirs == sub:
            continue  # the context's own schema for this property
        if theirs is not None and disjoint(theirs, sub, defs, intersect=intersect):
            out.append({"type": "object", "required": [name]})
            continue
        values = value_set(theirs, defs) if theirs is not None else None
        if values is not None and all(satisfies(v, sub, defs) for v in values):
            continue  # every value the context allows here satisfies the schema
        negs = negate(sub, defs, theirs, depth + 1, intersect=intersect)
        if negs is None:
            return None
        if negs:
            out.append({"type": "object", "required": [name], "properties": {name: any_of(negs)}})
    return out


def _negate_additional(
    node: dict[str, Any],
    value: Any,
    defs: dict[str, Any],
    context: Any,
    depth: int,
    *,
    intersect: Intersect | None = None,
) -> list[Any] | None:
    """Objects holding a key outside ``properties`` whose value fails ``additionalProperties``:
    stated only when ``context`` closes the set of keys (then those keys are finitely many)."""
    if value is True:
        return []
    if node.get("patternProperties"):
        return None
    keys = closed_keys(context, defs) if context is not None else None
    if keys is None:
        return None
    extra = [k for k in sorted(keys) if k not in node.get("properties", {})]
    if value is False:
        return [{"type": "object", "required": [k]} for k in extra]
    out = []
    for k in extra:
        negs = negate(
            value, defs, property_schema(context, k, defs), depth + 1, intersect=intersect
        )
        if negs is None:
            return None
        if negs:
            out.append({"type": "object", "required": [k], "properties": {k: any_of(negs)}})
    return out


def _negate_items(
    node: dict[str, Any],
    value: Any,
    defs: dict[str, Any],
    context: Any,
    depth: int,
    *,
    intersect: Intersect | None = None,
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
        ctx = resolve(context, defs)
        theirs = ctx.get("items") if isinstance(ctx, dict) and not ctx.get("prefixItems") else None
        if theirs is not None and disjoint(theirs, value, defs, intersect=intersect):
            return [{"type": "array", "minItems": 1}]
        if theirs is not None and negate(value, defs, theirs, depth + 1, intersect=intersect) == []:
            return []  # the context's items all satisfy these items
    return None


def _complement_by_kind(
    node: Any, context: Any, defs: dict[str, Any], *, intersect: Intersect | None = None
) -> list[Any] | None:
    """C ∖ node split by JSON type, where for every type of the context C, ``node`` accepts
    all of its values (C ∖ node holds none), none of them, or C and ``node`` are disjoint on it
    (C ∖ node holds all of C's); ``None`` where some type is none of these."""
    outside = []
    for kind in sorted(types_of(context, defs)):
        verdict = on_kind(node, kind, defs)
        if verdict == "all":
            continue
        if verdict is None and not disjoint_on(kind, context, node, defs, 0, intersect=intersect):
            return None
        outside.append(kind)
    if not outside:
        return []
    return [{"type": outside[0] if len(outside) == 1 else outside}]
