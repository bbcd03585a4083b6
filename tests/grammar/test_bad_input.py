"""Bad grammars fail at compile time with a typed error that names the cause."""

from __future__ import annotations

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
