"""Admitting untrusted requests: the refusals are the compiler's typed errors, a budget no
member fits is refused before the engine sees it, and a compilation over the time limit is
stopped — its worker killed and replaced — while the next request is admitted."""

from __future__ import annotations

import pytest

from hf_fvo.errors import (
    BudgetTooSmallError,
    CompileTimeoutError,
    EmptyLanguageError,
    UnsupportedSchemaError,
)
from hf_fvo.grammar import GrammarCompiler
from hf_fvo.models import default_model_dir
from hf_fvo.vllm import KEY, Admission, ModelInfo, RequestSpec, admit


def _spec(**kw):
    return RequestSpec.from_args({KEY: kw})


@pytest.fixture(scope="module")
def compiler(smol_tokenizer):
    return GrammarCompiler.shared(smol_tokenizer, len(smol_tokenizer))


STATUS = {"type": "object", "properties": {"status": {"enum": ["ok", "error"]}},
          "required": ["status"]}  # fmt: skip


def test_a_budget_that_fits_the_shortest_member_is_admitted_and_one_token_less_is_not(compiler):
    g = admit(_spec(json_schema=STATUS), compiler, None)
    need = g.tokens_to_accept(g.initial_state) + 1  # EOS
    admit(_spec(json_schema=STATUS), compiler, need)
    with pytest.raises(BudgetTooSmallError, match=f"max_tokens={need - 1}"):
        admit(_spec(json_schema=STATUS), compiler, need - 1)


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ({"type": "integer", "minimum": 5, "maximum": 3}, EmptyLanguageError),
        # every member would need an infinite nesting: the language is empty
        ({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
         EmptyLanguageError),
        # every member has 10⁶ characters: refused from the schema's bound, without a search
        ({"type": "string", "pattern": "((.{10}){100}){1000}"}, BudgetTooSmallError),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
         UnsupportedSchemaError),  # served requests cannot be redrawn: no final checks
    ],
)  # fmt: skip
def test_refusals_are_the_compilers_typed_errors(compiler, schema, error):
    with pytest.raises(error):
        admit(_spec(json_schema=schema), compiler, 64)


def test_the_table_must_cover_every_member_the_budget_admits(compiler):
    from hf_fvo.phi import enumerate_members

    g = admit(_spec(choices=["yes", "no"]), compiler, 8)
    members = enumerate_members(g, 8)
    full = [[list(m), [-1.0] * (len(m) + 1)] for m in members]
    admit(_spec(choices=["yes", "no"], phi="table", table=full), compiler, 8)
    with pytest.raises(Exception, match=f"lists {len(members) - 1} of the {len(members)}"):
        admit(_spec(choices=["yes", "no"], phi="table", table=full[1:]), compiler, 8)


def test_a_compilation_over_the_time_limit_is_stopped_and_the_gate_goes_on(smol_tokenizer):
    gate = Admission(ModelInfo(str(default_model_dir()), len(smol_tokenizer)), workers=1,
                     seconds=1.0)  # fmt: skip
    try:
        # a search to its node limits through a costly lexer: ~10 s here
        slow = _spec(lark="start: /((.{10}|.{11}|.{12}|.{13}|.{14}|.{15}|.{17}|.{19}){100}){1000}/")
        with pytest.raises(CompileTimeoutError, match="over 1 s"):
            gate.check(slow, 64)
        gate.check(_spec(regex="[0-9]{3}"), 8)  # a fresh worker admits the next one
        with pytest.raises(EmptyLanguageError):  # typed errors cross the process boundary
            gate.check(_spec(json_schema={"type": "integer", "minimum": 5, "maximum": 3}), 8)
    finally:
        gate.close()


def test_the_gate_keeps_its_verdict_for_the_same_grammar_and_budget(smol_tokenizer):
    """A server sees the same schema again and again: the second request with the same
    grammar and budget is answered without a worker — admitted or refused alike (a fresh
    error of the same type) — while another budget, or a time-out, asks a worker again."""
    gate = Admission(ModelInfo(str(default_model_dir()), len(smol_tokenizer)), workers=1,
                     seconds=1.0)  # fmt: skip
    try:
        empty = _spec(json_schema={"type": "integer", "minimum": 5, "maximum": 3})
        gate.check(_spec(regex="[0-9]{3}"), 8)
        with pytest.raises(EmptyLanguageError):
            gate.check(empty, 8)
        slow = _spec(lark="start: /((.{10}|.{11}|.{12}|.{13}|.{14}|.{15}|.{17}|.{19}){100}){1000}/")
        with pytest.raises(CompileTimeoutError):
            gate.check(slow, 64)
        asked = []
        gate._workers[0].run = lambda *args: asked.append(args)  # a worker would say "admitted"
        gate.check(_spec(regex="[0-9]{3}"), 8)
        with pytest.raises(EmptyLanguageError):
            gate.check(empty, 8)
        assert asked == []
        gate.check(_spec(regex="[0-9]{3}"), 9)  # another budget
        gate.check(slow, 64)  # a time-out is not kept
        assert [a[1] for a in asked] == [9, 64]
    finally:
        gate._workers[0].run = type(gate._workers[0]).run.__get__(gate._workers[0])
        gate.close()
