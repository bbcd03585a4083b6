"""Which prepared JSON schemas have finitely many instances (a sound test, not a complete one).

Example:
    >>> from hf_fvo.grammar.schema.finite import has_finite_language
    >>> has_finite_language({"enum": ["a", "b"]}), has_finite_language({"type": "string"})
    (True, False)
"""

from __future__ import annotations

from typing import Any

from hf_fvo.grammar.schema.facts import MAX_DEPTH, is_number

__all__ = ["has_finite_language"]


def has_finite_language(schema: Any) -> bool:
    """Whether a prepared schema (:attr:`PreparedSchema.schema`) admits finitely many JSON
    values: leaves that are ``const``/``enum``/``boolean``/``null`` or integers bounded on both
    sides (the grammar writes integers canonically), closed objects and arrays with
    ``maxItems`` over them, unions of such, conjunctions with one. Sound, not complete:
    ``False`` also means "not shown" (strings and non-integer numbers count as open, and so
    does recursion through ``$ref``).

    Example:
        >>> from hf_fvo.grammar import prepare_json_schema
        >>> from hf_fvo.grammar.schema.finite import has_finite_language
        >>> status = {"type": "object", "properties": {"ok": {"type": "boolean"},
        ...           "level": {"enum": ["low", "high"]}}, "required": ["ok"]}
        >>> has_finite_language(prepare_json_schema(status).schema)
        True
        >>> has_finite_language(prepare_json_schema({"type": "string"}).schema)
        False
        >>> has_finite_language(prepare_json_schema({"type": "integer", "minimum": 0,
        ...                                          "maximum": 9}).schema)
        True
    """
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
    return _finite(schema, defs, frozenset(), 0)


def _finite(node: Any, defs: dict[str, Any], seen: frozenset[str], depth: int) -> bool:
    if node is False:
        return True
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return False
    if "const" in node or "enum" in node:
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref not in seen:
        target = defs.get(ref[len("#/$defs/") :])
        if _finite(target, defs, seen | {ref}, depth + 1):
            return True  # a conjunction with a finite part is finite
    if any(_finite(sub, defs, seen, depth + 1) for sub in node.get("allOf", [])):
        return True
    for key in ("anyOf", "oneOf"):
        if key in node and all(_finite(sub, defs, seen, depth + 1) for sub in node[key]):
            return True
    types = node.get("type")
    if types is None:
        return False
    types = [types] if isinstance(types, str) else list(types)
    return all(_finite_type(t, node, defs, seen, depth) for t in types)


def _finite_type(
    kind: str, node: dict[str, Any], defs: dict[str, Any], seen: frozenset[str], depth: int
) -> bool:
    if kind in ("null", "boolean"):
        return True
    if kind == "object":
        if node.get("additionalProperties", True) is not False or node.get("patternProperties"):
            return False
        props = node.get("properties", {})
        return all(_finite(sub, defs, seen, depth + 1) for sub in props.values())
    if kind == "array":
        most = node.get("maxItems")
        if not isinstance(most, int):
            return False
        prefix = list(node.get("prefixItems", []))[:most]
        parts = prefix + ([node.get("items", True)] if most > len(prefix) else [])
        return all(_finite(sub, defs, seen, depth + 1) for sub in parts)
    if kind == "integer":
        low = [node.get(k) for k in ("minimum", "exclusiveMinimum")]
        high = [node.get(k) for k in ("maximum", "exclusiveMaximum")]
        return any(map(is_number, low)) and any(map(is_number, high))
    return False  # numbers and strings without enum/const: unbounded
