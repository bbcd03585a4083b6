"""Grammar sources: regex, JSON schema, choices and bounded Dyck, each lowered to one regex.

A :class:`GrammarSource` is the hashable description the compile cache is keyed by; building
one validates the input, so bad grammars fail here with a typed error before any compilation.
"""

from __future__ import annotations

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


def regex_source(pattern: Any) -> GrammarSource:
    """A regex source from a ``str`` (or an ``outlines.types.Regex``)."""
    if type(pattern).__name__ == "Regex" and isinstance(getattr(pattern, "pattern", None), str):
        pattern = pattern.pattern
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


def json_schema_source(
    schema: Any, whitespace: str | None = None, *, strict: bool = True
) -> GrammarSource:
    """A regular JSON schema (dict, JSON string, Pydantic model…) as one regex; see
    :mod:`hf_fvo.grammar.json_regex` for the subset lowered.

    Raises:
        UnsupportedSchemaError: an assertion that cannot be enforced exactly, or a construct
            the automaton lowering does not cover (compile those with the pushdown backend).
    """
    from hf_fvo.grammar.json_regex import schema_regex
    from hf_fvo.grammar.json_schema import prepare_json_schema

    if whitespace is not None and not isinstance(whitespace, str):
        raise UnsupportedSchemaError(f"whitespace must be a regex str or None, not {whitespace!r}")
    prepared = prepare_json_schema(schema, strict=strict)
    if prepared.schema is False:
        raise EmptyLanguageError("the schema is `false`: it admits nothing")
    regex = schema_regex(prepared.schema, "[ ]?" if whitespace is None else whitespace)
    ws = "default" if whitespace is None else repr(whitespace)
    mode = "" if strict else " strict=False"
    return GrammarSource(
        "json_schema", regex, f"json_schema {_shorten(prepared.text)} whitespace={ws}{mode}"
    )


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
