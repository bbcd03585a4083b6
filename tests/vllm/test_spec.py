"""Reading a served request's hf_fvo arguments: every malformed one refused with the key named,
and the sampling options that would cut or empty a member refused (no vLLM needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hf_fvo.errors import ConstraintConflictError, GrammarTooLargeError, InvalidArgumentError
from hf_fvo.vllm import KEY, RequestSpec, check_sampling


def _args(**kw):
    return {KEY: kw}


def test_requests_without_hf_fvo_are_left_alone():
    assert RequestSpec.from_args(None) is None
    assert RequestSpec.from_args({"something": "else"}) is None


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (_args(), "exactly one grammar"),
        (_args(regex="a", choices=["a"]), "exactly one grammar"),
        (_args(regex="a", budget=3), "unknown keys"),
        (_args(regex="a", phi="exact"), "phi must be one of"),
        (_args(regex="a", phi="table"), "go together"),
        (_args(regex="a", table=[]), "go together"),
        (_args(regex="a", weights="w"), "weights"),
        (_args(regex=3), "regex must be a string"),
        (_args(choices="yes"), "list of strings"),
        (_args(json_schema="{not json"), "not JSON"),
        (_args(json_schema=[1]), "must be an object"),
        (_args(regex="a", whitespace=1), "whitespace"),
        (_args(regex="a", strict="yes"), "strict"),
        (_args(choices=["a"], phi="table", table=[[1, 2]]), "table row 0"),
        ({KEY: "regex"}, "not JSON"),
        ({KEY: "[1]"}, "must be an object"),
    ],
)
def test_malformed_arguments_are_refused_naming_the_key(args, named):
    with pytest.raises(InvalidArgumentError, match=named):
        RequestSpec.from_args(args)


def test_a_grammar_over_the_size_limit_is_refused_before_compiling():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(999)}}
    with pytest.raises(GrammarTooLargeError, match="over the server's limit"):
        RequestSpec.from_args(_args(json_schema=schema), max_bytes=1000)


def test_the_arguments_may_come_as_json_text_as_the_openai_server_sends_them():
    spec = RequestSpec.from_args({KEY: json.dumps({"regex": "[0-9]+", "phi": "onestep"})})
    assert (spec.kind, spec.source, spec.phi) == ("regex", "[0-9]+", "onestep")


def test_a_spec_survives_its_json_round_trip():
    spec = RequestSpec.from_args(
        _args(json_schema=json.dumps({"type": "integer"}), whitespace="", key_order="any")
    )
    again = RequestSpec.from_args(json.loads(spec.to_json()))
    assert again == spec
    table = _args(choices=["a", "b"], phi="table", table=[[[64], [-1.0, -0.5]]])
    spec = RequestSpec.from_args(table)
    assert RequestSpec.from_args(json.loads(spec.to_json())) == spec


def _params(**kw):
    base = dict(stop=None, stop_token_ids=None, ignore_eos=False, min_tokens=0,
                allowed_token_ids=None, bad_words=None, structured_outputs=None)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_plain_sampling_options_are_accepted():
    check_sampling(_params())


@pytest.mark.parametrize(
    "option",
    [
        {"stop": ["}"]},
        {"stop_token_ids": [5]},
        {"ignore_eos": True},
        {"min_tokens": 3},
        {"allowed_token_ids": [1, 2]},
        {"bad_words": ["x"]},
        {"structured_outputs": object()},
    ],
)
def test_options_that_would_cut_or_empty_a_member_are_refused_by_name(option):
    with pytest.raises(ConstraintConflictError, match=next(iter(option))):
        check_sampling(_params(**option))


def test_a_served_request_may_ask_for_pretty_json(smol_tokenizer):
    """``whitespace: "pretty"`` reaches the compiler: the grammar admits indented JSON."""
    from hf_fvo.grammar import GrammarCompiler

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    spec = RequestSpec.from_args(_args(json_schema=json.dumps(schema), whitespace="pretty"))
    g = spec.compile(GrammarCompiler(smol_tokenizer))
    state = g.walk(smol_tokenizer.encode('{\n  "a": 1\n}'))
    assert state is not None and g.is_accepting(state)
    with pytest.raises(InvalidArgumentError, match="JSON does not allow"):
        RequestSpec.from_args(_args(json_schema=json.dumps(schema), whitespace="prety")).compile(
            GrammarCompiler(smol_tokenizer)
        )
