"""Bad grammars fail at compile time with a typed error that names the cause."""

from __future__ import annotations

import json

import pytest

from hf_fvo import (
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLargeError,
    InvalidRegexError,
    TokenizerError,
    UnsupportedSchemaError,
)
from hf_fvo.grammar import InfiniteLanguageError, OutOfGrammarError


def test_every_error_is_a_grammar_error_and_a_value_error():
    for cls in (
        InvalidRegexError,
        UnsupportedSchemaError,
        EmptyLanguageError,
        InfiniteLanguageError,
        GrammarTooLargeError,
        TokenizerError,
        OutOfGrammarError,
    ):
        assert issubclass(cls, GrammarError) and issubclass(cls, ValueError)


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("(ab", "missing \\)"),
        ("[z-a]", "bad character range"),
        ("a{2,1}", "min repeat greater than max"),
        ("^ab$", "anchors"),
        (r"(?<=a)b", "cannot be compiled"),
        (r"\p{NoSuchClass}", "cannot be compiled"),
        (42, "must be a str"),
    ],
)
def test_invalid_regex_names_the_problem(smol_tokenizer, pattern, match):
    with pytest.raises(InvalidRegexError, match=match):
        Grammar.from_regex(pattern, smol_tokenizer)


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "integer", "minimum": 0}, "'minimum'"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "'uniqueItems'"),
        ({"type": "object", "patternProperties": {"^a": {}}}, "'patternProperties'"),
        ({"not": {"type": "string"}}, "'not'"),
        ({"type": "string", "format": "ipv4"}, "format 'ipv4'"),
        ({"type": "object", "required": ["a"]}, "not listed in properties"),
        ({"type": "foo"}, "Unsupported type"),
        ("{not json", "not valid JSON"),
        ([1, 2], "must be a dict"),
        (
            {"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}}},
            "#/properties/a: keyword 'maximum'",
        ),
    ],
)
def test_unsupported_schema_names_the_keyword_and_where(smol_tokenizer, schema, match):
    with pytest.raises(UnsupportedSchemaError, match=match):
        Grammar.from_json_schema(schema, smol_tokenizer)


def test_schema_inputs_dict_string_and_pydantic_agree(smol_tokenizer):
    from typing import Literal

    from pydantic import BaseModel

    class Reply(BaseModel):
        status: Literal["ok", "error"]
        code: int

    as_dict = Reply.model_json_schema()
    a = Grammar.from_json_schema(Reply, smol_tokenizer, whitespace="")
    b = Grammar.from_json_schema(as_dict, smol_tokenizer, whitespace="")
    c = Grammar.from_json_schema(json.dumps(as_dict), smol_tokenizer, whitespace="")
    assert a is b is c
    state = a.walk(smol_tokenizer.encode('{"status":"ok","code":200}'))
    assert state is not None and a.is_accepting(state)


@pytest.mark.parametrize("pattern", [r"[^\s\S]", r"a[^\s\S]b"])
def test_empty_language_is_an_error(smol_tokenizer, pattern):
    with pytest.raises(EmptyLanguageError):
        Grammar.from_regex(pattern, smol_tokenizer)


def test_empty_choices_is_an_error(smol_tokenizer):
    with pytest.raises(EmptyLanguageError, match="empty"):
        Grammar.from_choices([], smol_tokenizer)
    with pytest.raises(GrammarError, match="list of strings"):
        Grammar.from_choices("ok", smol_tokenizer)


def test_length_bound_that_empties_the_language_is_an_error(smol_tokenizer):
    with pytest.raises(EmptyLanguageError, match="max_length=3"):
        Grammar.from_regex(r"abcdef", smol_tokenizer, max_length=3)
    g = Grammar.from_regex(r"[a-z]+", smol_tokenizer, max_length=3)
    assert g.is_finite and g.walk(smol_tokenizer.encode("abcd")) is None


@pytest.mark.parametrize(
    "pattern", [r"a{100000}", r"(?:ab|c{1,500}){1000}", r"(a|b)*a(a|b){16}", r"\p{L}{50000}"]
)
def test_oversized_automaton_is_refused_before_the_expensive_build(smol_tokenizer, pattern):
    with pytest.raises(GrammarTooLargeError, match="states"):
        Grammar.from_regex(pattern, smol_tokenizer)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 8), "depth"),
        ((2, -1), "max_length"),
        ((2, 8, "("), "pairs"),
        ((2, 8, "(("), "distinct"),
        ((30, 8, "()[]"), "stack states"),
    ],
)
def test_bad_dyck_parameters(smol_tokenizer, args, match):
    depth, length, *brackets = args
    with pytest.raises(GrammarError, match=match):
        Grammar.dyck(depth, length, smol_tokenizer, *brackets)
