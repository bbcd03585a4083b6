"""JSON Schema as the spec defines it: every assertion enforced exactly, or refused by name.

Each case states a schema, texts it must accept and texts it must reject; the regressions named
in the real-world report (allOf concatenated, patterns matched against escaped text, formats that
admitted Arabic-Indic digits or rejected valid offsets) are among them.
"""

from __future__ import annotations

import itertools
import json
import pickle
import re
from pathlib import Path

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, InvalidArgumentError, UnsupportedSchemaError

CASES = {
    "allOf intersects": (
        {"allOf": [{"type": "boolean"}, {"type": "boolean"}]},
        ["true", "false"], ["truefalse", "truetrue"],
    ),
    "allOf merges objects": (
        {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                   {"properties": {"a": {"minimum": 2}}}]},
        ['{"a":2}'], ['{"a":1}', "{}"],
    ),
    "pattern on the decoded string": (
        {"type": "object", "properties": {"t": {"type": "string", "pattern": "^a.c$"}}},
        ['{"t":"abc"}', '{"t":"a\\"c"}'], ['{"t":"a"c"}', '{"t":"a\\nc"}', '{"t":"ac"}'],
    ),
    "pattern counts characters": (
        {"type": "object", "properties": {"t": {"type": "string", "pattern": "^[^ ]{2}$"}}},
        ['{"t":"ab"}', '{"t":"\\"x"}'], ['{"t":"\\""}', '{"t":"a b"}'],
    ),
    "date": (
        {"type": "string", "format": "date"},
        ['"2024-02-29"', '"1963-06-19"'],
        ['"٢٠٢٤-01-01"', '"2023-02-29"', '"2024-04-31"', '"2024-1-01"'],
    ),
    "date-time": (
        {"type": "string", "format": "date-time"},
        ['"2024-01-01T00:00:00+02:00"', '"1998-12-31T23:59:60Z"', '"1963-06-19t08:30:06.28z"'],
        ['"-123456-01-01T00:00:00Z"', '"2024-01-01T00:00:00"', '"1998-12-31T22:59:60Z"'],
    ),
    "time": (
        {"type": "string", "format": "time"},
        ['"12:00:00.5Z"', '"23:59:60Z"', '"01:29:60+01:30"', '"15:59:60-08:00"'],
        ['"12:00:00\\\\q5"', '"12:00:00"', '"22:59:60Z"', '"24:00:00Z"'],
    ),
    "email": (
        {"type": "string", "format": "email"},
        ['"joe.bloggs@example.com"', '"\\"joe bloggs\\"@example.com"', '"a@[127.0.0.1]"'],
        ['"\\"\\"x\\"@b.co"', '".a@b.co"', '"a..b@c.co"', '"plain"'],
    ),
    "uri": (
        {"type": "string", "format": "uri"},
        ['"https://a.com/x?y=1#z"', '"urn:isbn:0451450523"'],
        ['"https://a.com/x\\"y"', '"//a.com"', '"a b:c"'],
    ),
    "ipv4/ipv6/uuid/hostname": (
        {"type": "array", "prefixItems": [{"format": "ipv4"}, {"format": "ipv6"},
                                          {"format": "uuid"}, {"format": "hostname"}]},
        ['["1.2.3.4","::ffff:1.2.3.4","2EB8AA08-AA98-11EA-B4AA-73B441D16380","a-b.c"]'],
        ['["01.2.3.4","::1","2EB8AA08-AA98-11EA-B4AA-73B441D16380","a"]',
         '["1.2.3.4","1::2::3","2EB8AA08-AA98-11EA-B4AA-73B441D16380","a"]',
         '["1.2.3.4","::1","2EB8AA08AA9811EAB4AA73B441D16380","a"]',
         '["1.2.3.4","::1","2EB8AA08-AA98-11EA-B4AA-73B441D16380","-a"]'],
    ),
    "integer and number ranges": (
        {"type": "array", "prefixItems": [{"type": "integer", "minimum": 1, "maximum": 12},
                                          {"type": "number", "exclusiveMinimum": 0}]},
        ["[1,0.5]", "[12,3]"], ["[0,1]", "[13,1]", "[1,0]", "[1,-0.5]"],
    ),
    "multipleOf": (
        {"type": "array", "items": {"type": "integer", "multipleOf": 3}},
        ["[3,-6,0]"], ["[4]", "[1]"],
    ),
    "required names absent from properties": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]},
        ['{"a":1,"b":"x"}'], ['{"a":1}'],
    ),
    "additionalProperties as a schema": (
        {"type": "object", "properties": {"a": {"type": "integer"}},
         "additionalProperties": {"type": "boolean"}},
        ['{"a":1,"zz":true}', '{"q":false}'], ['{"a":1,"zz":1}'],
    ),
    "patternProperties": (
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
         "additionalProperties": False},
        ['{"x-a":1}', "{}"], ['{"x-a":"s"}', '{"y":1}'],
    ),
    "propertyNames": (
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
         "additionalProperties": {"type": "integer"}},
        ['{"ab":1}'], ['{"A":1}', '{"a1":1}'],
    ),
    "min/maxProperties over optional keys": (
        {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
         "minProperties": 1, "maxProperties": 2, "additionalProperties": False},
        ['{"a":1}', '{"b":1,"c":2}'], ["{}", '{"a":1,"b":2,"c":3}'],
    ),
    "oneOf is exclusive": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        ['{"a":1}', '{"b":1}'], ['{"a":1,"b":2}', "{}"],
    ),
    "oneOf of disjoint types is anyOf": (
        {"oneOf": [{"type": "string"}, {"type": "null"}]}, ['"x"', "null"], ["1"],
    ),
    "not": (
        {"type": "object", "properties": {"s": {"enum": ["ok", "error"]}, "t": {}},
         "not": {"required": ["s", "t"]}},
        ['{"s":"ok"}', '{"t":1}'], ['{"s":"ok","t":1}'],
    ),
    "not enum": (
        {"type": "string", "not": {"enum": ["a", "ab"]}}, ['""', '"b"', '"abc"'], ['"a"', '"ab"'],
    ),
    "if/then/else": (
        {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {}},
         "required": ["kind"], "if": {"properties": {"kind": {"const": "a"}}},
         "then": {"required": ["n"]}, "else": {"properties": {"n": False}}},
        ['{"kind":"a","n":1}', '{"kind":"b"}'], ['{"kind":"a"}', '{"kind":"b","n":1}'],
    ),
    "dependencies": (
        {"type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
        ['{"b":1}', '{"a":1,"b":2}', "{}"], ['{"a":1}'],
    ),
    "const and enum of any value": (
        {"type": "array", "prefixItems": [{"const": {"k": [1, None]}}, {"enum": [[1], "x", None]}],
         "items": False, "minItems": 2},
        ['[{"k":[1,null]},[1]]', '[{"k":[1,null]},null]'],
        ['[{"k":[1]},[1]]', '[{"k":[1,null]},2]'],
    ),
    "type arrays and null": (
        {"type": ["integer", "null"]}, ["null", "-3"], ["1.5", '"1"'],
    ),
    "recursive $ref": (
        {"$defs": {"node": {"type": "object", "properties": {
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
         "$ref": "#/$defs/node"},
        ['{"kids":[{"kids":[{}]},{}]}'], ['{"kids":[1]}'],
    ),
    "draft-04 forms": (
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "array",
         "items": [{"type": "integer", "minimum": 0, "exclusiveMinimum": True}],
         "additionalItems": False},
        ["[1]", "[]"], ["[0]", "[1,2]"],
    ),
    "annotations and unknown keywords are ignored": (
        {"type": "object", "title": "T", "x-kubernetes-patch-strategy": "merge", "$async": True,
         "properties": {"a": {"type": "string", "_format": "date", "deprecationMessage": "no",
                              "format": "int32", "javaType": "X"}},
         "additonalProperties": False, "self": {"href": "x"}},
        ['{"a":"anything"}'], ['{"a":1}'],
    ),
}  # fmt: skip


def accepts(grammar: Grammar, tokenizer, text: str) -> bool:
    state = grammar.walk(tokenizer.encode(text))
    return state is not None and grammar.is_accepting(state)


@pytest.mark.parametrize("name", CASES)
def test_schema_language(smol_tokenizer, name):
    schema, members, outsiders = CASES[name]
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    for text in members:
        assert json.loads(text) is not None or text == "null"
        assert accepts(g, smol_tokenizer, text), f"{name}: rejects member {text}"
    for text in outsiders:
        assert not accepts(g, smol_tokenizer, text), f"{name}: accepts outsider {text}"


def test_strict_objects_and_the_spec_language(smol_tokenizer):
    tok = smol_tokenizer
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    strict = Grammar.from_json_schema(schema, tok, whitespace="")
    spec = Grammar.from_json_schema(schema, tok, whitespace="", strict=False)
    assert accepts(strict, tok, '{"a":1}') and accepts(spec, tok, '{"a":1}')
    assert not accepts(strict, tok, '{"a":1,"b":2}') and accepts(spec, tok, '{"a":1,"b":2}')
    # strict closes each object alternative with the names its conjunctive parts declare
    inherited = {"allOf": [{"properties": {"a": {"type": "integer"}}},
                           {"properties": {"b": {"type": "string"}}}]}  # fmt: skip
    g = Grammar.from_json_schema(inherited, tok, whitespace="")
    assert accepts(g, tok, '{"a":1,"b":"x"}') and not accepts(g, tok, '{"a":1,"c":2}')
    union = {"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
    g = Grammar.from_json_schema(union, tok, whitespace="")
    assert accepts(g, tok, '{"a":1}') and not accepts(g, tok, '{"a":1,"b":2}')


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
         "#/uniqueItems: uniqueness over items"),
        ({"type": "string", "pattern": "^(?!x)"}, "#/pattern: .* look-around"),
        ({"type": "string", "pattern": "(a)\\1"}, "backreference"),
        ({"type": "array", "contains": {"type": "integer"}}, "#/contains"),
        ({"type": "string", "format": "regex"}, "#/format: format 'regex'"),
        ({"type": "object", "unevaluatedProperties": False, "anyOf": [{"required": ["a"]}]},
         "#/unevaluatedProperties"),
        ({"type": "string", "not": {"pattern": "a"}}, "#/not: its complement"),
        # inside a referenced definition (and its strict copy): the user's pointer, not the
        # name of hf_fvo's hoisted copy
        ({"definitions": {"tags": {"type": "array", "items": {}, "uniqueItems": True}},
          "properties": {"t": {"$ref": "#/definitions/tags"}}},
         "^#/definitions/tags/uniqueItems: uniqueness over items"),
        ({"$defs": {"n": {"properties": {"name": {"type": "string", "not": {"pattern": "a"}}}}},
          "properties": {"x": {"$ref": "#/$defs/n"}}},
         "^#/\\$defs/n/properties/name/not: its complement"),
        ({"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}]},
         "#/oneOf: branches 0 and 1 may both match"),
    ],
)  # fmt: skip
def test_what_no_grammar_says_is_left_to_a_check_that_names_it(smol_tokenizer, schema, match):
    with pytest.raises(UnsupportedSchemaError, match=match):
        Grammar.from_json_schema(schema, smol_tokenizer, checks=False)
    g = Grammar.from_json_schema(schema, smol_tokenizer)
    assert any(re.search(match, str(c)) for c in g.checked), g.checked


@pytest.mark.parametrize(
    ("schema", "refusal", "keyword", "valid", "invalid"),
    [
        ({"type": "number", "multipleOf": 0.123456789}, "multipleOf", "multipleOf",
         "0.246913578", "0.2469135"),
        ({"type": "string", "pattern": "(?:a$|b)c"}, "lookarounds", "pattern", '"xbc"', '"ac"'),
    ],
)  # fmt: skip
def test_what_the_engine_refuses_is_retried_with_a_check(
    smol_tokenizer, schema, refusal, keyword, valid, invalid
):
    with pytest.raises(UnsupportedSchemaError, match=refusal):
        Grammar.from_json_schema(schema, smol_tokenizer, checks=False)
    g = Grammar.from_json_schema(schema, smol_tokenizer)
    assert [c.keyword for c in g.checked] == [keyword]
    assert accepts(g, smol_tokenizer, valid) and g.check_text(valid) is None
    assert g.check_text(invalid) is not None


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"$ref": "https://example.com/s.json"}, "points outside this schema"),
        ({"type": "object", "required": "a"}, "#/required: required must be an array"),
        ({"type": "object", "properties": [1]}, "#/properties: properties must be an object"),
        ({"type": "foo"}, "#/type: unknown type 'foo'"),
        ({"type": "string", "format": ["date"]}, "#/format: format must be a string"),
        ({"type": "integer", "$defs": ["a"]}, "#/\\$defs: \\$defs must be an object"),
        ({"type": "integer", "definitions": 3}, "#/definitions: definitions must be an object"),
        ("{not json", "not valid JSON"),
        ([1, 2], "must be a dict"),
    ],
)  # fmt: skip
def test_malformed_schemas_and_remote_references_are_refused_by_name(smol_tokenizer, schema, match):
    with pytest.raises(UnsupportedSchemaError, match=match):
        Grammar.from_json_schema(schema, smol_tokenizer)


def test_a_deep_schema_is_refused_not_a_recursion_error(smol_tokenizer):
    schema: dict = {"type": "integer"}
    for _ in range(600):
        schema = {"type": "array", "items": schema}
    with pytest.raises(UnsupportedSchemaError, match="deeper than"):
        Grammar.from_json_schema(schema, smol_tokenizer)


@pytest.mark.parametrize(
    "schema",
    [{"enum": []}, {"anyOf": []}, False,
     {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
      "oneOf": [{"required": ["a"]}, {"properties": {"a": {"minimum": 0}}}],
      "not": {"properties": {"a": {"maximum": -1}}}}],
)  # fmt: skip
def test_empty_languages_are_typed(smol_tokenizer, schema):
    with pytest.raises(EmptyLanguageError):
        Grammar.from_json_schema(schema, smol_tokenizer)


def test_unknown_formats_are_annotations_and_are_reported(smol_tokenizer):
    g = Grammar.from_json_schema({"type": "string", "format": "int32"}, smol_tokenizer)
    assert g.notes == ("#/format: format 'int32' is not a JSON Schema format; ignored",)
    assert accepts(g, smol_tokenizer, '"x"')


def test_schema_inputs_dict_string_pydantic_and_outlines_agree(smol_tokenizer):
    from typing import Literal

    from outlines.types import JsonSchema
    from pydantic import BaseModel

    class Reply(BaseModel):
        status: Literal["ok", "error"]
        code: int

    as_dict = Reply.model_json_schema()
    grammars = [
        Grammar.from_json_schema(spec, smol_tokenizer, whitespace="")
        for spec in (Reply, as_dict, json.dumps(as_dict), JsonSchema(as_dict))
    ]
    assert all(g is grammars[0] for g in grammars)  # one compiled grammar, from the cache
    assert accepts(grammars[0], smol_tokenizer, '{"status":"ok","code":200}')


def test_outlines_regex_and_cfg_types(smol_tokenizer):
    from outlines.types import CFG, Regex

    g = Grammar.from_regex(Regex("[0-9]{2}"), smol_tokenizer)
    assert accepts(g, smol_tokenizer, "42") and not accepts(g, smol_tokenizer, "4")
    h = Grammar.from_lark(CFG('start: "x" start | "y"'), smol_tokenizer)
    assert accepts(h, smol_tokenizer, "xxy")


def test_automaton_backend_refuses_what_it_does_not_lower(smol_tokenizer):
    with pytest.raises(UnsupportedSchemaError, match="backend='pushdown'"):
        Grammar.from_json_schema({"type": "string", "pattern": "a"}, smol_tokenizer,
                                 backend="automaton")  # fmt: skip


def test_compact_default_and_flexible_whitespace(smol_tokenizer):
    tok = smol_tokenizer
    schema = {"type": "object", "required": ["a"],
              "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}  # fmt: skip
    pretty = '{\n  "a": [\n    1,\n    2\n  ]\n}'
    compact = Grammar.from_json_schema(schema, tok, whitespace="")
    default = Grammar.from_json_schema(schema, tok)  # one optional space, as in Outlines
    flexible = Grammar.from_json_schema(schema, tok, whitespace=r"[ \t\n]*")
    assert accepts(compact, tok, '{"a":[1,2]}') and not accepts(compact, tok, '{"a": [1,2]}')
    assert accepts(default, tok, '{ "a": [1, 2] }') and not accepts(default, tok, pretty)
    assert accepts(flexible, tok, pretty) and not accepts(flexible, tok, " " + pretty)


def test_contradictory_bounds_name_the_keywords(smol_tokenizer):
    schema = {"type": "array", "minItems": 3, "maxItems": 1}
    with pytest.raises(EmptyLanguageError, match=r"minItems \(3\) is greater than maxItems"):
        Grammar.from_json_schema(schema, smol_tokenizer)


FINITE = [
    {"enum": ["a", "b"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "null"}}},
    {"type": "integer", "minimum": -3, "exclusiveMaximum": 7},
    {"type": "array", "items": {"enum": [1, 2]}, "maxItems": 3},
    {"anyOf": [{"const": 1}, {"type": "boolean"}]},
    {"allOf": [{"type": "string"}, {"enum": ["x", "y"]}]},
    {"$defs": {"lvl": {"enum": ["lo", "hi"]}}, "type": "object",
     "properties": {"a": {"$ref": "#/$defs/lvl"}, "b": {"$ref": "#/$defs/lvl"}}},
]  # fmt: skip
OPEN = [
    {"type": "string", "maxLength": 3},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "integer", "minimum": 0},
    {"type": "array", "items": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {"enum": [1]}}, "additionalProperties": True},
    {"anyOf": [{"const": 1}, {"type": "string"}]},
    {"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "maxItems": 2,
                                                               "items": {"$ref": "#/$defs/t"}}}}},
     "$ref": "#/$defs/t"},  # recursion: finite depth is not shown
]  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "finite"), [(s, True) for s in FINITE] + [(s, False) for s in OPEN]
)
def test_finite_languages_are_recognised_from_the_schema(smol_tokenizer, schema, finite):
    # a finite claim must hold: the token automaton of the same schema has no cycle
    from hf_fvo.grammar import prepare_json_schema
    from hf_fvo.grammar.schema import has_finite_language

    assert has_finite_language(prepare_json_schema(schema).schema) is finite
    pushdown = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert pushdown.is_finite is (True if finite else None)
    if finite:
        assert _dies_out(pushdown), schema
        # whitespace that may repeat makes it infinite again: no claim then
        assert Grammar.from_json_schema(schema, smol_tokenizer, whitespace="[ ]*").is_finite is None
        assert pickle.loads(pickle.dumps(pushdown)).is_finite is True


def test_finite_claims_on_real_schemas_agree_with_the_token_automaton(smol_tokenizer):
    # schemas nobody here wrote: every one claimed finite compiles to an acyclic automaton
    from hf_fvo.grammar import prepare_json_schema
    from hf_fvo.grammar.schema import has_finite_language
    from hf_fvo.training.corpus import enum_schemas

    data = Path(__file__).resolve().parents[1] / "data"
    rows = [json.loads(line) for line in (data / "jsonschemabench_slice.jsonl").open()]
    rows += [{"name": r["file"], "schema": r["schema"]}
             for r in map(json.loads, (data / "maskbench_slice.jsonl").open())]  # fmt: skip
    claimed = [r["schema"] for r in rows
               if has_finite_language(prepare_json_schema(r["schema"]).schema)]  # fmt: skip
    claimed += [schema for _, schema, _ in enum_schemas(rows, 6)]
    checked = 0
    for schema in claimed:
        try:  # an acyclic token automaton proves it (allOf is not lowered there)
            g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", backend="automaton")
        except UnsupportedSchemaError:
            continue
        assert g.is_finite is True, schema
        checked += 1
    assert checked >= 6


def _dies_out(g: Grammar, max_states: int = 20_000) -> bool:
    """Whether every token path of ``g`` ends: a breadth-first walk over its token paths that
    runs out of non-EOS moves within ``max_states`` visits (a proof that the language is finite;
    small languages only, as every tokenization is a path)."""
    frontier, seen = [g.initial_state], 0
    while frontier:
        nxt = []
        for state in frontier:
            seen += 1
            if seen > max_states:
                return False
            for tok in g.allowed(state).nonzero().flatten().tolist():
                if tok not in g.eos_token_ids:
                    nxt.append(g.next_state(state, tok))
        frontier = nxt
    return True


def test_key_order_any_admits_every_order_each_key_once_required_present(smol_tokenizer):
    def member(g, text):
        ids = smol_tokenizer.encode(text)
        state = g.walk(ids)
        return state is not None and g.is_accepting(state) and g.check(ids) is None

    props = {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}
    schema = {"type": "object", "properties": props, "required": ["a"]}
    texts = {'{"a":1,"b":"x","c":true}': True, '{"c":true,"b":"x","a":1}': True,
             '{"b":"x","a":1}': True, '{"a":1,"a":2}': False, '{"b":"x"}': False,
             '{"a":"x"}': False}  # fmt: skip
    closed = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", key_order="any")
    assert not closed.checked  # a small closed object: the union of its orders, no check
    fixed = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert not member(fixed, '{"c":true,"b":"x","a":1}')  # the schema's order by default
    spec = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", key_order="any",
                                    strict=False)  # fmt: skip
    assert [c.keyword for c in spec.checked] == ["properties"]  # open: the check counts keys
    for g in (closed, spec):
        for text, valid in texts.items():
            assert member(g, text) == valid, (text, g.source)
    assert member(spec, '{"z":null,"a":1}') and not member(closed, '{"z":null,"a":1}')
    patterned = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "patternProperties": {"^x_": {"type": "string"}},
        "additionalProperties": False,
    }
    g = Grammar.from_json_schema(patterned, smol_tokenizer, whitespace="", key_order="any")
    assert member(g, '{"x_1":"s","a":1}') and member(g, '{"a":1,"x_1":"s"}')
    assert not member(g, '{"x_1":"s"}') and not member(g, '{"x_1":1,"a":1}')
    with_defs = {
        "$defs": {"n": {"type": "integer"}},
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"$ref": "#/$defs/n"}, "b": {}},
        "additionalProperties": False,
    }
    g = Grammar.from_json_schema(with_defs, smol_tokenizer, whitespace="", key_order="any")
    assert member(g, '{"b":null,"a":1}') and not member(g, '{"b":null,"a":"x"}')


def _orders(value):
    """Every compact JSON text of ``value``, its objects' keys in every order."""
    if isinstance(value, dict):
        items = [[f"{json.dumps(k)}:{t}" for t in _orders(v)] for k, v in value.items()]
        return ["{" + ",".join(m) + "}" for order in itertools.permutations(items)
                for m in itertools.product(*order)]  # fmt: skip
    if isinstance(value, list):
        return ["[" + ",".join(m) + "]" for m in itertools.product(*map(_orders, value))]
    return [json.dumps(value)]


def test_key_order_any_matches_const_and_enum_objects_in_every_key_order(smol_tokenizer):
    """The spec compares objects as sets of members: under key_order='any' a const/enum object
    (nested, inside arrays) is accepted in every key order, and nothing else is."""

    def member(g, text):
        ids = smol_tokenizer.encode(text)
        state = g.walk(ids)
        return state is not None and g.is_accepting(state) and g.check(ids) is None

    nested = {"id": 7, "tags": [{"k": "a", "v": [1, {"x": None, "y": True}]}, "t"], "ok": False}
    big = {f"p{i}": i for i in range(5)}  # more names than MAX_PERMUTED: the check counts keys
    cases = [
        (
            {"const": {"a": 1, "b": 2}},
            [{"a": 1, "b": 2}],
            ['{"a":1}', '{"a":1,"b":2,"c":3}', '{"a":1,"b":3}', '{"a":1,"a":1}'],
        ),
        (
            {"type": "object", "const": nested},
            [nested],
            [
                '{"id":7,"ok":false}',
                '{"ok":false,"id":7,"tags":["t",{"k":"a","v":[1,{"x":null,"y":true}]}]}',
                '{"tags":[{"k":"a","v":[{"x":null,"y":true},1]},"t"],"ok":false,"id":7}',
            ],
        ),
        (
            {"enum": [big, "s", [{"q": 1, "r": 2}], {"a": [1]}]},
            [big, "s", [{"q": 1, "r": 2}], {"a": [1]}],
            [
                '{"p0":0,"p1":1,"p2":2,"p3":3}',
                '{"p0":0,"p1":1,"p2":2,"p3":3,"p4":4,"p0":0}',
                '[{"q":1}]',
                '[{"q":1,"r":2},{"q":1,"r":2}]',
                '{"a":[1,1]}',
                '"t"',
            ],
        ),
        ({"type": "string", "enum": [{"a": 1, "b": 2}, "s"]}, ["s"], ['{"b":2,"a":1}']),
    ]
    for schema, values, rejected in cases:
        g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", key_order="any")
        fixed = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
        for value in values:
            texts = _orders(value)[:24]
            assert all(member(g, t) for t in texts), (schema, value)
            written = json.dumps(value, separators=(",", ":"))
            assert member(fixed, written)  # the schema's order: as written only
            assert all(not member(fixed, t) for t in texts if t != written)
        for text in rejected:
            assert not member(g, text), (schema, text)
    small = Grammar.from_json_schema({"const": {"a": 1, "b": 2}}, smol_tokenizer, key_order="any")
    assert not small.checked  # two keys: the union of their orders, in the masks
    with pytest.raises(EmptyLanguageError):  # an enum beside the const still constrains it
        Grammar.from_json_schema({"const": {"a": 1, "b": 2}, "enum": [{"a": 2, "b": 2}]},
                                 smol_tokenizer, key_order="any")  # fmt: skip


def test_key_order_any_merges_parts_before_the_engine_orders_them(smol_tokenizer):
    """Objects whose keys come from several parts (allOf members, a $ref beside properties,
    oneOf/anyOf branches, dependencies) admit every key order, with the parts' constraints."""

    def member(g, text):
        ids = smol_tokenizer.encode(text)
        state = g.walk(ids)
        return state is not None and g.is_accepting(state) and g.check(ids) is None

    def grammar(schema):
        return Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", key_order="any",
                                        strict=False)  # fmt: skip

    merged = grammar({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                {"properties": {"b": {"type": "string"}}}]})  # fmt: skip
    for text, valid in {'{"b":"x","a":1}': True, '{"a":1,"b":"x"}': True, '{"b":"x"}': False,
                        '{"b":1,"a":1}': False, '{"a":1,"a":2}': False}.items():  # fmt: skip
        assert member(merged, text) == valid, text
    one_of = [{"properties": {"a": {"const": 1}}, "required": ["a"]},
              {"properties": {"a": {"const": 2}}, "required": ["b"]}]  # fmt: skip
    branches = grammar({"properties": {"a": {}, "b": {}}, "additionalProperties": False,
                        "oneOf": one_of})  # fmt: skip
    for text, valid in {'{"b":"x","a":1}': True, '{"a":2,"b":1}': True, '{"b":1}': True,
                        '{"a":3}': False, '{"a":1,"c":1}': False, '{}': False}.items():  # fmt: skip
        assert member(branches, text) == valid, text
    with_ref = grammar({"$defs": {"base": {"properties": {"id": {"type": "integer"}},
                                           "required": ["id"]}},
                        "$ref": "#/$defs/base", "properties": {"name": {"type": "string"}},
                        "required": ["name"], "unevaluatedProperties": False})  # fmt: skip
    for text, valid in {'{"name":"n","id":1}': True, '{"id":1,"name":"n"}': True,
                        '{"name":"n"}': False, '{"id":"1","name":"n"}': False,
                        '{"id":1,"name":"n","x":0}': False}.items():  # fmt: skip
        assert member(with_ref, text) == valid, text
    depends = grammar({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "dependentRequired": {"a": ["b"]}})  # fmt: skip
    for text, valid in {'{"b":2,"a":1}': True, '{"a":1}': False, '{"b":2}': True}.items():
        assert member(depends, text) == valid, text
    patterned = grammar({"properties": {"x_a": {"type": "integer"}},
                         "patternProperties": {"^x_": {"type": "number"}}})  # fmt: skip
    for text, valid in {'{"x_b":0.5,"x_a":1}': True, '{"x_a":1.5}': False,
                        '{"x_a":"s"}': False}.items():  # fmt: skip
        assert member(patterned, text) == valid, text
    # more ways than MAX_MERGED: the masks keep the object's own listing, the check the rest
    pick = [{"anyOf": [{"properties": {f"k{i}": {"const": 0}}},
                       {"properties": {f"k{i}": {"const": 1}}}]} for i in range(5)]  # fmt: skip
    many = grammar({"properties": {f"k{i}": {"type": "integer"} for i in range(5)},
                    "allOf": pick})  # fmt: skip
    assert "allOf" in [c.keyword for c in many.checked]
    assert member(many, '{"k4":1,"k0":0}') and not member(many, '{"k4":2,"k0":0}')


def test_formats_are_asserted_by_default_and_annotations_on_request(smol_tokenizer):
    schema = {"type": "string", "format": "date"}
    asserted = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    annotation = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="",
                                          formats="annotation")  # fmt: skip
    assert accepts(asserted, smol_tokenizer, '"2024-02-29"')
    assert not accepts(asserted, smol_tokenizer, '"2023-02-29"')
    assert accepts(annotation, smol_tokenizer, '"2023-02-29"') and not annotation.checked
    with pytest.raises(InvalidArgumentError, match="formats must be 'assert' or 'annotation'"):
        Grammar.from_json_schema(schema, smol_tokenizer, formats="ignore")
    with pytest.raises(InvalidArgumentError, match="key_order must be 'schema' or 'any'"):
        Grammar.from_json_schema(schema, smol_tokenizer, key_order="sorted")
    with pytest.raises(InvalidArgumentError, match="key_order='any' needs backend='pushdown'"):
        Grammar.from_json_schema(schema, smol_tokenizer, key_order="any", backend="automaton")


@pytest.mark.parametrize(
    "pattern",
    ["^(?!x)[a-z]{1,6}$", "(a)\\1", "^(?=[^=]+$)(?!\\s+$)(.|\\n)+$", "a(?=\\))\\)", "(?<=a)b",
     "[(?=]x", "^(?:(a)|b)\\1?c$"],
)  # fmt: skip
def test_a_pattern_without_its_assertions_matches_every_string_the_pattern_does(pattern):
    import itertools

    from hf_fvo.grammar.schema.patterns import without_assertions

    wider = re.compile(without_assertions(pattern))
    strings = ["".join(t) for n in range(5) for t in itertools.product("abcx)=\n ", repeat=n)]
    matched = [s for s in strings if re.search(pattern, s)]
    assert matched  # the pattern matches something here
    assert all(wider.search(s) for s in matched)


def test_an_extra_key_never_spells_a_listed_name_with_escapes(smol_tokenizer):
    """llguidance 1.9.1 admits any ``\\uXXXX`` in the key of an extra property where it excludes
    the listed names, so ``{"\\u0061": 1}`` (the key ``a``, listed as a string) passed as an
    extra key. hf_fvo's own grammar excludes every spelling of the listed names; where the JSON
    mode compiles a schema, its masks admit only the escapes its strings are built from."""
    own = {"type": "object", "properties": {"a": {"type": "string"}},
           "additionalProperties": {"type": "integer"}}  # fmt: skip
    engine = {**own, "patternProperties": {"^x": {"type": "integer"}}}  # not lowered
    for schema in (own, engine):
        g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
        assert not g.checked  # the masks decide alone
        assert ("start: %json" in g._definition) == (schema is engine)
        for text, valid in {'{"\\u0061":1}': False, '{"b":1}': True, '{"a":"s","b":2}': True,
                            '{"a":"\\n\\u001f"}': True,
                            '{"\\/":1}': schema is own}.items():  # fmt: skip
            assert accepts(g, smol_tokenizer, text) == valid, (text, schema)


def test_a_format_the_engine_cannot_intersect_with_a_pattern_goes_to_the_check(smol_tokenizer):
    """llguidance cannot decide whether this pattern (MaskBench's o69972) meets format email:
    the compiler retries with the format left to the final check instead of refusing."""
    schema = {"type": "string", "format": "email", "minLength": 6,
              "pattern": r"^\w+([\.-]?\w+)*@\w+([\.-]?\w+)*(\.\w{2,})+$"}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert [(c.pointer, c.keyword) for c in g.checked] == [("#/format", "format")]
    with pytest.raises(UnsupportedSchemaError, match="Unable to determine if regex is empty"):
        Grammar.from_json_schema(schema, smol_tokenizer, checks=False)
    for text, valid in {'"ann@example.org"': True, '"ann@example"': False,
                        '"ann@exa_mple.org"': False}.items():  # fmt: skip
        ids = smol_tokenizer.encode(text)
        state = g.walk(ids)
        member = state is not None and g.is_accepting(state) and g.check(ids) is None
        assert member == valid, text


def test_a_schema_too_large_for_the_engine_leaves_its_complements_to_the_check(smol_tokenizer):
    """JSONSchemaBench's ``tson`` (if/then/else, not and oneOf throughout) exceeds llguidance's
    schema size with every complement built; the compiler retries with the complements left to
    the final check, and what the grammar then admits is judged by the spec's validation."""
    import jsonschema

    row = json.loads((Path(__file__).resolve().parents[1] / "data" / "engine_limits.jsonl")
                     .read_text())  # fmt: skip
    g = Grammar.from_json_schema(row["schema"], smol_tokenizer, strict=False, whitespace="")
    reasons = {c.reason for c in g.checked}
    assert "left to the check: with complements the engine's grammar is too large" in reasons
    ids = g.completion(g.initial_state)  # the shortest text the masks admit
    text = smol_tokenizer.decode(ids)
    valid = jsonschema.validators.validator_for(row["schema"])(row["schema"]).is_valid(
        json.loads(text)
    )
    assert (g.check(ids) is None) == valid, text


def test_free_strings_and_integers_admit_every_spelling_json_allows(smol_tokenizer):
    """hf_fvo's own lexemes (hf_fvo.grammar.schema.lark): a free string in every escape form
    and character JSON allows, lengths counted in characters however spelled; an integer with a
    zero fraction or an exponent that keeps it integral (integers since draft 6) and finite
    for Python's json (1e400 would read as inf)."""
    g = Grammar.from_json_schema({"type": "string"}, smol_tokenizer, whitespace="")
    for text, valid in {'"\\/"': True, '"\\u0061\\u00E9"': True, '"\\ud83d\\ude00"': True,
                        '"\x7f"': True, '"\\uD83D\\uDE00"': True, '"\\ud83d"': False,
                        '"\\x41"': False, '"\\u12"': False, '"\t"': False}.items():  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == valid, text
    one = Grammar.from_json_schema({"type": "string", "maxLength": 1}, smol_tokenizer,
                                   whitespace="")  # fmt: skip
    for text, valid in {'"\\u0061"': True, '"\\ud83d\\ude00"': True, '"\\/"': True,
                        '"ab"': False, '"\\u0061b"': False}.items():  # fmt: skip
        assert accepts(one, smol_tokenizer, text) == valid, text
    ints = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}},
                                    smol_tokenizer, whitespace="")  # fmt: skip
    for text, valid in {"[1.0,-2.0,0.0]": True, "[1e2,1E+2,1.00e3]": True, "[0e-5,-0]": True,
                        "[9007199254740992.0]": True, "[1.5]": False, "[1e-2]": False,
                        "[01]": False, "[1.]": False, "[1e400]": False}.items():  # fmt: skip
        assert accepts(ints, smol_tokenizer, text) == valid, text


def test_own_lexemes_keep_listed_names_constants_and_patterns_canonical(smol_tokenizer):
    """What the own grammar leaves canonical (so finite languages keep few members), and that
    an extra key never spells a listed name in any spelling."""
    schema = {"type": "object", "properties": {"a": {"type": "string"},
                                               "c": {"enum": ["x"]},
                                               "p": {"type": "string", "pattern": "^[a-z]$"}},
              "additionalProperties": {"type": "integer"}}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert "start: %json" not in g._definition  # hf_fvo's own grammar
    for text, valid in {'{"a":"\\u0061"}': True, '{"\\u0061":1}': False, '{"\\u0062":1}': True,
                        '{"c":"x"}': True, '{"c":"\\u0078"}': False, '{"p":"q"}': True,
                        '{"p":"\\u0071"}': False, '{"a":"s","b":1.0}': True}.items():  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == valid, text
    counted = {
        "type": "object",
        "patternProperties": {"^x": {"type": "integer"}},
        "minProperties": 1,
    }  # (a count of properties is not lowered)
    fallback = Grammar.from_json_schema(counted, smol_tokenizer, whitespace="")
    assert "start: %json" in fallback._definition  # not lowered: llguidance's JSON mode
    assert any(n.startswith("written as llguidance's JSON mode") for n in fallback.notes)
    assert not g.notes
    assert accepts(fallback, smol_tokenizer, '{"x1":1}')
    assert not accepts(fallback, smol_tokenizer, '{"x1":1.0}')  # its canonical integers


def test_pattern_properties_are_lowered_where_one_schema_covers_every_other_key(smol_tokenizer):
    """``patternProperties`` with no other extra key (strict objects say so) is written with
    hf_fvo's lexemes: a key through the pattern's ``%json`` leaf (found anywhere, as the JSON
    mode reads it), its value with every JSON spelling (``2.0``, ``\\u0061``), so a string
    value gets the free-string certificate of the budget rule. Where a listed name matches a
    pattern (it needs both schemas), the patterns' schemas differ, or other keys are
    admitted, the JSON mode decides as before."""
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "integer"}, "[0-9]$": {"type": "integer"}},
    }
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert "start: %json" not in g._definition and g.budget_rule._marked is not None
    for text, valid in {'{"id":"a","x-a":2}': True, '{"x-a":2.0,"b1":3}': True, '{}': True,
                        '{"id":"\\u0061"}': True, '{"x-a":"s"}': False, '{"y":1}': False,
                        '{"x-a":1,"id":"a"}': False,  # (listed names first: the JSON mode's order)
                        '{"X-a":1}': False}.items():  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == valid, text
    two = {"^x-": {"type": "integer"}, "^y-": {"type": "string"}}  # two schemas
    for other in ({**schema, "properties": {"x-id": {"type": "string"}}},  # a name that matches
                  {**schema, "patternProperties": two},
                  {**schema, "additionalProperties": {"type": "boolean"}}):  # fmt: skip
        fallback = Grammar.from_json_schema(other, smol_tokenizer, whitespace="")
        assert "start: %json" in fallback._definition, other


def test_own_grammar_merges_object_parts_and_places_unlisted_required_names(smol_tokenizer):
    """An allOf of object parts lowered with hf_fvo's lexemes: the names in the order the parts
    list them, required names no part declares after the declared ones (the JSON mode's text
    conventions), each name with every part's constraint."""
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"},
                                                          "n": {"type": "integer"}}},
                        {"properties": {"a": {"minimum": 0}}, "required": ["a", "b"]}]}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", strict=False)
    assert "start: %json" not in g._definition
    for text, valid in {'{"a":1,"n":2.0,"b":"\\u0061"}': True, '{"a":1,"b":null,"c":[]}': True,
                        '{"b":1,"a":1}': False, '{"a":1}': False, '{"a":-1,"b":0}': False,
                        '[1]': False}.items():  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == valid, text


def test_keys_written_with_escapes(smol_tokenizer):
    """The spec's suite's escaped keys (``{"foo\\nbar": 1}``), as a listed name (its control
    character in either escape) and as an extra key (every spelling JSON allows)."""
    schema = {"type": "object", "properties": {"foo\nbar": {"type": "integer"}},
              "additionalProperties": {"type": "string"}}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    for text, valid in {'{"foo\\nbar":1}': True, '{"foo\\u000Abar":1.0}': True,
                        '{"foo\\nbar":"x"}': False, '{"\\u00e9\\"":"x"}': True,
                        '{"foo\\nbar":1,"foo\\tbar":"\\ud83d\\ude00"}': True}.items():  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == valid, text


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_draft_04_integers_have_no_fraction(smol_tokenizer, backend):
    """Draft 4 defines an integer as a number without a fraction or exponent (MaskBench o24544
    labels {"id": 12345.0} invalid); from draft 6 on 1.0 is an integer."""
    for draft, valid in (("http://json-schema.org/draft-04/schema#", False),
                         ("http://json-schema.org/draft-06/schema#", True)):  # fmt: skip
        schema = {"$schema": draft, "type": "array", "items": {"type": "integer"}}
        g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", backend=backend)
        assert accepts(g, smol_tokenizer, "[1]")
        assert accepts(g, smol_tokenizer, "[12345.0]") == valid, draft


def test_an_object_with_hundreds_of_properties_compiles_in_the_json_mode(smol_tokenizer):
    # hf_fvo's own Lark writes an object's members as a chain of rules, on which llguidance
    # overflowed the native stack (a segfault at 3000 properties): long objects go to the JSON
    # mode, which says so in the notes
    from hf_fvo.grammar.schema.lark import MAX_MEMBERS

    props = {f"p{i}": {"type": "integer"} for i in range(MAX_MEMBERS + 1)}
    g = Grammar.from_json_schema({"type": "object", "properties": props}, smol_tokenizer,
                                 whitespace="")  # fmt: skip
    assert any(n.startswith("written as llguidance's JSON mode") for n in g.notes)
    text = '{"p0":1,"p256":2}'
    assert g.is_accepting(g.walk(smol_tokenizer.encode(text)))
    assert g.walk(smol_tokenizer.encode('{"p256":2,"p0":1}')) is None  # schema order


def test_a_type_beside_any_of_is_lowered_into_each_branch(smol_tokenizer):
    """``{"type": T, "anyOf": [...]}`` (the format expansion writes it: a format applies to
    strings only) is lowered with hf_fvo's lexemes as the branches each cut to T, the branches
    no value of T satisfies dropped; the language is the schema's (jsonschema, formats
    asserted). Before, the whole schema went to llguidance's JSON mode (Snowplow sp_367's
    ``host``), without the budget rule's string certificates."""
    schema = {
        "type": "object",
        "properties": {
            "host": {"type": "string", "anyOf": [{"format": "ipv4"}, {"pattern": "^[a-z]+$"}]},
            "n": {"type": ["integer", "string"],
                  "anyOf": [{"type": "number", "minimum": 3}, {"maxLength": 1},
                            {"type": "boolean"}]},
        },
        "additionalProperties": False,
    }  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    assert "start: %json" not in g._definition and not g.notes
    import jsonschema

    check = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for text in ['{"host":"1.2.3.4"}', '{"host":"abc"}', '{"host":"1.2.3"}', '{"host":"A"}',
                 '{"host":3}', '{"n":3}', '{"n":2}', '{"n":3.5}', '{"n":"x"}', '{"n":"xy"}',
                 '{"n":true}', '{"n":null}', '{"host":"9.9.9.9","n":"7"}']:  # fmt: skip
        assert accepts(g, smol_tokenizer, text) == check.is_valid(json.loads(text)), text
