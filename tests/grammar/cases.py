"""The grammars every grammar-layer test runs on, with their independent oracles.

``benchmarks/grammar_compile.py`` measures the same grammars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hf_fvo import Grammar
from hf_fvo.grammar.compiler import json_schema_source
from hf_fvo.grammar.sources import (
    GrammarSource,
    choices_source,
    dyck_source,
    regex_source,
)
from tests.grammar.bruteforce import DyckOracle, Oracle

NESTED_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"k": {"type": "string"}, "v": {"type": "integer"}},
                "required": ["k", "v"],
            },
            "maxItems": 2,
        },
    },
    "required": ["name", "age", "role", "tags"],
}
EMAIL = r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}"
AC_BUG = r"(ac|[^a])+"  # outlines-core 0.2.14 misses hundreds of tokens here
CHOICES = ["ok", "error", "pending", "not found", "a.b*c", "naïve"]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Any], Grammar]
    source: GrammarSource  # the regex outlines-core compiles (Dyck: before the length bound)
    oracle: Callable[[Grammar], Oracle]  # independent of outlines-core


def _regex_case(name: str, build: Callable[[Any], Grammar], source: GrammarSource) -> Case:
    return Case(name, build, source, lambda g: Oracle(source.regex, forbidden=g.reserved_character))


CASES = [
    _regex_case(
        "json_nested",
        lambda tok: Grammar.from_json_schema(NESTED_SCHEMA, tok, backend="automaton"),
        json_schema_source(NESTED_SCHEMA),
    ),
    Case(
        "dyck_3_16",
        lambda tok: Grammar.dyck(3, 16, tok),
        dyck_source(3),
        lambda g: DyckOracle(3, 16),
    ),
    Case(
        "dyck2_2_8",
        lambda tok: Grammar.dyck(2, 8, tok, brackets="()[]"),
        dyck_source(2, "()[]"),
        lambda g: DyckOracle(2, 8, "()[]"),
    ),
    _regex_case("email", lambda tok: Grammar.from_regex(EMAIL, tok), regex_source(EMAIL)),
    _regex_case("ac_bug", lambda tok: Grammar.from_regex(AC_BUG, tok), regex_source(AC_BUG)),
    _regex_case("choices", lambda tok: Grammar.from_choices(CHOICES, tok), choices_source(CHOICES)),
]
CASE_IDS = [c.name for c in CASES]
