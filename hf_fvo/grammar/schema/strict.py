"""The strict-object convention (Outlines, XGrammar): an object schema that lists properties
admits no other keys unless it says so. :func:`apply_strict` adds ``additionalProperties: false``
to each object alternative, keeping the names its conjunctive parts declare.

Example:
    >>> from hf_fvo.grammar.schema.strict import apply_strict
    >>> apply_strict({"type": "object", "properties": {"a": {"type": "integer"}}})
    {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'additionalProperties': False}
"""

from __future__ import annotations

import copy
from typing import Any

from hf_fvo.grammar.schema.facts import definitions_of, prune_definitions, ref_target

__all__ = ["apply_strict"]

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
        self.defs = definitions_of(root)
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
            target = ref_target(node, self.defs)
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
        >>> from hf_fvo.grammar.schema.strict import apply_strict
        >>> apply_strict({"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})
        {'anyOf': [{'properties': {'a': {}}, 'additionalProperties': False},
                   {'properties': {'b': {}}, 'additionalProperties': False}]}
    """
    return prune_definitions(_Strict(root).run())
