"""Budgets on pushdown JSON grammars stand on bounds either side of the shortest member: a member
built from the schema (hf_fvo.grammar.schema.instance), parsed, is the upper bound, and a budget
that fits it is accepted; a refusal is a proof (BudgetTooSmallError, from the fewest tokens of a
regular superset) or says it is not (BudgetUndecidedError, naming both bounds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import (
    BudgetTooSmallError,
    BudgetUndecidedError,
    GrammarError,
    InvalidArgumentError,
)
from hf_fvo.grammar.schema import prepare_json_schema
from hf_fvo.grammar.schema.instance import shortest_member, shortest_pattern_text
from hf_fvo.grammar.schema.shortest import relaxed
from hf_fvo.models import tiny_random_llama

DATA = Path(__file__).resolve().parents[1] / "data"

# (schema, a shortest member written by hand, the refusal one token below it): a proof where the
# lower bound (a regular superset, the literal text with the classes of a pattern) reaches it
CASES = [
    ({"enum": ["pending", "done"]}, '"done"', BudgetTooSmallError),
    ({"type": "string"}, '""', BudgetTooSmallError),
    ({"type": "integer", "minimum": 5}, "5", BudgetTooSmallError),
    ({"type": "string", "pattern": "^Z\\d{6}$"}, '"Z000000"', BudgetTooSmallError),
    ({"type": "string", "format": "date"}, '"2000-01-01"', BudgetTooSmallError),
    # an address's octets have different lengths, so its literal text is only the dots
    ({"type": "string", "format": "ipv4"}, '"0.0.0.0"', BudgetUndecidedError),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "boolean"}}, "required": ["b"]}}, "required": ["a"]},
     '{"a":{"b":true}}', BudgetTooSmallError),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 3}, "[0,0,0]",
     BudgetTooSmallError),
    # issue 48's report: the search wrote "-0" (9 tokens) and refused a budget of 9
    ({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
      "required": ["name", "n"]}, '{"name":"","n":0}', BudgetTooSmallError),
]  # fmt: skip


@pytest.fixture(scope="module")
def smol_model(smol_tokenizer):
    return tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)


def _fewest(g: Grammar, text: str) -> int:
    return len(g._completer.fewest_tokens(text.encode()))


@pytest.mark.parametrize(("schema", "member", "refusal"), CASES)
def test_a_budget_of_the_shortest_member_is_accepted_and_one_token_less_refused(
    smol_tokenizer, smol_model, schema, member, refusal
):
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert g.is_accepting(g.walk(smol_tokenizer.encode(member)))  # the hand member is one
    n = _fewest(g, member)
    lower, upper = g.shortest_bounds(g.initial_state)
    assert lower <= n and upper == n  # the built member is as short as the hand one
    if refusal is BudgetTooSmallError:
        assert lower == n  # the proof: no member is shorter
    prompt = torch.tensor([[1, 5]])
    for options in ({"max_new_tokens": n + 1},
                    {"generation_config": GenerationConfig(max_new_tokens=n + 1)}):  # fmt: skip
        out = hf_fvo.generate(smol_model, prompt, grammar=g, do_sample=True, **options)
        new = out[0, 2:].tolist()
        assert new[-1] in g.eos_token_ids and len(new) <= n + 1  # complete, never cut
        assert g.is_accepting(g.walk(new[:-1]))
        with pytest.raises(refusal, match=f"budget of {n} new tokens") as caught:
            hf_fvo.generate(smol_model, prompt, grammar=g, do_sample=True,
                            **{k: (n if k == "max_new_tokens" else GenerationConfig(
                                max_new_tokens=n)) for k in options})  # fmt: skip
        if refusal is BudgetUndecidedError:  # names both bounds, and the budget that fits
            assert (caught.value.lower, caught.value.upper) == (lower, upper)
            assert f"at least {lower} tokens" in str(caught.value)
            assert f"raise the budget to {n + 1}" in str(caught.value)


def test_the_built_member_is_an_instance_of_spec_and_maskbench_schemas():
    """Over schemas nobody here wrote (the JSON Schema spec's test suite, MaskBench): the text
    built from the prepared schema is valid for it (``jsonschema``), for most of them."""
    import jsonschema

    built = valid = 0
    for name in ("json_schema_test_suite", "maskbench_slice"):
        for line in (DATA / f"{name}.jsonl").open():
            row = json.loads(line)
            try:
                body = prepare_json_schema(row["schema"], strict=False).schema
            except GrammarError:
                continue
            if isinstance(body, bool):
                continue
            text = shortest_member(body)
            if text is None:
                continue
            built += 1
            validator = jsonschema.Draft202012Validator(body)
            assert validator.is_valid(json.loads(text)), (row["description"], text)
            valid += 1
    assert built >= 300 and valid == built


@pytest.mark.parametrize(
    ("pattern", "text"),
    [("^a{3}$", "aaa"), ("(foo|ab)+c", "abc"), ("^[^a-z]{2}$", "11"), ("x\\d+", "x1"),
     ("^(?<y>[0-9]{2})-\\k<y>$", "11-11"), ("^[0-9]{2}(?=-)", None)],
)  # fmt: skip
def test_the_pattern_text_is_the_regexs_shortest_and_is_checked_against_it(pattern, text):
    # a look-ahead the construction cannot satisfy is caught by the ECMA check: None, not a lie
    assert shortest_pattern_text(pattern) == text


def test_the_relaxed_schema_keeps_property_names_that_are_keywords():
    schema = {"type": "object", "properties": {"pattern": {"type": "string", "pattern": "^ab"},
              "minimum": {"type": "integer", "minimum": 3}}, "required": ["pattern"]}  # fmt: skip
    assert relaxed(schema) == {"type": "object", "properties": {
        "pattern": {"type": "string", "minLength": 2}, "minimum": {"type": "integer"}},
        "required": ["pattern"]}  # fmt: skip


def test_an_undecided_budget_crosses_processes_with_its_bounds():
    """vLLM's admission workers send refusals back pickled: the bounds come along."""
    import pickle

    error = pickle.loads(pickle.dumps(BudgetUndecidedError("max_tokens=9 may not fit", 2, 9)))
    assert (str(error), error.lower, error.upper) == ("max_tokens=9 may not fit", 2, 9)


@pytest.mark.parametrize("budget", ["8", -1, 2.5, True])
def test_a_budget_that_is_not_a_count_is_a_typed_error_naming_it(smol_tokenizer, budget):
    g = Grammar.from_json_schema({"enum": ["a"]}, smol_tokenizer)
    with pytest.raises(InvalidArgumentError, match="budget must be an int"):
        g.budget_refusal(g.initial_state, budget)


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
@pytest.mark.parametrize("enough", ["8", 2.5, True])
def test_a_goal_that_is_not_a_count_is_a_typed_error_naming_it(smol_tokenizer, backend, enough):
    g = Grammar.from_json_schema({"enum": ["a"]}, smol_tokenizer, backend=backend)
    with pytest.raises(InvalidArgumentError, match="enough must be an int"):
        g.shortest_bounds(g.initial_state, enough=enough)


def test_bounds_of_another_grammars_state_are_a_typed_error(smol_tokenizer):
    g = Grammar.from_json_schema({"enum": ["a"]}, smol_tokenizer)
    h = Grammar.from_json_schema({"enum": ["b"]}, smol_tokenizer)
    with pytest.raises(InvalidArgumentError, match="not a state of this grammar"):
        g.shortest_bounds(h.initial_state)
    with pytest.raises(InvalidArgumentError, match="not a state of this grammar"):
        g.budget_refusal(h.initial_state, 8)


def test_a_refusal_asks_the_lower_bound_only_for_what_it_needs(smol_tokenizer):
    """``budget_refusal(s, B)`` passes B on as the goal of the lower bound (the slow superset is
    skipped once the literal text proves the refusal); a later ``shortest_bounds`` without a goal
    asks again for the whole bound, and a whole bound is never asked twice."""
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "boolean"}, "minItems": 40},
                                 smol_tokenizer, whitespace="")  # fmt: skip
    asked: list[int | None] = []

    def lower(goal: int | None) -> int:
        asked.append(goal)
        return 60 if goal is None else min(60, goal)  # reaches a small goal, stops there

    g.budget_rule._lower, g.budget_rule._lower_value = lower, None
    upper = g.tokens_to_accept(g.initial_state)
    assert upper is not None and upper > 60
    assert isinstance(g.budget_refusal(g.initial_state, 30), BudgetTooSmallError)
    assert g.shortest_bounds(g.initial_state) == (60, upper)
    assert g.shortest_bounds(g.initial_state) == (60, upper)
    assert asked == [30, upper]


def test_a_pickled_grammar_keeps_the_whole_lower_bound_after_a_budget_stopped_it(smol_tokenizer):
    """A budget's check stops the lower bound at its goal (5 here); a copy made after that
    (pickle: processes, caches) still proves the shortest member's 8 tokens, as the original
    does — it stored the partial 5 as if whole, which order-dependent test runs showed."""
    import pickle

    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "n": {"type": "integer"}},
              "required": ["name", "n"]}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert g.shortest_bounds(g.initial_state, enough=5)[0] >= 5  # 5 where it was compiled fresh
    copy = pickle.loads(pickle.dumps(g))
    assert copy.shortest_bounds(copy.initial_state) == g.shortest_bounds(g.initial_state) == (8, 8)
