"""Boolean structure of JSON Schema, rewritten exactly into what a grammar engine enforces.

``not``, ``if``/``then``/``else``, dependencies, exclusive ``oneOf``, ``propertyNames``,
``uniqueItems`` and property counts become ``anyOf``/``allOf`` of schemas the engine enforces,
through the exact complements of :mod:`hf_fvo.grammar.schema.negation`; whatever has no exact
form is refused with :class:`~hf_fvo.errors.UnsupportedSchemaError` naming the keyword.

Questions about regex patterns (do these patterns share a string?) are answered by the
``intersect`` oracle the caller passes (the grammar compiler passes the pushdown engine's);
without one the rewrite assumes they may, which is sound but refuses or keeps more.

Example:
    >>> from hf_fvo.grammar.schema.rewrite import rewrite_logic
    >>> rewrite_logic({"oneOf": [{"type": "string"}, {"type": "null"}]})
    {'anyOf': [{'type': 'string'}, {'type': 'null'}]}
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from typing import Any

from hf_fvo.errors import UnsupportedSchemaError
from hf_fvo.grammar.schema.disjoint import disjoint
from hf_fvo.grammar.schema.facts import (
    ALL_TYPES,
    CHECKED,
    Checked,
    Intersect,
    all_of,
    any_of,
    declared_types,
    definitions_of,
    json_key,
    on_kind,
    property_schema,
    prune_definitions,
    resolve,
    satisfies,
    types_except,
    types_of,
    value_set,
    widen,
)
from hf_fvo.grammar.schema.negation import literals_complement, negate

__all__ = ["rewrite_logic"]

_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_MAX_ALTERNATIVES = 512
_MAX_UNIQUE_SEQUENCES = 4096
_MAX_COMBINATIONS = 64
# patterns every key matches (unanchored search; "^.*$" is not one: "." stops at a newline)
_UNIVERSAL = {"", ".*", "^.*", ".*$", "(.*)"}


# -- rewriting -------------------------------------------------------------------------------


class _Logic:
    """Rewrites logic keywords bottom-up. Complements are computed from the cleaned schemas as
    written (``raw_defs``, the operands before their own rewrite: ``not: {enum: …}`` is still an
    ``enum`` there, not the pattern it becomes) and then rewritten themselves."""

    def __init__(
        self, root: Any, intersect: Intersect | None, checked: list[Checked] | None = None
    ) -> None:
        self.root = root
        self.patterns_intersect = intersect
        self.checked = checked  # None: refuse what has no exact form
        self.decimal_multiples = True  # False: a fractional multipleOf is left to the check
        self.complements = True  # False: not, if and overlapping oneOf are left to the check
        self.defs = definitions_of(root)
        self.raw_defs = copy.deepcopy(self.defs)

    def disjoint(self, a: Any, b: Any, defs: dict[str, Any] | None = None) -> bool:
        return disjoint(
            a, b, self.defs if defs is None else defs, intersect=self.patterns_intersect
        )

    def relax(self, path: str, keyword: str, why: str) -> None:
        """Leave ``keyword`` at ``path`` to the final check (the caller builds a superset
        there), or refuse it, naming it."""
        if self.checked is None:
            raise UnsupportedSchemaError(f"{path}: {why}")
        if not self.complements and keyword in ("not", "if", "oneOf"):
            why = "left to the check: with complements the engine's grammar is too large"
        self.checked.append(Checked(path, keyword, why))

    def negate(
        self, node: Any, context: Any = None, defs: dict[str, Any] | None = None
    ) -> list[Any] | None:
        if not self.complements:
            return None
        defs = self.defs if defs is None else defs
        return negate(node, defs, context, intersect=self.patterns_intersect)

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
        node.pop(CHECKED, None)  # listed by the cleaner: from here on a superset
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
            negs = self.negate(raw["not"], _context(raw), self.raw_defs)
            if negs is None:  # relaxed: no constraint from "not" in the masks
                self.relax(
                    f"{path}/not",
                    "not",
                    "its complement cannot be built exactly (it "
                    "negates a pattern, multipleOf, items, uniqueItems or an open object)",
                )
            else:
                conj.append(self.node(any_of(negs), f"{path}/not"))
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
            present = all_of([{"required": [name]}, dep])
            conj.append({"anyOf": [{"properties": {name: False}}, present]})
        if "propertyNames" in node:
            node = self.property_names(node, path)
        if "uniqueItems" in node:
            node = self.unique_items(node, path)
        if "contains" in node:  # relaxed: any items
            for key in ("contains", "minContains", "maxContains"):
                node.pop(key, None)
            self.relax(
                f"{path}/contains",
                "contains",
                "counting the items that match a schema is not expressed in the grammar",
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
        if len(node.get("patternProperties", ())) > 1:
            node = self.overlapping_patterns(node, path)
        multiple = node.get("multipleOf")
        if not self.decimal_multiples and multiple is not None and multiple != int(multiple):
            node.pop("multipleOf")
            self.relax(f"{path}/multipleOf", "multipleOf", f"multipleOf {multiple} has more "
                       "digits than the engine's number grammar represents")  # fmt: skip
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
        kinds = types_of({k: v for k, v in node.items() if k != "allOf"}, self.defs)
        for member in node["allOf"]:
            if not _is_logic(member):
                kinds &= types_of(member, self.defs)
        if not kinds or kinds == set(ALL_TYPES):
            return node
        kept = [  # only members that did not supply the restriction may go
            m for m in node["allOf"]
            if not (_is_logic(m) and all(on_kind(m, k, self.defs) == "all" for k in kinds))
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
        oracle = self.patterns_intersect
        if len(patterns) < 2 or oracle is None or oracle(tuple(patterns)):
            return node
        kinds = [t for t in ALL_TYPES if t != "string"]
        if "type" in node:
            named = {node["type"]} if isinstance(node["type"], str) else set(node["type"])
            kinds = [t for t in [*ALL_TYPES, "integer"] if t in named and t != "string"]
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
                    types_except({"object"}),
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
        expanded = any_of([_merged(c) for c in combos])
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
                    if any(self.disjoint(all_of([*given, part]) if given else part, branch)
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
        schemas = [
            p for p in (property_schema(part, name, self.defs) for part in parts) if p is not None
        ]
        values = value_set(all_of(schemas), self.defs) if schemas else None
        if values is None:
            return True
        return any(all(satisfies(v, sch, self.defs) for sch in schemas) for v in values)

    def reduce(self, combo: list[Any], given: list[Any]) -> list[Any]:
        """Drop the parts of a combination the other parts imply."""
        kept = list(combo)
        for part in combo:
            others = [*given, *(p for p in kept if p is not part)]
            if others and self.negate(part, all_of(others)) == []:
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

    def overlapping_patterns(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``patternProperties`` whose patterns may match one key (the engine refuses them): a
        key matching some pattern takes a value of some matching pattern's schema — one union
        pattern whose schema is the union — and the check asks for all of them."""
        patterns = node["patternProperties"]
        oracle = self.patterns_intersect
        if oracle is not None and not any(
            oracle((a, b)) for a, b in itertools.combinations(patterns, 2)
        ):
            return node
        self.relax(f"{path}/patternProperties", "patternProperties", "a key may match several "
                   "patterns, and must then satisfy every matching pattern's schema")  # fmt: skip
        union = "|".join(f"(?:{p})" for p in patterns)
        return {**node, "patternProperties": {union: any_of(list(patterns.values()))}}

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
        others = literals_complement(sorted(props))
        return {**node, "properties": props, "patternProperties": {others: rule}}

    def intersect(self, a: Any, b: Any) -> Any:
        """``a`` ∧ ``b``, as one of them where it contains the other."""
        if b is True or a is False or a == b:
            return a
        if a is True or b is False:
            return b
        if self.disjoint(a, b):
            return False
        if self.negate(b, a) == []:
            return a
        if self.negate(a, b) == []:
            return b
        return {"allOf": [a, b]}

    def shared_patterns(self, node: dict[str, Any]) -> dict[str, Any]:
        """A listed property whose name also matches a ``patternProperties`` pattern must satisfy
        both schemas. Where the listed schema adds nothing (``true``, or the pattern's own
        schema), let the pattern alone constrain it: drop an optional property (the pattern
        admits the key, now in any position among the pattern keys) or list a required one as
        ``true``. The engine would otherwise intersect a schema with itself, which it cannot do
        for a recursive one."""
        if self.patterns_intersect is None:  # no oracle: whether a name matches is not known
            return node
        required = set(node.get("required", []))
        props = dict(node["properties"])
        for name, sub in list(props.items()):
            if sub is False:
                continue
            for pattern, theirs in node["patternProperties"].items():
                if (sub is True or theirs == sub) and self.patterns_intersect(
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
            if declared_types(branch, self.defs) <= widen(names):
                branches.append(branch)
            elif isinstance(branch, dict) and "$ref" not in branch and "type" not in branch:
                branches.append({**branch, "type": node["type"]})
            else:
                return node
        return {"anyOf": branches}

    def conditional(self, node: dict[str, Any], raw: dict[str, Any], path: str) -> Any:
        condition = node.pop("if")
        then, otherwise = node.pop("then", True), node.pop("else", True)
        negs = self.negate(raw["if"], _context(raw), self.raw_defs)
        if negs is None:  # relaxed: (if ∧ then) ∨ else ⊇ (if ∧ then) ∨ (¬if ∧ else)
            self.relax(f"{path}/if", "if", "the schemas failing 'if' cannot be described "
                       "exactly, so else cannot be applied")  # fmt: skip
            negs = [True]
        failing = self.node(any_of(negs), f"{path}/if")
        return any_of(
            [p for p in (all_of([condition, then]), all_of([failing, otherwise])) if p is not False]
        )

    def one_of(self, branches: list[Any], raw: list[Any], path: str) -> Any:
        """Exactly one branch: each branch conjoined with the complement of every branch it
        may overlap (complements from the branches as written, ``raw``)."""
        parts = []
        for i, bi in enumerate(branches):
            complements = []
            for j, bj in enumerate(raw):
                if i == j or self.disjoint(raw[i], bj, self.raw_defs):
                    continue
                negs = self.negate(bj, raw[i], self.raw_defs)
                if negs is None:  # relaxed: branch i without branch j's complement
                    self.relax(f"{path}/oneOf", "oneOf", f"branches {i} and {j} may both match "
                               f"and the instances failing branch {j} cannot be described "
                               "exactly")  # fmt: skip
                    continue
                complements.append(negs)
            excluded = self.node(
                _conjunction_of_unions(_absorbed(complements)), f"{path}/oneOf/{i}"
            )
            part = all_of([bi, excluded])
            if part is not False:
                parts.append(part)
        if len(parts) > _MAX_ALTERNATIVES:
            self.relax(f"{path}/oneOf", "oneOf", "too many exclusive alternatives")
            return any_of(branches)
        return any_of(parts)

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
            conj.append(any_of(branches))
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
                conj.append(any_of(branches))
        if sum(len(c["anyOf"]) if isinstance(c, dict) and "anyOf" in c else 1 for c in conj) > (
            _MAX_ALTERNATIVES
        ):
            self.relax(path, "minProperties", f"minProperties/maxProperties over {k} optional "
                       "properties need too many alternatives")  # fmt: skip
            return []
        return conj

    def property_names(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``propertyNames`` over a finite name set (``enum``/``const``) or a bare pattern."""
        spec = resolve(node.pop("propertyNames"), self.defs)
        if spec is True or spec == {} or spec == {"type": "string"}:
            return node
        where = f"{path}/propertyNames"
        values = value_set(spec, self.defs) if isinstance(spec, dict) else None
        extra = node.get("additionalProperties", True)
        if spec is False:
            return {**node, "maxProperties": 0}
        if node.get("patternProperties"):
            self.relax(where, "propertyNames", "not expressed next to patternProperties")
            return node
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
        self.relax(where, "propertyNames", "only a finite set of names (enum/const) or a single "
                   "pattern is expressed in the grammar")  # fmt: skip
        return node

    def unique_items(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """``uniqueItems`` where it is trivial (at most one item) or the items are finitely many
        values (then every repetition-free sequence is listed)."""
        node = dict(node)
        node.pop("uniqueItems")
        if node.get("maxItems", 2) <= 1:
            return node
        items = node.get("items", True)
        values = value_set(items, self.defs)
        if values is None and isinstance(resolve(items, self.defs), dict):
            kinds = types_of(items, self.defs)
            if kinds == {"boolean"}:
                values = [True, False]
            elif kinds == {"null"}:
                values = [None]
        if values is None or node.get("prefixItems"):
            self.relax(f"{path}/uniqueItems", "uniqueItems", "uniqueness over items that are not "
                       "finitely many constants is not context-free in general")  # fmt: skip
            return node
        distinct = list({json_key(v): v for v in values}.values())
        low, high = node.pop("minItems", 0), node.pop("maxItems", len(distinct))
        lengths = range(low, min(high, len(distinct)) + 1)
        count = sum(math.perm(len(distinct), k) for k in lengths)  # before listing any
        if count > _MAX_UNIQUE_SEQUENCES:
            self.relax(f"{path}/uniqueItems", "uniqueItems",
                       f"{count} repetition-free sequences; too many to list")  # fmt: skip
            return {**node, "minItems": low, "maxItems": min(high, len(distinct))}
        sequences = [
            {"prefixItems": [{"const": v} for v in seq], "items": False, "minItems": len(seq)}
            for k in lengths
            for seq in itertools.permutations(distinct, k)
        ]
        node.setdefault("allOf", []).append({"anyOf": [types_except({"array"}), *sequences]})
        return node


def _absorbed(unions: list[list[Any]]) -> list[list[Any]]:
    """The same conjunction of unions without repeats, and without any union whose parts include
    another's (U₁ ⊆ U₂ makes U₁ ∩ U₂ = U₁): n overlapping ``oneOf`` branches give n − 1
    complements each, mostly alike, which the engine would otherwise multiply out."""
    keyed = {tuple(sorted({json_key(p) for p in u})): u for u in unions}
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
    keys = [{json_key(p) for p in u} for u in unions]
    shared = set.intersection(*keys)
    common = [p for p in unions[0] if json_key(p) in shared]
    rests = [[p for p in u if json_key(p) not in shared] for u in unions]
    remainder = False if any(not r for r in rests) else all_of([any_of(r) for r in rests])
    return any_of([*common, *([remainder] if remainder is not False else [])])


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
                both = (here & widen(names)) | (names & widen(here))
                if not both:
                    return False
                names = both
            merged["type"] = sorted(names)[0] if len(names) == 1 else sorted(names)
        if "required" in part:
            merged["required"] = list(dict.fromkeys([*merged.get("required", []),
                                                     *part["required"]]))  # fmt: skip
        for name, sub in part.get("properties", {}).items():
            props = merged.setdefault("properties", {})
            props[name] = all_of([props[name], sub]) if name in props else sub
    return all_of([merged, *others] if merged else others)


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
    members = list({json_key(m): m for m in members}.values())  # X ∧ X = X
    rest = {k: v for k, v in node.items() if k != "allOf"}
    if not members:
        return rest
    if not rest and len(members) == 1:
        return members[0]
    return {**rest, "allOf": members}


def rewrite_logic(
    root: Any,
    intersect: Intersect | None = None,
    checked: list[Checked] | None = None,
    *,
    decimal_multiples: bool = True,
    complements: bool = True,
) -> Any:
    """Replace ``not``, ``if``/``then``/``else``, dependencies, ``oneOf``, ``propertyNames`` and
    ``uniqueItems`` by exactly equivalent ``anyOf``/``allOf`` structure, or refuse — or, given
    a ``checked`` list, relax what has no exact form to a superset and list it there.

    Args:
        root: A cleaned schema (every ``$ref`` points into its ``$defs``).
        intersect: The oracle for pattern questions (see :data:`~.facts.Intersect`).
        checked: Where relaxed constraints are listed (``None``: refuse them).
        decimal_multiples: ``False`` leaves every fractional ``multipleOf`` to the check.
        complements: ``False`` (with ``checked``) builds no complement: ``not``, the ``else``
            side of ``if`` and overlapping ``oneOf`` branches are left to the check (for an
            engine whose grammar would otherwise be too large).

    Example:
        >>> from hf_fvo.grammar.schema.rewrite import rewrite_logic
        >>> rewrite_logic({"oneOf": [{"type": "string"}, {"type": "null"}]})
        {'anyOf': [{'type': 'string'}, {'type': 'null'}]}
    """
    if isinstance(root, dict):
        root = dict(root)
        if "$defs" in root:
            root["$defs"] = dict(root["$defs"])
    logic = _Logic(root, intersect, checked)
    logic.decimal_multiples = decimal_multiples
    logic.complements = complements
    return _inline_booleans(logic.run())


def _inline_booleans(root: Any) -> Any:
    """References to ``true``/``false`` definitions replaced by the boolean itself (the engine
    refuses a schema that reaches ``false`` through a reference even where ``false`` only means
    "this property is absent")."""
    defs = definitions_of(root)
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

    return prune_definitions(visit(root))
