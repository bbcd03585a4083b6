"""Grammar sources: regex, JSON schema, choices and bounded Dyck, each lowered to one regex.

A :class:`GrammarSource` is the hashable description the compile cache is keyed by; building
one validates the input, so bad grammars fail here with a typed error before any compilation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarTooLargeError,
    InvalidArgumentError,
    InvalidRegexError,
    check_int,
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
_NEST_LIMIT = 250  # regex-syntax's default nest limit (outlines-core and llguidance parse with it)


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


def regex_problem(pattern: str) -> str | None:
    """What is wrong with ``pattern`` as a Rust-syntax regex (the ``regex-syntax`` parser's own
    words, via llguidance), or ``None`` if it parses.

    Example:
        >>> from hf_fvo.grammar.sources import regex_problem
        >>> regex_problem("a(?=b)")
        'look-around, including look-ahead and look-behind, is not supported'
        >>> regex_problem("[a-z]+") is None
        True
    """
    import llguidance

    try:
        body = llguidance.regex_to_lark(pattern, "")
        message = llguidance.LLMatcher.validate_grammar(f"start: /{body}/", None)
    except Exception as exc:  # the converter raises plain exceptions
        return str(exc) or type(exc).__name__
    if not message or "error" not in message.lower():
        return None
    found = re.search(r"error: ([^\n|]*)", message)
    return (found.group(1) if found else " ".join(message.split())).strip()[:300]


def check_whitespace(whitespace: str | None) -> None:
    """Refuse a ``whitespace`` argument that is not ``None`` or a valid regex."""
    if whitespace is None:
        return
    if not isinstance(whitespace, str):
        raise InvalidArgumentError(f"whitespace must be a regex str or None, not {whitespace!r}")
    problem = regex_problem(whitespace)
    if problem:
        raise InvalidRegexError(f"whitespace={whitespace!r} is not a valid regex: {problem}")


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
    if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
        raise InvalidArgumentError(
            f"choices must be a list of strings, got {type(choices).__name__}"
        )
    items = list(choices)
    bad = [c for c in items if not isinstance(c, str)]
    if bad:
        raise InvalidArgumentError(f"every choice must be a str; got {bad[0]!r}")
    items = list(dict.fromkeys(items))
    if not items:
        raise EmptyLanguageError("choices is empty: the language has no member")
    regex = "(?:" + "|".join(escape_literal(c) for c in items) + ")"
    return GrammarSource("choices", regex, f"choices {_shorten(repr(items))}")


def dyck_source(depth: int, brackets: str = "()", max_stacks: int = 100_000) -> GrammarSource:
    """Balanced brackets of nesting depth ≤ ``depth`` (the length bound is applied later).

    The automaton has one state per bracket stack, Σ_{k≤d} m^k for m bracket pairs, so depth is
    refused where that count exceeds ``max_stacks``.
    """
    check_int("depth", depth)
    if not isinstance(brackets, str) or len(brackets) < 2 or len(brackets) % 2:
        raise InvalidArgumentError(
            f"brackets must be pairs such as '()' or '()[]', got {brackets!r}"
        )
    if len(set(brackets)) != len(brackets):
        raise InvalidArgumentError(f"bracket characters must be distinct, got {brackets!r}")
    pairs = [(brackets[i], brackets[i + 1]) for i in range(0, len(brackets), 2)]
    # each level nests a group, a repetition and a concatenation; compiling wraps two more
    if 3 * depth + 2 > _NEST_LIMIT:
        raise GrammarTooLargeError(
            f"Dyck depth {depth} nests its regex {3 * depth + 2} levels deep; the regex parser "
            f"allows {_NEST_LIMIT} (depth ≤ {(_NEST_LIMIT - 2) // 3})"
        )
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

    check_whitespace(whitespace)
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
