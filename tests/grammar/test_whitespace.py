"""``whitespace="pretty"``: JSON laid out as json.dumps and JSON.stringify write it, exactly.

At every place JSON allows whitespace the grammar admits nothing, one space, or one newline and
at most 24 spaces; nothing else (two spaces, a tab, a carriage return, a deeper indentation).
Checked on MaskBench's instances (valid ones accepted in every layout json.dumps writes, invalid
ones rejected), on both backends, with the lowered Lark grammar and llguidance's JSON mode, under
binding budgets (no output cut), and against bad ``whitespace`` arguments.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, InvalidArgumentError, UnsupportedSchemaError
from hf_fvo.eval.instances import in_schema_order
from hf_fvo.grammar.schema.lark import PRETTY_WHITESPACE, schema_lark

DATA = Path(__file__).resolve().parents[1] / "data"
MASKBENCH = [json.loads(line) for line in (DATA / "maskbench_slice.jsonl").open()]
DEV = [json.loads(line) for line in (DATA / "jsonschemabench_slice.jsonl").open()]
LAYOUTS = {  # json.dumps' layouts: compact, one line, and indented
    "compact": {"separators": (",", ":")},
    "one line": {},
    "indent 2": {"indent": 2},
    "indent 4": {"indent": 4},
}
NESTED = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "object",
                                            "properties": {"k": {"type": "integer"}}}},
    },
    "required": ["name"],
}  # fmt: skip


def _accepts(g: Grammar, tokenizer, text: str) -> bool:
    state = g.walk(tokenizer.encode(text))
    return state is not None and g.is_accepting(state)


def _deepest_indent(text: str) -> int:
    return max((len(line) - len(line.lstrip(" ")) for line in text.split("\n")), default=0)


def test_maskbench_instances_in_every_json_dumps_layout(smol_tokenizer):
    """Valid MaskBench instances are accepted in all four layouts (where the indentation is at
    most 24 spaces), and no invalid instance is accepted in any of them."""
    checked = 0
    for row in MASKBENCH:
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="pretty",
                                         strict=False)  # fmt: skip
        except (UnsupportedSchemaError, EmptyLanguageError):
            continue
        for case in row["tests"]:
            value = in_schema_order(case["data"], row["schema"])
            for name, options in LAYOUTS.items():
                text = json.dumps(value, ensure_ascii=False, **options)
                if _deepest_indent(text) > 24:
                    assert not _accepts(g, smol_tokenizer, text), (name, text)
                    continue
                assert _accepts(g, smol_tokenizer, text) == case["valid"], (name, text)
                checked += 1
    assert checked >= 300, checked


PATHS = [("pushdown", True), ("pushdown", False), ("automaton", True)]


@pytest.mark.parametrize(("backend", "lowered"), PATHS)
def test_only_the_bounded_layouts_are_admitted(smol_tokenizer, backend, lowered):
    """On both backends, through hf_fvo's Lark grammar and llguidance's JSON mode alike (a
    schema with ``minProperties`` goes to the JSON mode; it is not regular)."""
    schema = NESTED if lowered else {**NESTED, "minProperties": 1}
    assert (schema_lark(schema, PRETTY_WHITESPACE) is not None) == lowered
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="pretty", backend=backend)
    value = {"name": "x y", "tags": [{"k": 1}, {"k": 2}]}
    for options in LAYOUTS.values():
        assert _accepts(g, smol_tokenizer, json.dumps(value, **options))
    assert _accepts(g, smol_tokenizer, "{\n" + " " * 24 + '"name" :\n"x"\n}')
    for text in ['{"name":  "x"}', '{\t"name":"x"}', '{\r\n"name":"x"}', '{\n\n"name":"x"}',
                 '{\n' + " " * 25 + '"name":"x"}', '{ \n"name":"x"}', ' {"name":"x"}']:  # fmt: skip
        assert not _accepts(g, smol_tokenizer, text), repr(text)


@pytest.mark.parametrize("budget", [16, 40])
def test_random_walks_under_a_binding_budget_end_with_eos(smol_tokenizer, budget):
    """No output is cut with pretty whitespace: random admissible walks on development schemas
    end with EOS inside the budget, and the text is JSON."""
    walked = 0
    rows = DEV[:]
    random.Random(budget).shuffle(rows)
    for row in rows:
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="pretty")
        except (UnsupportedSchemaError, EmptyLanguageError):
            continue
        if not g.admissible(g.initial_state, budget).any():
            continue
        rng = random.Random(walked)
        for _ in range(3):
            state, out = g.initial_state, []
            for step in range(budget):
                choices = g.admissible(state, budget - step).nonzero().flatten().tolist()
                assert choices, f"stuck after {len(out)} tokens"
                token = rng.choice(choices)
                if token in g.eos_token_ids:
                    break
                out.append(token)
                state = g.next_state(state, token)
            else:
                raise AssertionError("no EOS within the budget")
            assert g.is_accepting(state)
            json.loads(smol_tokenizer.decode(out))
        walked += 1
        if walked == 6:
            break
    assert walked == 6


@pytest.mark.parametrize("remaining", [4, 6, 9])
def test_pushdown_and_automaton_budgets_agree(smol_tokenizer, remaining):
    """The pushdown budget rule (closing bound, no search) keeps exactly the automaton's
    tokens along a pretty prefix of a small schema."""
    schema = {"type": "object", "properties": {"status": {"enum": ["ok", "error"]}},
              "required": ["status"]}  # fmt: skip
    pd = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="pretty")
    fa = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="pretty", backend="automaton")
    for prefix in ["", "{", "{\n  ", '{\n  "status"', '{\n  "status": "ok"\n']:
        tokens = smol_tokenizer.encode(prefix)
        sp, sa = pd.walk(tokens), fa.walk(tokens)
        assert sp is not None and sa is not None
        assert pd.admissible(sp, remaining).equal(fa.admissible(sa, remaining)), prefix


@pytest.mark.parametrize("whitespace", ["prety", "x", "\\s", "[ ]|,"])
def test_a_whitespace_that_is_not_json_whitespace_is_refused(smol_tokenizer, whitespace):
    """A misspelt name would otherwise be read as a regex and admit non-JSON text."""
    with pytest.raises(InvalidArgumentError, match="JSON does not allow"):
        Grammar.from_json_schema({"type": "integer"}, smol_tokenizer, whitespace=whitespace)
    with pytest.raises(InvalidArgumentError, match="JSON does not allow"):
        Grammar.from_json_schema({"type": "integer"}, smol_tokenizer, whitespace=whitespace,
                                 backend="automaton")  # fmt: skip


def test_the_final_check_reads_pretty_text(smol_tokenizer):
    """What the masks leave to the check (uniqueItems) is decided on the indented text too."""
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="pretty")
    same, apart = smol_tokenizer.encode("[\n  1,\n  1\n]"), smol_tokenizer.encode("[\n  1,\n  2\n]")
    assert g.is_accepting(g.walk(same)) and g.is_accepting(g.walk(apart))
    assert g.check(same).startswith("#/uniqueItems") and g.check(apart) is None


def test_an_outlines_json_schema_keeps_its_whitespace_pattern(smol_tokenizer):
    """Outlines' ``JsonSchema(..., whitespace_pattern=…)`` is compiled with that pattern (not
    hf_fvo's default), and a conflicting ``whitespace`` argument is refused by name."""
    from outlines.types import JsonSchema

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    g = Grammar.from_json_schema(
        JsonSchema(schema, whitespace_pattern="[\n ]{0,3}"), smol_tokenizer
    )
    assert _accepts(g, smol_tokenizer, '{\n  "a":1}')
    assert not _accepts(g, smol_tokenizer, '{\n   "a":1}')  # 4 characters
    with pytest.raises(InvalidArgumentError, match="whitespace_pattern"):
        Grammar.from_json_schema(JsonSchema(schema, whitespace_pattern="[ ]*"), smol_tokenizer,
                                 whitespace="")  # fmt: skip
