"""The JSON Schema spec's own test cases (JSON-Schema-Test-Suite, draft 2020-12 and draft 7, with
``optional/format``; tests/data/README.md says where they come from): every schema compiles or is
refused for a reason the spec itself gives, no invalid instance is accepted, and every valid
instance is accepted except the one listed below (``REJECTED``).

What the masks cannot say is decided by the final check (:attr:`Grammar.checked`), so acceptance
here is the masks *and* the check, as generation uses them (``accepting_serialization``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, UnsupportedSchemaError
from hf_fvo.eval.instances import accepting_serialization, in_schema_order

DATA = Path(__file__).resolve().parents[1] / "data" / "json_schema_test_suite.jsonl"
ROWS = [json.loads(line) for line in DATA.open()]

# Refusals the spec allows: a reference to a document outside the schema (the suite's remotes are
# served from localhost:1234; hf_fvo never fetches), and the one recursive reference beside
# sibling keywords that the pushdown engine does not compile (named in the error).
ENGINE_LIMITS = {
    "A $dynamicRef that initially resolves to a schema with a matching $dynamicAnchor resolves "
    "to the first $dynamicAnchor in the dynamic scope"
}

# The one valid instance the masks reject: a meta-schema whose $vocabulary turns validation off
# (hf_fvo validates by the draft). Numbers with a zero fraction (`1.0` as an integer, `[0.0]`
# for the constant `[0]`) are accepted since hf_fvo writes its own number lexemes.
REJECTED = {"no validation: invalid number, but it still validates"}


@pytest.fixture(scope="module")
def compiled(smol_tokenizer):
    out = []
    for row in ROWS:
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="",
                                         strict=False, formats=row["formats"])  # fmt: skip
        except EmptyLanguageError:
            out.append((row, "empty"))
        except UnsupportedSchemaError as exc:
            out.append((row, exc))
        else:
            out.append((row, g))
    return out


def test_every_schema_compiles_unless_its_language_is_empty_or_elsewhere(compiled):
    refused = [(r, g) for r, g in compiled if isinstance(g, Exception)]
    for row, exc in refused:
        case = row["description"].split(": ", 1)[1]
        assert "points outside this schema" in str(exc) or case in ENGINE_LIMITS, (case, exc)
    empty = [r for r, g in compiled if g == "empty"]
    for row in empty:  # every instance is invalid where the language is empty
        assert not any(t["valid"] for t in row["tests"]), row["description"]
    assert len(compiled) - len(refused) - len(empty) >= 641  # what it compiles today


def test_no_invalid_instance_is_accepted_and_valid_ones_are(compiled, smol_tokenizer):
    rejected = []
    for row, g in compiled:
        if not isinstance(g, Grammar):
            continue
        for case in row["tests"]:
            text = accepting_serialization(g, case["data"], smol_tokenizer, search=case["valid"])
            if not case["valid"]:
                assert text is None, (row["description"], case["description"], text)
            elif text is None:
                rejected.append(case["description"])
    assert set(rejected) <= REJECTED, set(rejected) - REJECTED


def test_invalid_instances_fail_the_masks_or_the_check_token_by_token(compiled, smol_tokenizer):
    """The path generation and the benchmarks take: the tokenizer's own tokens of the text as
    written, walked through the masks, then the final check (contains, unevaluated*,
    uniqueItems, IDNA formats…)."""
    for row, g in compiled:
        if not isinstance(g, Grammar) or not g.checked:
            continue
        for case in row["tests"]:
            written = json.dumps(in_schema_order(case["data"], row["schema"]),
                                 separators=(",", ":"), ensure_ascii=False)  # fmt: skip
            ids = smol_tokenizer.encode(written)
            state = g.walk(ids)
            accepted = state is not None and g.is_accepting(state) and g.check(ids) is None
            if not case["valid"]:
                assert not accepted, (row["description"], case["description"])


def test_key_order_any_judges_const_and_enum_instances_in_their_own_key_order(smol_tokenizer):
    """Under key_order='any' the suite's const/enum cases, each fed in the key order it is
    written in (both drafts): valid ones accepted, invalid ones not — objects are equal as sets
    of members ("same object with different property order is valid")."""
    rows = [r for r in ROWS if r["file"] in ("const.json", "enum.json")]
    assert len(rows) >= 40
    for row in rows:
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="",
                                         strict=False, key_order="any")  # fmt: skip
        except EmptyLanguageError:
            assert not any(t["valid"] for t in row["tests"]), row["description"]
            continue
        for case in row["tests"]:
            ids = smol_tokenizer.encode(json.dumps(case["data"], separators=(",", ":"),
                                                   ensure_ascii=False))  # fmt: skip
            state = g.walk(ids)
            accepted = state is not None and g.is_accepting(state) and g.check(ids) is None
            assert accepted == case["valid"], (row["description"], case["description"])


def test_a_pickled_grammar_keeps_its_final_check(compiled):
    """A copy of a grammar (pickle, deepcopy: another process, a worker) decides what the
    original's final check decides: the language does not grow when the grammar travels. Each
    suite schema with a check, its instances as written, through the copy's check."""
    import pickle

    refused = 0
    for row, g in compiled:
        if not isinstance(g, Grammar) or not g.checked:
            continue
        copy = pickle.loads(pickle.dumps(g))
        assert copy.checked == g.checked, row["description"]
        for case in row["tests"]:
            written = json.dumps(in_schema_order(case["data"], row["schema"]),
                                 separators=(",", ":"), ensure_ascii=False)  # fmt: skip
            verdict = g.check_text(written)
            assert copy.check_text(written) == verdict, (row["description"], case["description"])
            refused += verdict is not None
    assert refused >= 100  # (the check decides many of the suite's invalid cases)
