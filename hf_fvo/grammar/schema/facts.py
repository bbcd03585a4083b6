"""What a cleaned JSON schema says, read off its keywords: the JSON types and values it admits,
its number bounds, string patterns and object properties, and small constructors.

Every function takes ``defs``, the root's ``$defs`` (after cleaning every ``$ref`` points there),
and answers soundly: where a schema is too complex to read, the answer is the weaker one (more
types, no bound, no known value set), never a wrong one.

Example:
    >>> from hf_fvo.grammar.schema.facts import types_of
    >>> sorted(types_of({"anyOf": [{"type": "integer"}, {"const": "a"}]}, {}))
    ['number', 'string']
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 256  # deeper schemas are refused (prepare) or read as open (finite)

Intersect = Callable[[tuple[str, ...]], bool]
"""An oracle: whether some string matches every JSON-Schema ``pattern`` (unanchored, ECMA-style)
in the tuple. The grammar compiler passes the pushdown engine's."""

ALL_TYPES = ("null", "boolean", "object", "array", "number", "string")


@dataclass(frozen=True)
class Checked:
    """A constraint of the user's schema that the masks do not enforce (they enforce a superset
    there) and an exact check of the finished text does: where, which keyword, and why."""

    pointer: str
    keyword: str
    reason: str

    def __str__(self) -> str:
        return f"{self.pointer}: {self.reason}"


CHECKED = "\x00checked"
"""The key under which a cleaned schema lists keywords it dropped for an exact check of the
finished text (:mod:`hf_fvo.grammar.schema.check`): the node's language is *smaller* than the
rest of it says, so every reading here treats the node as opaque (no complement, no "all of a
kind"), and the rewrite removes the key before the engine sees the schema."""


def definitions_of(root: Any) -> dict[str, Any]:
    return root.get("$defs", {}) if isinstance(root, dict) else {}


def resolve(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """Follow ``$ref`` chains (all refs point into ``$defs`` after cleaning)."""
    while isinstance(node, dict) and "$ref" in node and len(node) == 1 and depth < 64:
        node = defs.get(node["$ref"].rsplit("/", 1)[-1], True)
        depth += 1
    return node


def ref_target(node: dict[str, Any], defs: dict[str, Any]) -> Any:
    return defs.get(node["$ref"].rsplit("/", 1)[-1], True)


def any_of(parts: list[Any]) -> Any:
    if not parts:
        return False
    if len(parts) == 1:
        return parts[0]
    return {"anyOf": parts}


def all_of(parts: list[Any]) -> Any:
    parts = list({json_key(p): p for p in parts if p is not True and p != {}}.values())
    if any(p is False for p in parts):
        return False
    if not parts:
        return True
    if len(parts) == 1:
        return parts[0]
    return {"allOf": parts}


# -- types -----------------------------------------------------------------------------------


def types_of(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> set[str]:
    """JSON types an instance of ``node`` can have ("integer" counts as "number")."""
    if node is True:
        return set(ALL_TYPES)
    if node is False:
        return set()
    out = set(ALL_TYPES)
    kind = node.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        out &= {"number" if t == "integer" else t for t in names}
    for key in ("const", "enum"):
        if key in node:
            values = [node["const"]] if key == "const" else node["enum"]
            out &= {json_type(v) for v in values}
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            out &= types_of(defs.get(name, True), defs, seen | {name})
    for sub in node.get("allOf", []):
        out &= types_of(sub, defs, seen)
    for key in ("anyOf", "oneOf"):
        if key in node:
            union: set[str] = set()
            for sub in node[key]:
                union |= types_of(sub, defs, seen)
            out &= union
    return out


def declared_types(node: Any, defs: dict[str, Any]) -> set[str]:
    """Types an instance of ``node`` can have, keeping "integer" apart from "number"."""
    node = resolve(node, defs)
    if node is True or not isinstance(node, dict):
        return set() if node is False else {*ALL_TYPES, "integer"}
    out = {*ALL_TYPES, "integer"}
    kind = node.get("type")
    if kind is not None:
        out &= widen({kind} if isinstance(kind, str) else set(kind))
    for key in ("const", "enum"):
        if key in node:
            values = [node["const"]] if key == "const" else node["enum"]
            out &= {_value_type(v) for v in values}
    for sub in node.get("allOf", []):
        out &= declared_types(sub, defs)
    return out


def widen(names: set[str]) -> set[str]:
    """Type names with "number" standing for itself and "integer"."""
    return names | {"integer"} if "number" in names else set(names)


def _value_type(value: Any) -> str:
    kind = json_type(value)
    if kind == "number" and float(value).is_integer():
        return "integer"
    return kind


def json_type(value: Any) -> str:
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


def types_except(types: set[str]) -> dict[str, Any] | None:
    rest = [t for t in ALL_TYPES if t not in types]
    if not rest:
        return None
    return {"type": rest[0] if len(rest) == 1 else rest}


def closed_keys(node: Any, defs: dict[str, Any]) -> set[str] | None:
    """The only keys an object satisfying ``node`` may hold, if ``node`` says so directly."""
    node = resolve(node, defs)
    if not isinstance(node, dict):
        return None
    values = value_set(node, defs)
    if values is not None and all(isinstance(v, dict) for v in values):
        return {k for v in values for k in v}  # one of finitely many objects
    if node.get("additionalProperties") is False and not node.get("patternProperties"):
        return {k for k, v in node.get("properties", {}).items() if v is not False}
    for sub in node.get("allOf", []):
        keys = closed_keys(sub, defs)
        if keys is not None:
            return keys
    return None


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


def on_kind(node: Any, kind: str, defs: dict[str, Any], depth: int = 0) -> str | None:
    """Whether ``node`` accepts ``"all"`` or ``"none"`` of the JSON values of type ``kind``
    (``None``: some, or unknown). Sound: never wrong, sometimes ``None``."""
    node = resolve(node, defs)
    if node is True:
        return "all"
    if node is False:
        return "none"
    if not isinstance(node, dict) or depth > 16:
        return None
    if kind not in types_of(node, defs):
        return "none"
    if "const" in node or "enum" in node or "if" in node:
        return None
    if kind == "number" and "number" not in declared_types(node, defs):
        return None  # integers only
    if CHECKED in node or any(key in node for key in _KIND_KEYWORDS[kind]):
        return None
    parts = list(node.get("allOf", []))
    if "$ref" in node:
        parts.append(ref_target(node, defs))
    verdicts = [on_kind(sub, kind, defs, depth + 1) for sub in parts]
    if "not" in node:
        inner = on_kind(node["not"], kind, defs, depth + 1)
        verdicts.append({"all": "none", "none": "all"}.get(inner) if inner else None)
    if "anyOf" in node:
        alts = [on_kind(sub, kind, defs, depth + 1) for sub in node["anyOf"]]
        verdicts.append("all" if "all" in alts else "none" if all(v == "none" for v in alts)
                        else None)  # fmt: skip
    if "oneOf" in node:
        alts = [on_kind(sub, kind, defs, depth + 1) for sub in node["oneOf"]]
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


def value_set(node: Any, defs: dict[str, Any]) -> list[Any] | None:
    """The finite set of values ``node`` allows, where its conjunctive parts state one
    (``const``/``enum``; several parts: their intersection)."""
    node = resolve(node, defs)
    if not isinstance(node, dict):
        return None
    sets: list[list[Any]] = []
    if "const" in node:
        sets.append([node["const"]])
    if "enum" in node:
        sets.append(list(node["enum"]))
    for sub in node.get("allOf", []):
        values = value_set(sub, defs)
        if values is not None:
            sets.append(values)
    if not sets:
        return None
    keys = set.intersection(*({json_key(v) for v in values} for values in sets))
    return [v for v in sets[0] if json_key(v) in keys]


def json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def object_facts(node: Any, defs: dict[str, Any]) -> tuple[set[str], set[str], set[str] | None]:
    """(required names, forbidden names, closed key set or None) stated by ``node``'s
    conjunctive parts."""
    node = resolve(node, defs)
    required: set[str] = set()
    forbidden: set[str] = set()
    closed: set[str] | None = None
    if not isinstance(node, dict):
        return required, forbidden, closed
    required |= set(node.get("required", []))
    forbidden |= {k for k, v in node.get("properties", {}).items() if v is False}
    closed = closed_keys(node, defs)
    for sub in node.get("allOf", []):
        r, f, c = object_facts(sub, defs)
        required |= r
        forbidden |= f
        if c is not None:
            closed = c if closed is None else closed & c
    return required, forbidden, closed


def property_count_bounds(node: Any, defs: dict[str, Any], depth: int = 0) -> tuple[float, float]:
    """(fewest, most) properties an object satisfying ``node`` can hold, as far as its
    ``required``, ``minProperties``/``maxProperties``, closed key sets and logic say (sound)."""
    node = resolve(node, defs)
    if not isinstance(node, dict) or depth > 16:
        return 0, math.inf
    low = max(len(set(node.get("required", []))), node.get("minProperties", 0))
    closed = closed_keys(node, defs)
    high = min(node.get("maxProperties", math.inf), math.inf if closed is None else len(closed))
    parts = list(node.get("allOf", []))
    if "$ref" in node:
        parts.append(ref_target(node, defs))
    for sub in parts:
        lo, hi = property_count_bounds(sub, defs, depth + 1)
        low, high = max(low, lo), min(high, hi)
    for key in ("anyOf", "oneOf"):
        if node.get(key):
            bounds = [property_count_bounds(sub, defs, depth + 1) for sub in node[key]]
            low = max(low, min(lo for lo, _ in bounds))
            high = min(high, max(hi for _, hi in bounds))
    return low, high


def property_schema(node: Any, name: str, defs: dict[str, Any]) -> Any:
    """The schema ``node``'s conjunctive parts give property ``name`` (their intersection), or
    ``None`` where none lists it."""
    node = resolve(node, defs)
    if not isinstance(node, dict):
        return None
    found = []
    if name in node.get("properties", {}):
        found.append(node["properties"][name])
    for sub in node.get("allOf", []):
        part = property_schema(sub, name, defs)
        if part is not None:
            found.append(part)
    if not found:
        return None
    return found[0] if len(found) == 1 else {"allOf": found}


def satisfies(value: Any, node: Any, defs: dict[str, Any]) -> bool:
    """Whether ``value`` is an instance of ``node`` (validated with ``jsonschema``; ``True`` when
    it cannot tell, which keeps :func:`disjoint` sound)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        validator = Draft202012Validator({"$defs": defs, "allOf": [node]})
        return bool(validator.is_valid(value))
    except (SchemaError, re.error, RecursionError, ValueError, TypeError):
        return True


def string_patterns(node: Any, defs: dict[str, Any], depth: int = 0) -> list[str]:
    """Patterns every string of ``node`` must match (its conjunctive closure)."""
    node = resolve(node, defs)
    if not isinstance(node, dict) or depth > 16:
        return []
    out = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    for sub in node.get("allOf", []):
        out += string_patterns(sub, defs, depth + 1)
    if "$ref" in node:
        out += string_patterns(ref_target(node, defs), defs, depth + 1)
    return out


def number_bounds(node: Any, defs: dict[str, Any]) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """((low, exclusive), (high, exclusive)) that ``node`` states for numbers."""
    low, high = (-float("inf"), False), (float("inf"), False)
    node = resolve(node, defs)
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
        (sl, sh) = number_bounds(sub, defs)
        low = max(low, sl)
        high = min(high, sh, key=lambda x: (x[0], not x[1]))
    return low, high


def below(high: tuple[float, bool], low: tuple[float, bool]) -> bool:
    """Every number ≤ high lies below every number ≥ low."""
    if high[0] != low[0]:
        return high[0] < low[0]
    return high[1] or low[1]


def prune_definitions(root: Any) -> Any:
    """Drop definitions nothing refers to (the open originals of strict copies, say)."""
    defs = definitions_of(root)
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


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
