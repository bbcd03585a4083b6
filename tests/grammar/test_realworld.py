"""Schemas nobody here wrote: a CI-sized slice of JSONSchemaBench and MaskBench (tests/data).

Every schema compiles or is refused with a typed error that names where; on MaskBench (the spec's
language, ``strict=False``) every valid instance is accepted, both as written with keys in the
order of the subschema it matches (``in_schema_order``) and by the grammar-guided search, and no
invalid instance is accepted in either key order. The whole development set
is measured by benchmarks/grammar_engines.py and benchmarks/maskbench.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, UnsupportedSchemaError
from hf_fvo.eval.instances import accepting_serialization, in_schema_order, schema_key_order

DATA = Path(__file__).resolve().parents[1] / "data"
JSB = [json.loads(line) for line in (DATA / "jsonschemabench_slice.jsonl").open()]
MASKBENCH = [json.loads(line) for line in (DATA / "maskbench_slice.jsonl").open()]
# what the slices measure today; a lower count is a regression
MIN_COMPILED = {"jsonschemabench": 37, "maskbench": 39}


def test_jsonschemabench_slice_compiles_or_refuses_by_name(smol_tokenizer):
    compiled = 0
    for row in JSB:
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="")
        except UnsupportedSchemaError as exc:
            assert str(exc).startswith("#") or "json_schema" in str(exc), (row["name"], exc)
            continue
        except EmptyLanguageError:
            continue
        assert g.allowed(g.initial_state).any(), row["name"]
        compiled += 1
    assert compiled >= MIN_COMPILED["jsonschemabench"]


@pytest.mark.parametrize("row", MASKBENCH, ids=[m["description"][-40:] for m in MASKBENCH])
def test_maskbench_valid_accepted_invalid_rejected(smol_tokenizer, row):
    try:
        g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="", strict=False)
    except (UnsupportedSchemaError, EmptyLanguageError):
        pytest.skip("refused with a typed error (counted by the slice test below)")
    order = schema_key_order(row["schema"])
    for case in row["tests"]:
        written = json.dumps(in_schema_order(case["data"], row["schema"]), separators=(",", ":"),
                             ensure_ascii=False)  # fmt: skip
        state = g.walk(smol_tokenizer.encode(written))
        accepted = state is not None and g.is_accepting(state)
        assert accepted == case["valid"], (case["description"], written)
        text = accepting_serialization(
            g, case["data"], smol_tokenizer, key_order=order, search=case["valid"]
        )
        if case["valid"]:
            assert text is not None, f"valid instance rejected: {case['description']}"
        else:
            assert text is None, f"invalid instance accepted ({case['description']}): {text}"


def test_maskbench_slice_compiles(smol_tokenizer):
    compiled = 0
    for row in MASKBENCH:
        try:
            Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="", strict=False)
            compiled += 1
        except (UnsupportedSchemaError, EmptyLanguageError):
            pass
    assert compiled >= MIN_COMPILED["maskbench"]


def test_in_schema_order_follows_the_branch_the_instance_matches():
    schema = {
        "$defs": {"pt": {"properties": {"y": {}, "x": {}}}},
        "type": "array",
        "items": {
            "anyOf": [
                {"properties": {"kind": {"const": "a"}, "id": {}}, "required": ["kind"]},
                {"properties": {"id": {}, "kind": {"const": "b"}, "at": {"$ref": "#/$defs/pt"}}},
            ]
        },
    }
    value = [{"id": 1, "kind": "a"}, {"at": {"x": 0, "y": 1}, "kind": "b", "id": 2, "zz": 0}]
    assert json.dumps(in_schema_order(value, schema)) == json.dumps(
        [{"kind": "a", "id": 1}, {"id": 2, "kind": "b", "at": {"y": 1, "x": 0}, "zz": 0}]
    )
