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

An object whose keys are merged from several parts (``allOf`` members, ``anyOf`` branches beside
listed properties, a ``$ref`` beside them) is merged here first — the engine would merge them in
the schema's order: each way of choosing the ``anyOf`` branches becomes one object whose names
carry the ``allOf`` of what every part says of them (a part's ``additionalProperties`` for a name
it does not list), up to :data:`MAX_MERGED` ways; beyond that, or where two parts both have
``patternProperties``, the masks keep the object's own listing (a superset) and the check decides
what the other parts say of its keys. A listed name that a ``patternProperties`` pattern also
matches is left to that pattern in the masks (its own schema to the check).

A ``const`` or ``enum`` value that holds an object of two or more keys (at any depth) is equal to
the same object in any key order (the spec compares objects as sets of members): each such value
becomes its shape — an object whose listed names take their values' shapes, all required, no
other key; an array whose ``prefixItems`` are its items' shapes — which the rules above then
unorder, so a small object is the union of its orders and a larger one is left to the check.

Example:
    >>> from hf_fvo.grammar.schema.order import any_key_order
    >>> out = any_key_order({"type": "object", "properties": {"a": {}, "b": {}},
    ...                      "additionalProperties": False}, [])
    >>> [list(b["properties"]) for b in out["anyOf"]]
    [['a', 'b'], ['b', 'a']]
    >>> out = any_key_order({"const": {"a": 1, "b": [2]}}, [])
    >>> [list(b["properties"]) for b in out["anyOf"]], out["anyOf"][1]["properties"]["a"]
    ([['a', 'b'], ['b', 'a']], {'const': 1})
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hf_fvo.grammar.schema.facts import (
    Checked,
    Intersect,
    all_of,
    definitions_of,
    resolve,
    satisfies,
    widen,
)

__all__ = ["MAX_MERGED", "MAX_PERMUTED", "any_key_order", "merged_objects"]

MAX_PERMUTED = 3  # listed names up to which a closed object is the union of its orders
MAX_MERGED = 16  # ways of choosing anyOf branches up to which merged parts stay in the masks
_OBJECT = ("properties", "required", "patternProperties")
_MERGED = (*_OBJECT, "additionalProperties", "allOf", "anyOf", "$ref", "$defs")
_SCHEMA_MAPS = ("properties", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("additionalProperties", "items")


def any_key_order(root: Any, checked: list[Checked], intersect: Intersect | None = None) -> Any:
    """``root`` (a prepared schema) with every object's keys in any order; what only the check
    decides is appended to ``checked``."""
    defs = definitions_of(root)
    order = _Order(defs, checked, intersect)
    if not isinstance(root, dict) or not defs:
        return order.node(root, "#")
    body = order.node({k: v for k, v in root.items() if k != "$defs"}, "#")
    rewritten = {name: order.node(d, f"#/$defs/{name}") for name, d in defs.items()}
    return {**body, "$defs": rewritten}  # the definitions stay at the root, where refs point


def merged_objects(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The ways ``node``'s object parts (``allOf`` members, a ``$ref`` beside its keys, ``anyOf``
    branches that list keys) merge into one object: per choice of branches, the names in the
    order the parts list them, each with the ``allOf`` of what every part says of it, and what
    the parts say besides as ``allOf``; ``None`` beyond :data:`MAX_MERGED` ways or where two
    parts have ``patternProperties``.

    Example:
        >>> from hf_fvo.grammar.schema.order import merged_objects
        >>> merged_objects({"allOf": [{"properties": {"a": {}}}, {"required": ["a"]}]}, {})
        [{'properties': {'a': True}, 'required': ['a']}]
    """
    ways = _Order(defs, [], None).flat(node, frozenset())
    return None if ways is None else [way.schema() for way in ways]


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
        if any(_ordered_value(v) for v in _listed_values(node)):
            node = self.shaped(node)
            if not isinstance(node, dict):
                return node
        node = _types_folded(node)
        if self.merges(node):
            return self.merged(node, path)
        out = self.children(node, path)
        return self.unordered(out, path) if _lists_keys(out) else out

    def shaped(self, node: dict[str, Any]) -> Any:
        """A ``const``/``enum`` node whose values hold objects, as the ``anyOf`` of its values'
        shapes (:func:`_shape`): the values the node's other keywords reject dropped, as the
        lowering drops them, the ones without such an object kept as one ``enum``."""
        listed = "const" if "const" in node else "enum"  # (an enum beside a const: a rest)
        rest = {k: v for k, v in node.items() if k != listed}
        values = [v for v in _listed_values(node)
                  if not rest or satisfies(v, rest, self.defs)]  # fmt: skip
        plain = [v for v in values if not _ordered_value(v)]
        forms = [_shape(v) for v in values if _ordered_value(v)]
        if plain:
            forms.append({"enum": plain})
        if not forms:
            return False
        return forms[0] if len(forms) == 1 else {"anyOf": forms}

    def children(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``node`` with every subschema rewritten."""
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
        return out

    def merges(self, node: dict[str, Any]) -> bool:
        """Whether the engine would merge keys from several parts of ``node``."""
        parts = [m for m in node.get("allOf", []) if self.keys_within(m)]
        if "$ref" in node and len(node) > 1 and self.keys_within({"$ref": node["$ref"]}):
            parts.append(node["$ref"])
        branches = any(self.keys_within(b) for b in node.get("anyOf", []))
        own = _lists_keys(node)
        return len(parts) + own > 1 or bool((own or parts) and branches)

    def merged(self, node: dict[str, Any], path: str) -> Any:
        """An object merged from several parts, as the union of its merged forms (each with
        keys in any order), or its own listing with the check deciding the rest."""
        ways = self.flat(node, frozenset())
        if ways is None or len(ways) > MAX_MERGED:
            self.checked.append(Checked(path, "allOf", "key_order='any': what the parts merged "
                                        "into this object say of its keys is decided by the "
                                        "check"))  # fmt: skip
            return self.node(self.loose(node), path)
        forms = [self.node(way.schema(), path) for way in ways]
        return forms[0] if len(forms) == 1 else {"anyOf": forms}

    def flat(self, node: Any, seen: frozenset[str]) -> list[_Flat] | None:
        """The ways ``node`` may be as one object (its ``anyOf`` branches chosen, its ``allOf``
        members and ``$ref`` merged), or ``None`` where that is not built here."""
        if node is True or node is False or not isinstance(node, dict):
            return [_Flat(rest=[] if node is True else [node])]
        if "$ref" in node and len(node) == 1:
            if node["$ref"] in seen:
                return None  # a recursive merge
            target = resolve(node, self.defs)
            return self.flat(target, seen | {node["$ref"]})
        rest = {k: v for k, v in node.items() if k not in _MERGED}
        parts: list[Any] = [rest] if rest else []
        members = list(node.get("allOf", []))
        if "$ref" in node:
            members.append({"$ref": node["$ref"]})
        parts += [m for m in members if not self.keys_within(m)]
        branches = node.get("anyOf", [])
        keyed_branches = any(self.keys_within(b) for b in branches)
        if branches and not keyed_branches:
            parts.append({"anyOf": branches})
        own = _Flat(dict(node.get("properties", {})), dict(node.get("patternProperties", {})),
                    node.get("additionalProperties", True), list(node.get("required", [])),
                    parts)  # fmt: skip
        ways: list[_Flat] | None = [own]
        for member in members:
            if self.keys_within(member):
                ways = self.meet(ways, self.flat(member, seen))
        if keyed_branches:
            choices: list[_Flat] = []
            for branch in branches:
                way = self.flat(branch, seen)
                if way is None:
                    return None
                choices += way
            ways = self.meet(ways, choices)
        return ways

    def meet(self, ways: list[_Flat] | None, others: list[_Flat] | None) -> list[_Flat] | None:
        if ways is None or others is None or len(ways) * len(others) > MAX_MERGED:
            return None
        met = [a.meet(b, self.matches) for a in ways for b in others]
        return None if any(m is None for m in met) else met  # type: ignore[return-value]

    def loose(self, node: dict[str, Any]) -> dict[str, Any]:
        """``node`` without the parts whose keys it would merge: its own listing, or its first
        keyed ``allOf`` member (a superset of the merge)."""
        out = {k: v for k, v in node.items() if k not in ("allOf", "anyOf", "$ref")}
        keyed = [m for m in node.get("allOf", []) if self.keys_within(m)]
        keep = [m for m in node.get("allOf", []) if not self.keys_within(m)]
        if not _lists_keys(node) and keyed:
            keep.append(keyed[0])
        if keep:
            out["allOf"] = keep
        branches = node.get("anyOf", [])
        if branches and not any(self.keys_within(b) for b in branches):
            out["anyOf"] = branches
        if "$ref" in node and not self.keys_within({"$ref": node["$ref"]}):
            out["$ref"] = node["$ref"]
        return out

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
        # a listed name a pattern also matches is left to the pattern (its schema to the check)
        patterns = {f"^{_literal(n)}$": s for n, s in props.items()
                    if not any(self.matches(p, n) for p in theirs)}  # fmt: skip
        return {**rest, "patternProperties": {**patterns, **theirs}, "additionalProperties": extra}

    def matches(self, pattern: str, name: str) -> bool:
        """Whether ``pattern`` may match the key ``name`` (the engine's answer; without an
        oracle, yes)."""
        return self.intersect is None or self.intersect((pattern, f"^{_literal(name)}$"))


@dataclass
class _Flat:
    """One way an object merged from parts may be: its listed names, patterns, the schema of
    other keys, the required names, and what the parts say besides (kept as ``allOf``)."""

    props: dict[str, Any] = field(default_factory=dict)
    patterns: dict[str, Any] = field(default_factory=dict)
    extra: Any = True
    required: list[str] = field(default_factory=list)
    rest: list[Any] = field(default_factory=list)

    def value(self, name: str, matches: Any) -> Any:
        """What this part says of the key ``name``."""
        hits = [s for p, s in self.patterns.items() if matches(p, name)]
        if name in self.props:
            return all_of([self.props[name], *hits])
        return all_of(hits) if hits else self.extra

    def meet(self, other: _Flat, matches: Any) -> _Flat | None:
        if self.patterns and other.patterns:
            return None  # keys matching a pattern of one part and not the other: not built
        names = dict.fromkeys([*self.props, *other.props])
        return _Flat(
            {n: all_of([self.value(n, matches), other.value(n, matches)]) for n in names},
            {**{p: all_of([s, other.extra]) for p, s in self.patterns.items()},
             **{p: all_of([s, self.extra]) for p, s in other.patterns.items()}},
            all_of([self.extra, other.extra]),
            list(dict.fromkeys([*self.required, *other.required])),
            [*self.rest, *other.rest],
        )  # fmt: skip

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.rest:
            out["allOf"] = self.rest
        if self.props:
            out["properties"] = self.props
        if self.patterns:
            out["patternProperties"] = self.patterns
        if self.required:
            out["required"] = self.required
        if self.extra is not True:
            out["additionalProperties"] = self.extra
        return out


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
        allowed &= widen({node["type"]} if isinstance(node["type"], str) else set(node["type"]))
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
        return widen({kind} if isinstance(kind, str) else set(kind))
    if isinstance(node, dict) and set(node) == {"anyOf"}:
        parts = [_type_set(b) for b in node["anyOf"]]
        return None if any(p is None for p in parts) else set().union(*parts)
    return None


def _listed_values(node: dict[str, Any]) -> list[Any]:
    """The values a ``const``/``enum`` node lists (none where it lists neither)."""
    if "const" in node:
        return [node["const"]]
    return list(node["enum"]) if isinstance(node.get("enum"), list) else []


def _ordered_value(value: Any) -> bool:
    """Whether the JSON text of ``value`` fixes an order among keys: an object of two or more
    keys within it."""
    if isinstance(value, dict):
        return len(value) > 1 or any(_ordered_value(v) for v in value.values())
    return isinstance(value, list) and any(_ordered_value(v) for v in value)


def _shape(value: Any) -> Any:
    """The schema whose only instance is ``value``, objects read as key sets: an object lists
    its names (each with its value's shape), all required, no other key; an array its items'
    shapes as ``prefixItems``, no other item; a value that fixes no key order stays ``const``."""
    if isinstance(value, dict) and _ordered_value(value):
        return {"type": "object", "properties": {k: _shape(v) for k, v in value.items()},
                "required": list(value), "additionalProperties": False}  # fmt: skip
    if isinstance(value, list) and _ordered_value(value):
        return {"type": "array", "prefixItems": [_shape(v) for v in value], "items": False,
                "minItems": len(value)}  # fmt: skip
    return {"const": value}


def _lists_keys(node: Any) -> bool:
    return isinstance(node, dict) and any(k in node for k in _OBJECT)


def _literal(name: str) -> str:
    """``name`` as a regex matching exactly it (every character but letters, digits and ``_``
    escaped as ``\\x{…}``)."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else f"\\x{{{ord(ch):x}}}"
                   for ch in name)  # fmt: skip
