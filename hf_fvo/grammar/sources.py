"""Grammar sources: regex, JSON schema, choices and bounded Dyck, each lowered to one regex.

A :class:`GrammarSource` is the hashable description the compile cache is keyed by; building
one validates the input, so bad grammars fail here with a typed error before any compilation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hf_fvo.grammar.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    InvalidRegexError,
    UnsupportedSchemaError,
)

__all__ = [
    "GrammarSource",
    "choices_source",
    "dyck_source",
    "escape_literal",
    "json_schema_source",
    "regex_source",
]

# Characters with a meaning in Rust regex syntax outside classes. Escaping other punctuation
# is not always safe there (`\<` is a word boundary), so only these are escaped.
_META = set("\\.+*?()|[]{}^$")


@dataclass(frozen=True)
class GrammarSource:
    """What to compile: a regex plus a short human description.

    Example:
        >>> from hf_fvo.grammar.sources import choices_source
        >>> choices_source(["a.b", "c"]).regex
        '(?:a\\\\.b|c)'
    """

    kind: str
    regex: str
    description: str


def escape_literal(text: str) -> str:
    """Escape ``text`` so the regex matches it literally."""
    return "".join("\\" + c if c in _META else c for c in text)


def regex_source(pattern: str) -> GrammarSource:
    """A regex source; the pattern must be a ``str``."""
    if not isinstance(pattern, str):
        raise InvalidRegexError(f"a regex must be a str, got {type(pattern).__name__}")
    return GrammarSource("regex", pattern, f"regex {_shorten(pattern)}")


def choices_source(choices: Iterable[str]) -> GrammarSource:
    """A finite language: exactly the given strings."""
    if isinstance(choices, str):
        raise GrammarError("choices must be a list of strings, not a single str")
    items = list(dict.fromkeys(choices))
    if not items:
        raise EmptyLanguageError("choices is empty: the language has no member")
    bad = [c for c in items if not isinstance(c, str)]
    if bad:
        raise GrammarError(f"every choice must be a str; got {bad[0]!r}")
    regex = "(?:" + "|".join(escape_literal(c) for c in items) + ")"
    return GrammarSource("choices", regex, f"choices {_shorten(repr(items))}")


def dyck_source(depth: int, brackets: str = "()", max_stacks: int = 100_000) -> GrammarSource:
    """Balanced brackets of nesting depth ≤ ``depth`` (the length bound is applied later).

    The automaton has one state per bracket stack, Σ_{k≤d} m^k for m bracket pairs, so depth is
    refused where that count exceeds ``max_stacks``.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise GrammarError(f"depth must be a non-negative int, got {depth!r}")
    if not isinstance(brackets, str) or len(brackets) < 2 or len(brackets) % 2:
        raise GrammarError(f"brackets must be pairs such as '()' or '()[]', got {brackets!r}")
    if len(set(brackets)) != len(brackets):
        raise GrammarError(f"bracket characters must be distinct, got {brackets!r}")
    pairs = [(brackets[i], brackets[i + 1]) for i in range(0, len(brackets), 2)]
    stacks = sum(len(pairs) ** k for k in range(depth + 1))
    if stacks > max_stacks:
        raise GrammarTooLargeError(
            f"Dyck depth {depth} with {len(pairs)} bracket pairs has {stacks} stack states "
            f"(limit {max_stacks})"
        )
    inner = ""
    for _ in range(depth):
        inner = (
            "(?:" + "|".join(escape_literal(o) + inner + escape_literal(c) for o, c in pairs) + ")*"
        )
    return GrammarSource("dyck", inner, f"dyck depth={depth} brackets={brackets!r}")


# JSON-schema keywords outlines-core 0.2.14 turns into regex structure.
_ENFORCED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
}  # fmt: skip
# Keywords that only annotate; they constrain nothing.
_ANNOTATIONS = {
    "title", "description", "$schema", "$id", "$comment", "examples", "default",
    "deprecated", "readOnly", "writeOnly", "discriminator",
}  # fmt: skip
_FORMATS = {"date", "date-time", "time", "uuid", "uri", "email"}
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions")


def json_schema_source(schema: Any, whitespace: str | None = None) -> GrammarSource:
    """Lower a JSON schema (dict, JSON string or Pydantic model class) to a regex.

    Raises:
        UnsupportedSchemaError: invalid JSON, a keyword that would be silently ignored, or a
            structure outlines-core rejects.
    """
    from outlines_core.json_schema import build_regex_from_schema

    data = _schema_as_dict(schema)
    _check_schema(data, "#")
    if whitespace is not None and not isinstance(whitespace, str):
        raise UnsupportedSchemaError(f"whitespace must be a regex str or None, not {whitespace!r}")
    text = json.dumps(data)  # keeps property order: outlines emits properties in this order
    try:
        regex = build_regex_from_schema(text, whitespace_pattern=whitespace)
    except BaseException as exc:  # pyo3 panics are BaseException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedSchemaError(f"outlines-core cannot compile this schema: {first}") from exc
    ws = "default" if whitespace is None else repr(whitespace)
    return GrammarSource("json_schema", regex, f"json_schema {_shorten(text)} whitespace={ws}")


def _schema_as_dict(schema: Any) -> dict[str, Any]:
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise UnsupportedSchemaError(f"the schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError(
            "a JSON schema must be a dict, a JSON string or a Pydantic model class, "
            f"got {type(schema).__name__}"
        )
    return schema


def _check_schema(node: Any, path: str) -> None:
    if isinstance(node, bool):
        if node is False:
            raise UnsupportedSchemaError(f"{path}: the schema `false` admits nothing")
        return
    if not isinstance(node, dict):
        raise UnsupportedSchemaError(f"{path}: a schema must be an object, got {node!r}")
    for key, value in node.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _ENFORCED:
            raise UnsupportedSchemaError(
                f"{path}: keyword {key!r} is not enforced by the regex compiler; remove it or "
                "express the constraint with enum, pattern, minLength/maxLength or "
                "minItems/maxItems"
            )
        if key == "format" and value not in _FORMATS:
            raise UnsupportedSchemaError(
                f"{path}: format {value!r} is not supported (supported: {sorted(_FORMATS)})"
            )
        if key == "additionalProperties" and "properties" in node and not isinstance(value, bool):
            raise UnsupportedSchemaError(
                f"{path}: additionalProperties with a schema next to properties is not enforced"
            )
        if key == "required":
            missing = [r for r in value if r not in node.get("properties", {})]
            if missing:
                raise UnsupportedSchemaError(
                    f"{path}: required names {missing} that are not listed in properties"
                )
        if key == "pattern" and isinstance(value, str):
            try:
                re.compile(value)
            except re.error as exc:
                raise UnsupportedSchemaError(f"{path}: invalid pattern {value!r}: {exc}") from exc
    for key in _SCHEMA_LISTS:
        for i, sub in enumerate(node.get(key, [])):
            _check_schema(sub, f"{path}/{key}/{i}")
    for key in _SCHEMA_MAPS:
        for name, sub in node.get(key, {}).items():
            _check_schema(sub, f"{path}/{key}/{name}")
    for key in ("items", "additionalProperties"):
        sub = node.get(key)
        if isinstance(sub, dict) or (key == "items" and sub is False):
            _check_schema(sub, f"{path}/{key}")


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
