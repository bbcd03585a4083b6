"""Bad grammars fail at compile time with a typed error that names the cause."""

from __future__ import annotations

import pytest

from hf_fvo import Grammar, GrammarError
from hf_fvo.errors import (
    ConstraintConflictError,
    EmptyLanguageError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidArgumentError,
    InvalidRegexError,
    NonFiniteScoresError,
    OutOfGrammarError,
    TokenizerError,
    UnsupportedSchemaError,
)


def test_every_error_is_a_grammar_error_and_a_value_error():
    for cls in (
        InvalidRegexError,
        InvalidArgumentError,
        UnsupportedSchemaError,
        EmptyLanguageError,
        InfiniteLanguageError,
        GrammarTooLargeError,
        TokenizerError,
        OutOfGrammarError,
        ConstraintConflictError,
        NonFiniteScoresError,
    ):
        assert issubclass(cls, GrammarError) and issubclass(cls, ValueError)


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("(ab", "unclosed group"),
        ("[z-a]", "invalid character class range"),
        ("a{2,1}", "invalid repetition count range"),
        ("^ab$", "anchors"),
        (r"(?<=a)b", "look-around"),
        (r"a(?=b)", "look-around"),
        (r"(a)\1", "backreferences are not supported"),
        (r"\p{NoSuchClass}", "Unicode property not found"),
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


def test_dyck_depth_beyond_the_regex_nesting_limit_is_too_large_by_name(smol_tokenizer):
    assert Grammar.dyck(82, 8, smol_tokenizer).is_finite
    with pytest.raises(GrammarTooLargeError, match="depth ≤ 82"):
        Grammar.dyck(90, 200, smol_tokenizer)


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_a_bad_whitespace_pattern_is_named(smol_tokenizer, backend):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with pytest.raises(
        InvalidRegexError, match=r"whitespace='\(\(' is not a valid regex: unclosed"
    ):
        Grammar.from_json_schema(schema, smol_tokenizer, whitespace="((", backend=backend)
    with pytest.raises(InvalidArgumentError, match="whitespace must be a regex str"):
        Grammar.from_json_schema(schema, smol_tokenizer, whitespace=3, backend=backend)


def test_a_choice_spelling_the_internal_sentinel_is_kept(smol_tokenizer):
    # U+FDD0 is the automaton's reserved sentinel unless the grammar names it
    g = Grammar.from_choices(["a\ufdd0", "b"], smol_tokenizer)
    for text in ("a\ufdd0", "b"):
        assert g.is_accepting(g.walk(smol_tokenizer.encode(text))), text
    assert g.reserved_character not in ("a\ufdd0", "b")
    g = Grammar.from_regex(r"x\x{FDD0}", smol_tokenizer)
    assert g.is_accepting(g.walk(smol_tokenizer.encode("x\ufdd0")))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda tok: Grammar.from_choices(None, tok), "choices must be a list of strings"),
        (lambda tok: Grammar.from_choices(["a", 1], tok), "every choice must be a str"),
        (lambda tok: Grammar.from_regex("[a-z]+", tok, max_states="many"), "max_states"),
        (lambda tok: Grammar.from_regex("[a-z]+", tok, vocab_size=-3), "vocab_size"),
        (lambda tok: Grammar.from_regex("a", tok, backend="gpu"), "backend"),
        (lambda tok: Grammar.from_json_schema({}, tok, backend="gpu"), "backend"),
        (lambda tok: Grammar.dyck("3", 8, tok), "depth"),
        (lambda tok: Grammar.from_transitions([1, 2], [0], vocab_size=3, eos_token_id=2),
         "transitions must be a dict"),
        (lambda tok: Grammar.from_transitions({0: [1]}, [0], vocab_size=3, eos_token_id=2),
         "must map token ids"),
        (lambda tok: Grammar.from_transitions({"a": {0: 1}}, [1], vocab_size=3, eos_token_id=2),
         "a state label"),
        (lambda tok: Grammar.from_transitions({0: {0: 1}}, 1, vocab_size=3, eos_token_id=2),
         "accepting must be a collection"),
        (lambda tok: Grammar.from_transitions({0: {0: 1}}, [1], vocab_size=0, eos_token_id=2),
         "vocab_size"),
        (lambda tok: Grammar.budget(4, -1, zero=0, one=1, eos_token_id=2, vocab_size=3), "k"),
    ],
)  # fmt: skip
def test_malformed_constructor_arguments_are_invalid_argument_errors(smol_tokenizer, build, match):
    with pytest.raises(InvalidArgumentError, match=match):
        build(smol_tokenizer)


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_malformed_states_and_tokens_are_invalid_argument_errors(smol_tokenizer, backend):
    g = Grammar.from_json_schema({"enum": ["ok", "no"]}, smol_tokenizer, backend=backend)
    with pytest.raises(InvalidArgumentError, match="state"):
        g.allowed(None)
    with pytest.raises(InvalidArgumentError, match="encode it first"):
        g.walk("text")
    with pytest.raises(InvalidArgumentError, match="token id must be an int"):
        g.walk([1.5])
    m = g.matcher()
    with pytest.raises(InvalidArgumentError, match="roll back"):
        m.rollback(1)
    with pytest.raises(InvalidArgumentError, match="n must be an int"):
        m.rollback("1")


def test_invalid_argument_errors_are_also_type_errors():
    assert issubclass(InvalidArgumentError, TypeError)
    assert issubclass(InvalidArgumentError, GrammarError)
