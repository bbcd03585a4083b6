"""The schema's lower bound on a member's length (hf_fvo.grammar.schema.shortest): never above
the compact text of a valid instance that the JSON Schema spec's test suite or MaskBench lists,
infinite exactly where the spec's test suite has no valid instance to contradict it, and what a
budget is refused by before any search."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, GrammarError
from hf_fvo.grammar.schema import prepare_json_schema
from hf_fvo.grammar.schema.shortest import pattern_width, shortest_bound

DATA = Path(__file__).resolve().parents[1] / "data"


def _rows() -> list[tuple[str, dict, str, list]]:
    out = []
    for line in (DATA / "json_schema_test_suite.jsonl").open():
        r = json.loads(line)
        out.append((r["description"], r["schema"], r["formats"], r["tests"]))
    for line in (DATA / "maskbench_slice.jsonl").open():
        r = json.loads(line)
        out.append((r["description"], r["schema"], "assert", r["tests"]))
    return out


def _compact(value) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def test_the_bound_is_never_above_a_valid_instance_of_spec_and_maskbench_schemas():
    checked = 0
    for name, schema, formats, tests in _rows():
        try:
            prepared = prepare_json_schema(schema, strict=False, checks=True, formats=formats)
        except (GrammarError, RecursionError):
            continue
        bound = shortest_bound(prepared.schema)
        for case in tests:
            if case["valid"]:
                assert bound <= _compact(case["data"]), (name, case["description"], bound)
                checked += 1
    assert checked > 1000


def test_patterns_widths_are_at_most_the_shortest_match():
    assert pattern_width("(.{10}){100}") == 1000
    assert pattern_width("^a*$") == 0
    assert pattern_width("x|yz") == 1
    # read otherwise by ECMA-262 or by the engines: no bound rather than a wrong one
    assert pattern_width("[[:alpha:]]") == 0  # a POSIX class (one character) to the engines
    assert pattern_width("[a-z&&[^aeiou]]") == 0
    assert pattern_width("(?<year>[0-9]{4})") == 0


@pytest.mark.parametrize(
    ("schema", "finite"),
    [
        ({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}, False),
        ({"type": "object", "properties": {"next": {"$ref": "#"}}}, True),  # {} closes it
        ({"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}],
          "$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}},
         True),  # null ends the nesting
        ({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}},
          "$ref": "#/$defs/a"}, False),
        ({"type": "array", "items": False, "minItems": 1}, False),
    ],
)  # fmt: skip
def test_a_required_part_that_never_closes_has_no_finite_member(schema, finite):
    assert math.isinf(shortest_bound(prepare_json_schema(schema).schema)) is not finite


def test_a_schema_with_no_finite_member_is_refused_as_empty(smol_tokenizer):
    cycle = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    with pytest.raises(EmptyLanguageError, match="never closes"):
        Grammar.from_json_schema(cycle, smol_tokenizer)


def test_a_budget_below_the_bound_is_refused_at_once(smol_tokenizer):
    """A member of 10⁶ characters cannot fit 64 tokens: the grammar says so from the schema,
    where a search for a member would run to its limit (seconds) and find none."""
    g = Grammar.from_json_schema({"type": "string", "pattern": "((.{10}){100}){1000}"},
                                 smol_tokenizer)  # fmt: skip
    start = g.initial_state
    longest = max(len(b) for b in g.vocabulary.token_bytes if b)
    assert g.min_tokens_to_accept(start) == math.ceil(1_000_002 / longest)
    assert not g.admissible(start, 64).any()
    # deeper than the search goes: never searched for
    assert g.budget_rule._memos[start].witness is None
