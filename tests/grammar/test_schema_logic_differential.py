"""Differential property: on random schemas built from the logic keywords (oneOf, not, if/then/
else, anyOf, allOf, enums of objects and arrays…), the pushdown grammar (the spec's language,
``strict=False``) accepts an instance exactly when ``jsonschema`` says it is valid.

The complements behind ``not``, ``else`` and ``oneOf`` are where an exact rewrite can go wrong;
``jsonschema`` is the oracle nobody here wrote. A refusal must be typed, and an
``EmptyLanguageError`` must mean that no instance of the universe validates.
"""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hf_fvo import Grammar, GrammarError
from hf_fvo.errors import EmptyLanguageError
from hf_fvo.eval.instances import accepting_serialization

UNIVERSE = [
    None, True, False, 0, 1, -1, 2.5, 7, "", "a", "b", "ab", "void", "xyz",
    [], [1], ["a"], [1, 2], [None], [[]],
    {}, {"a": 1}, {"a": "x"}, {"a": None}, {"b": 2}, {"a": 1, "b": 2}, {"type": "void"},
    {"type": "a"}, {"a": [1]}, {"a": {"b": 1}}, {"c": True}, {"a": 1, "c": "x"},
]  # fmt: skip

_scalar = st.sampled_from([None, True, False, 0, 1, -1, 2.5, "", "a", "ab", "void"])
_value = st.one_of(
    _scalar,
    st.sampled_from([[], [1], ["a"], {}, {"a": 1}, {"type": "void"}, {"a": 1, "b": 2}]),
)
_leaf = st.one_of(
    st.sampled_from([
        {"type": "integer"}, {"type": "string"}, {"type": "object"}, {"type": "array"},
        {"type": "null"}, {"type": ["string", "null"]}, {"type": "number", "minimum": 0},
        {"type": "string", "maxLength": 1}, {"required": ["a"]}, {"required": ["type"]},
        {"minProperties": 2}, {"maxItems": 1}, {"items": {"type": "integer"}},
        {"additionalProperties": False, "properties": {"a": {}}}, {"maximum": 1}, True, False, {},
        {"$ref": "#/$defs/tree"}, {"type": "integer", "allOf": [{"$ref": "#/$defs/tree"}]},
    ]),
    st.builds(lambda v: {"const": v}, _value),
    st.builds(lambda vs: {"enum": vs}, st.lists(_value, min_size=1, max_size=3)),
)  # fmt: skip


def _nest(children):
    names = st.sampled_from(["a", "b", "type"])
    return st.one_of(
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=2, max_size=3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda x: {"not": x}, children),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, children, children, children),
        st.builds(lambda props: {"properties": props}, st.dictionaries(names, children,
                                                                       max_size=2)),
        st.builds(lambda x: {"items": x}, children),
    )  # fmt: skip


# a recursive definition every generated schema may reference: objects whose "a" is a tree
TREE = {"properties": {"a": {"$ref": "#/$defs/tree"}}, "maxProperties": 2}
SCHEMAS = st.recursive(_leaf, _nest, max_leaves=5).map(
    lambda s: {"$defs": {"tree": TREE}, **(s if isinstance(s, dict) else {"allOf": [s]})}
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schema=SCHEMAS)
def test_the_grammar_accepts_exactly_the_valid_instances(smol_tokenizer, schema):
    validator = jsonschema.Draft202012Validator(schema)
    valid = [v for v in UNIVERSE if validator.is_valid(v)]
    try:
        g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", strict=False)
    except EmptyLanguageError:
        event("empty language")
        assert not valid, f"refused as empty, yet {valid[0]!r} is valid"
        return
    except GrammarError as exc:
        event(f"refused: {type(exc).__name__}")
        return
    event("compiled")
    for value in UNIVERSE:
        accepted = accepting_serialization(g, value, smol_tokenizer) is not None
        assert accepted == validator.is_valid(value), (value, validator.is_valid(value))


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        # the only value of branch 0 also satisfies branch 1: it is excluded, the rest remain
        ({"oneOf": [{"enum": [{"type": "void"}]},
                    {"type": "object", "required": ["type"], "additionalProperties": False,
                     "properties": {"type": {"type": "string", "not": {"enum": ["array"]}}}}]},
         [{"type": "a"}], [{"type": "void"}, {"type": "array"}]),
        # object-only branches both accept every non-object: exactly one never holds there
        ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
         [{"a": 1}, {"b": 2}], [{"a": 1, "b": 2}, "x", 1, None, {}]),
        ({"not": {"enum": [[1, 2], {"a": 1}]}}, [[1], [2, 1], {"a": 2}, {}], [[1, 2], {"a": 1}]),
    ],
)  # fmt: skip
def test_complements_of_overlapping_branches_and_composite_values(
    smol_tokenizer, schema, valid, invalid
):
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", strict=False)
    for value in valid:
        assert jsonschema.validate(value, schema) is None
        assert accepting_serialization(g, value, smol_tokenizer) is not None, value
    for value in invalid:
        assert not jsonschema.Draft202012Validator(schema).is_valid(value)
        assert accepting_serialization(g, value, smol_tokenizer) is None, value
