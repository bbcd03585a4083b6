"""Grammar sources for the automaton backend: regexes, choices and bounded Dyck languages, each
lowered to one regex (JSON schemas are lowered by :func:`hf_fvo.grammar.schema.schema_regex`).

A :class:`GrammarSource` is the hashable description the compile cache is keyed by; building
one validates the input, so bad grammars fail here with a typed error before any compilation.
"""

from __future__ import annotations

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
    "regex_source",
    "shorten",
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


def escape_literal(text: str) -> str:
    """Escape ``text`` so the regex matches it literally."""
    return "".join("\\" + c if c in _META else c for c in text)


def regex_source(pattern: Any) -> GrammarSource:
    """A regex source from a ``str`` (or an ``outlines.types.Regex``)."""
    if type(pattern).__name__ == "Regex" and isinstance(getattr(pattern, "pattern", None), str):
        pattern = pattern.pattern
    if not isinstance(pattern, str):
        raise InvalidRegexError(f"a regex must be a str, got {type(pattern).__name__}")
    return GrammarSource("regex", pattern, f"regex {shorten(pattern)}")


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
    return GrammarSource("choices", regex, f"choices {shorten(repr(items))}")


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


def shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
