"""Objects whose keys may come in any order (``key_order="any"``).

JSON Schema does not constrain the order of an object's keys; a grammar engine writes
``properties`` in the schema's order (llguidance, XGrammar, Outlines). With ``key_order="any"``
each object of a prepared schema is rewritten so that its keys may come in any order, each at
most once, the required ones present:

- a closed object (no other keys) with at most :data:`MAX_PERMUTED` listed names is the union of
  its orders — exact, in the grammar;
- any other object lists its names as ``patternProperties`` (``^name$``: the engine admits them
  in any order) — a superset that lets a key repeat or a required one be missing, so the check
  of the finished text decides those (:class:`~.facts.Checked`).

An object whose keys are merged from several parts (``allOf`` members, an ``anyOf`` branch
beside listed properties, a ``$ref`` beside them), or with a listed name a ``patternProperties``
pattern also matches, is refused, naming it: its keys would keep an order the engine imposes.

Example:
    >>> from hf_fvo.grammar.schema.order import any_key_order
    >>> out = any_key_order({"type": "object", "properties": {"a": {}, "b": {}},
    ...                      "additionalProperties": False}, [])
    >>> [list(b["properties"]) for b in out["anyOf"]]
    [['a', 'b'], ['b', 'a']]
"""

from __future__ import annotations

import itertools
from typing import Any

from hf_fvo.errors import UnsupportedSchemaError
from hf_fvo.grammar.schema.facts import Checked, Intersect, definitions_of, resolve

__all__ = ["MAX_PERMUTED", "any_key_order"]

MAX_PERMUTED = 3  # listed names up to which a closed object is the union of its orders
_OBJECT = ("properties", "required", "patternProperties")
_SCHEMA_MAPS = ("properties", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("additionalProperties", "items")


def any_key_order(root: Any, checked: list[Checked], intersect: Intersect | None = None) -> Any:
    """``root`` (a prepared schema) with every object's keys in any order; what only the check
    decides is appended to ``checked``.

    Raises:
        UnsupportedSchemaError: an object whose keys are merged from several parts, named by
            its pointer.
    """
    defs = definitions_of(root)
    order = _Order(defs, checked, intersect)
    if not isinstance(root, dict) or not defs:
        return order.node(root, "#")
    body = order.node({k: v for k, v in root.items() if k != "$defs"}, "#")
    rewritten = {name: order.node(d, f"#/$defs/{name}") for name, d in defs.items()}
    return {**body, "$defs": rewritten}  # the definitions stay at the root, where refs point


class _Order:
    def __init__(
        self, defs: dict[str, Any], checked: list[Checked], intersect: Intersect | None
    ) -> None:
        self.defs = defs
        self.checked = checked
        self.intersect = intersect

    def node(self, node: Any, path: str) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in _SCHEMA_MAPS:
            if isinstance(out.get(key), dict):
                out[key] = {k: self.node(v, f"{path}/{key}/{k}") for k, v in out[key].items()}
        for key in _SCHEMA_LISTS:
            if isinstance(out.get(key), list):
                out[key] = [self.node(v, f"{path}/{key}/{i}") for i, v in enumerate(out[key])]
        for key in _SCHEMA_VALUES:
            if key in out:
                out[key] = self.node(out[key], f"{path}/{key}")
        if not _lists_keys(node):
            self.refuse_merged(node, path)
            return out
        out = _types_folded(out)
        self.refuse_merged(out, path)
        if any(k in out for k in ("allOf", "anyOf", "$ref")):
            raise UnsupportedSchemaError(
                f"{path}: key_order='any' is not built for an object with listed properties "
                "beside allOf, anyOf or $ref (the engine merges them in the schema's order); "
                "use key_order='schema'"
            )
        return self.unordered(out, path)

    def refuse_merged(self, node: dict[str, Any], path: str) -> None:
        parts = [m for m in node.get("allOf", []) if self.keys_within(m)]
        if "$ref" in node and len(node) > 1:
            parts += [node["$ref"]] if self.keys_within({"$ref": node["$ref"]}) else []
        own = _lists_keys(node)
        branches = [b for b in node.get("anyOf", []) if self.keys_within(b)]
        if len(parts) + own > 1 or ((own or parts) and branches):
            raise UnsupportedSchemaError(
                f"{path}: key_order='any' is not built for an object whose keys are merged from "
                "several parts (allOf, $ref or anyOf beside listed properties); use "
                "key_order='schema'"
            )

    def keys_within(self, node: Any, depth: int = 0) -> bool:
        """Whether ``node`` lists keys itself or through the parts it is made of (``allOf``
        members, ``anyOf`` branches, a ``$ref``'s target), which the engine merges."""
        node = resolve(node, self.defs)
        if not isinstance(node, dict) or depth > 32:
            return False
        if _lists_keys(node):
            return True
        parts = [*node.get("allOf", []), *node.get("anyOf", [])]
        if "$ref" in node:
            parts.append({"$ref": node["$ref"]})
        return any(self.keys_within(p, depth + 1) for p in parts)

    def unordered(self, node: dict[str, Any], path: str) -> Any:
        props = dict(node.get("properties", {}))
        required = list(node.get("required", []))
        extra = node.get("additionalProperties", True)
        for name in required:  # required names the object does not list take the extra schema
            props.setdefault(name, extra)
        names = [n for n, s in props.items() if s is not False]
        rest = {k: v for k, v in node.items() if k not in _OBJECT}
        theirs = dict(node.get("patternProperties", {}))
        if theirs and any(self.matches(p, n) for p in theirs for n in props):
            raise UnsupportedSchemaError(
                f"{path}: key_order='any' is not built for a listed property whose name a "
                "patternProperties pattern also matches; use key_order='schema'"
            )
        if extra is False and len(names) <= MAX_PERMUTED and not theirs:
            if len(names) < 2:
                return node
            return {"anyOf": [
                {**rest, "properties": {n: props[n] for n in order}, "required": required,
                 "additionalProperties": False}
                for order in itertools.permutations(names)
            ]}  # fmt: skip
        self.checked.append(Checked(path, "properties", "key_order='any': keys come in any "
                                    "order; that each appears at most once and the required "
                                    "ones appear is decided by the check"))  # fmt: skip
        patterns = {f"^{_literal(n)}$": s for n, s in props.items()}
        return {**rest, "patternProperties": {**patterns, **theirs}, "additionalProperties": extra}

    def matches(self, pattern: str, name: str) -> bool:
        """Whether ``pattern`` may match the key ``name`` (the engine's answer; without an
        oracle, yes)."""
        return self.intersect is None or self.intersect((pattern, f"^{_literal(name)}$"))


def _types_folded(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with the ``allOf`` members that only restrict the JSON type (``anyOf`` of
    ``type``s, the shape ``oneOf: [{type: object}, {type: null}]`` rewrites to) folded into its
    own ``type``."""
    members = node.get("allOf", [])
    kinds = [_type_set(m) for m in members]
    if not members or any(k is None for k in kinds):
        return node
    allowed = set.intersection(*kinds)
    if "type" in node:
        own = {node["type"]} if isinstance(node["type"], str) else set(node["type"])
        allowed &= own | ({"integer"} if "number" in own else set())
    if not allowed:
        return node
    out = {k: v for k, v in node.items() if k != "allOf"}
    names = sorted(allowed)
    out["type"] = names[0] if len(names) == 1 else names
    return out


def _type_set(node: Any) -> set[str] | None:
    """The types a schema that says nothing but ``type`` (or an ``anyOf`` of such) admits."""
    if isinstance(node, dict) and set(node) == {"type"}:
        kind = node["type"]
        names = {kind} if isinstance(kind, str) else set(kind)
        return names | ({"integer"} if "number" in names else set())
    if isinstance(node, dict) and set(node) == {"anyOf"}:
        parts = [_type_set(b) for b in node["anyOf"]]
        return None if any(p is None for p in parts) else set().union(*parts)
    return None


def _lists_keys(node: Any) -> bool:
    return isinstance(node, dict) and any(k in node for k in _OBJECT)


def _literal(name: str) -> str:
    """``name`` as a regex matching exactly it (every character but letters, digits and ``_``
    escaped as ``\\x{…}``)."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else f"\\x{{{ord(ch):x}}}"
                   for ch in name)  # fmt: skip
