"""Regular JSON schemas as one regex, for the token-automaton backend.

The schema is first prepared exactly as for the pushdown backend
(:func:`~hf_fvo.grammar.schema.prepare.prepare_json_schema`), and the regex spells the very same
texts the pushdown backend accepts for it (:mod:`.lark`, hf_fvo's own lexemes) — the same
whitespace places, free strings in every spelling JSON allows, integers with a zero fraction or
an exponent where the value stays an integer, every JSON number, property names and constants in
llguidance's canonical text (``\\" \\\\ \\b \\f \\n \\r \\t`` and ``\\u00XX`` for
control characters and U+007F). The test suite compares the two backends' admissible sets state
by state.

Only the regular, finitely written part of JSON Schema is lowered: ``type``, ``enum``/``const``,
string lengths, arrays (``items``, ``prefixItems``, ``minItems``/``maxItems``), closed objects
(properties in order, ``required``), ``anyOf`` and non-recursive ``$ref``. Everything else —
``pattern``/``format`` (the regex would have to be rewritten over JSON escapes), number ranges,
open objects, ``allOf`` merges, recursion, arbitrary JSON values — is refused with
:class:`UnsupportedSchemaError` naming the keyword; compile those with the pushdown backend.

Example:
    >>> from hf_fvo.grammar.schema.regex import schema_regex
    >>> schema_regex({"type": "object", "properties": {"ok": {"type": "boolean"}},
    ...               "required": ["ok"], "additionalProperties": False}, "")
    '\\\\{"ok":(?:true|false)\\\\}'
"""

from __future__ import annotations

import json
from typing import Any

from hf_fvo.errors import UnsupportedSchemaError
from hf_fvo.grammar.schema.facts import ALL_TYPES, satisfies
from hf_fvo.grammar.schema.lark import (
    CANONICAL_INTEGER_REGEX,
    CHAR_REGEX,
    INTEGER_REGEX,
    NUMBER_REGEX,
    array_body,
    literal_regex,
)

__all__ = ["schema_regex"]

_CHAR = CHAR_REGEX  # one character of a free string, every spelling
_INTEGER = INTEGER_REGEX
_NUMBER = NUMBER_REGEX
_META = set("\\.+*?()|[]{}^$")
_HANDLED = {
    "type", "enum", "const", "minLength", "maxLength", "items", "prefixItems", "minItems",
    "maxItems", "properties", "required", "additionalProperties", "anyOf", "$ref", "$defs",
    "allOf",
}  # fmt: skip


def _escape(text: str) -> str:
    return "".join("\\" + c if c in _META else c for c in text)


def schema_regex(schema: Any, whitespace: str, *, integral_fractions: bool = True) -> str:
    """The regex of a prepared schema's JSON texts, with ``whitespace`` (a regex, matched at
    most once) at every place JSON allows it.

    Raises:
        UnsupportedSchemaError: a construct outside the lowered subset, naming it.
    """
    return _Lowering(schema, whitespace, integral_fractions).value(schema, "#", ())


class _Lowering:
    def __init__(self, root: Any, whitespace: str, integral_fractions: bool = True) -> None:
        self.integer = _INTEGER if integral_fractions else CANONICAL_INTEGER_REGEX
        self.defs = root.get("$defs", {}) if isinstance(root, dict) else {}
        self.ws = f"(?:{whitespace})?" if whitespace else ""

    def refuse(self, path: str, what: str) -> UnsupportedSchemaError:
        return UnsupportedSchemaError(
            f"{path}: {what} is not lowered to a token automaton; compile this schema with "
            "backend='pushdown'"
        )

    def value(self, node: Any, path: str, refs: tuple[str, ...]) -> str:
        if node is True or node == {}:
            raise self.refuse(path, "an arbitrary JSON value (not a regular language)")
        if node is False:
            return "[^\\s\\S]"  # matches nothing
        extra = set(node) - _HANDLED
        if extra:
            raise self.refuse(path, f"keyword {sorted(extra)[0]!r}")
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in refs:
                raise self.refuse(path, "a recursive $ref")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            target = self.defs.get(name, True)
            if rest:
                raise self.refuse(path, "$ref next to other keywords")
            return self.value(target, f"#/$defs/{name}", (*refs, name))
        members = [m for m in node.get("allOf", []) if m is not True and m != {}]
        if members:
            if len(members) > 1 or len(node) > 1:
                raise self.refuse(path, "allOf (an intersection)")
            return self.value(members[0], f"{path}/allOf/0", refs)
        if "anyOf" in node:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if rest:
                raise self.refuse(path, "anyOf next to other keywords")
            parts = [self.value(m, f"{path}/anyOf/{i}", refs) for i, m in enumerate(node["anyOf"])]
            return "(?:" + "|".join(parts) + ")"
        if "enum" in node or "const" in node:
            return self.literals(node, path)
        kind = node.get("type", list(ALL_TYPES))
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if "number" in kinds and "integer" in kinds:
            kinds.remove("integer")
        parts = [self.typed(t, node, path, refs) for t in kinds]
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"

    def literals(self, node: dict[str, Any], path: str) -> str:
        values = [node["const"]] if "const" in node else list(node["enum"])
        rest = {k: v for k, v in node.items() if k not in ("enum", "const")}
        if rest:
            values = [v for v in values if satisfies(v, rest, self.defs)]
        if not values:
            return "[^\\s\\S]"
        return "(?:" + "|".join(self.literal(v, path) for v in values) + ")"

    def literal(self, value: Any, path: str) -> str:
        if isinstance(value, (dict, list)) and self.ws:
            raise self.refuse(path, "an object or array constant with whitespace")
        return literal_regex(value)

    def typed(self, kind: str, node: dict[str, Any], path: str, refs: tuple[str, ...]) -> str:
        if kind == "null":
            return "null"
        if kind == "boolean":
            return "(?:true|false)"
        if kind == "integer":
            return self.integer
        if kind == "number":
            return _NUMBER
        if kind == "string":
            low, high = node.get("minLength", 0), node.get("maxLength")
            bound = f"{{{low},}}" if high is None else f"{{{low},{high}}}"
            return f'"{_CHAR}{bound if (low, high) != (0, None) else "*"}"'
        if kind == "array":
            return self.array(node, path, refs)
        return self.object(node, path, refs)

    def array(self, node: dict[str, Any], path: str, refs: tuple[str, ...]) -> str:
        ws = self.ws
        prefix = [
            self.value(p, f"{path}/prefixItems/{i}", refs)
            for i, p in enumerate(node.get("prefixItems", []))
        ]
        items = node.get("items", True)
        low, high = node.get("minItems", 0), node.get("maxItems")
        more = None if items is False else self.value(items, f"{path}/items", refs)
        if more is None:
            high = len(prefix) if high is None else min(high, len(prefix))
        sep = f"{ws},{ws}"
        body = array_body(prefix, more, low, high, sep, lambda *parts: "".join(parts),
                          lambda x: f"(?:{x})?", self.repeat)  # fmt: skip
        if not body:
            return f"\\[{ws}\\]"
        # an empty array has one whitespace place, not two
        return f"\\[{ws}{body}{ws}\\]" if low > 0 else f"\\[{ws}(?:{body}{ws})?\\]"

    @staticmethod
    def repeat(item: str, sep: str, low: int, high: int | None, leading: bool) -> str:
        """``low``..``high`` items joined by ``sep`` (preceded by ``sep`` when ``leading``)."""
        if high is not None and high == 0:
            return ""
        first = (sep if leading else "") + item
        rest_low, rest_high = max(low - 1, 0), None if high is None else high - 1
        bound = "*" if (rest_low, rest_high) == (0, None) else (
            f"{{{rest_low},}}" if rest_high is None else f"{{{rest_low},{rest_high}}}"
        )  # fmt: skip
        whole = f"{first}(?:{sep}{item}){bound}"
        return whole if low > 0 else f"(?:{whole})?"

    def object(self, node: dict[str, Any], path: str, refs: tuple[str, ...]) -> str:
        ws = self.ws
        props = node.get("properties", {})
        if node.get("additionalProperties", True) is not False:
            raise self.refuse(path, "an object admitting extra keys")
        required = set(node.get("required", []))
        missing = required - {k for k, v in props.items() if v is not False}
        if missing:
            return "[^\\s\\S]"
        members = []
        for name, sub in props.items():
            if sub is False:
                continue
            key = _escape(json.dumps(name, ensure_ascii=False))
            value = self.value(sub, f"{path}/properties/{name}", refs)
            members.append((f"{key}{ws}:{ws}{value}", name in required))
        sep = f"{ws},{ws}"
        # first[i]: members i.. with none written yet; later[i]: with some written already
        first, later = "", ""  # first: at least one member, none written yet
        for text, needed in reversed(members):
            with_first = f"{text}{later}"
            if needed:
                first, later = with_first, f"{sep}{text}{later}"
            else:
                first = f"(?:{with_first}|{first})" if first else with_first
                later = f"(?:{sep}{text})?{later}"
        if not first:
            return f"\\{{{ws}\\}}"
        if required:
            return f"\\{{{ws}{first}{ws}\\}}"
        return f"\\{{{ws}(?:{first}{ws})?\\}}"  # an empty object has one whitespace place
