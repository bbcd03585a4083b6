"""The grammars every grammar-layer test runs on, with their independent regex oracles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hf_fvo import Grammar
from hf_fvo.grammar.sources import choices_source, json_schema_source
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
    oracle: Callable[[Grammar], Oracle]  # independent of outlines-core


def _regex_oracle(pattern: str) -> Callable[[Grammar], Oracle]:
    return lambda g: Oracle(pattern, forbidden=g.reserved_character)


CASES = [
    Case(
        "json_nested",
        lambda tok: Grammar.from_json_schema(NESTED_SCHEMA, tok),
        _regex_oracle(json_schema_source(NESTED_SCHEMA).regex),
    ),
    Case("dyck_3_16", lambda tok: Grammar.dyck(3, 16, tok), lambda g: DyckOracle(3, 16)),
    Case(
        "dyck2_2_8",
        lambda tok: Grammar.dyck(2, 8, tok, brackets="()[]"),
        lambda g: DyckOracle(2, 8, "()[]"),
    ),
    Case("email", lambda tok: Grammar.from_regex(EMAIL, tok), _regex_oracle(EMAIL)),
    Case("ac_bug", lambda tok: Grammar.from_regex(AC_BUG, tok), _regex_oracle(AC_BUG)),
    Case(
        "choices",
        lambda tok: Grammar.from_choices(CHOICES, tok),
        _regex_oracle(choices_source(CHOICES).regex),
    ),
]
CASE_IDS = [c.name for c in CASES]
