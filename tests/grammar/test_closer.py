"""The schema's closings (hf_fvo.grammar.schema.closer): a JSON prefix read against its schema,
and what finishes it in few bytes, the certificates the budget rule tries before a search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_fvo.grammar.schema.closer import JsonCursor
from hf_fvo.grammar.schema.prepare import prepare_json_schema

DATA = Path(__file__).resolve().parents[1] / "data"

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2},
        "kind": {"enum": ["staff", "guest"]},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "home": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]},
    },
    "required": ["name", "kind", "tags"],
}  # fmt: skip


def _closed(schema: dict, prefix: str) -> list[str]:
    cursor = JsonCursor.start(schema).feed(prefix.encode())
    assert cursor is not None, prefix
    return cursor.closings()


@pytest.mark.parametrize("prefix, closing", [
    ("", '{"name":"aa","kind":"staff","tags":["",""]}'),
    ('{"', 'name":"aa","kind":"staff","tags":["",""]}'),
    ('{"na', 'me":"aa","kind":"staff","tags":["",""]}'),
    ('{"name":"J', 'a","kind":"staff","tags":["",""]}'),  # padded to minLength
    ('{"name":"Jo","kind":"gu', 'est","tags":["",""]}'),  # finished to the enum value
    ('{"name":"Jo","kind":"guest","age":-', '1,"tags":["",""]}'),
    ('{"name":"Jo","kind":"guest","tags":["x"', ',""]}'),  # minItems
    ('{"name":"Jo","kind":"guest","tags":["x",', '""]}'),  # an item after the comma
    ('{"name":"Jo","kind":"guest","tags":["x","y"],"home":{', '"city":""}}'),
    ('{"name":"Jo","kind":"guest","tags":["x","y"],"home":{"city":"Oslo"}', "}"),
    ('{"name":"Jo", "kind" : "guest","tags":["x","y"],"extra":t', "rue}"),
    ('{"name":"Jo\\u00', None),  # inside an escape: no closing
])  # fmt: skip
def test_a_closing_finishes_each_open_lexeme_and_container_with_what_the_schema_requires(
    prefix, closing
):
    """The lexeme is finished (a key to a listed name, a string to its minLength or an enum
    value, a number to a digit, a literal), then each open container gets the required keys
    and the items it still lacks, each the shortest value, and its close."""
    found = _closed(PERSON, prefix)
    assert (found[0] if found else None) == closing
    if closing is not None:
        assert json.loads(prefix + closing)  # well-formed


def test_a_key_begun_is_finished_to_each_listed_name_it_begins_required_ones_first():
    schema = {"type": "object", "properties": {"alpha": {"type": "integer"},
              "also": {"type": "null"}}, "required": ["also"]}  # fmt: skip
    assert _closed(schema, '{"al') == ['so":null}', 'pha":0,"also":null}', '":0,"also":null}']


def test_text_that_is_not_json_has_no_cursor():
    start = JsonCursor.start(PERSON)
    for text in ('{"a" "b"', "]", '{"a":1}}', '{"a":tru ', '{"a":"\x01'):
        assert start.feed(text.encode()) is None, text


def test_a_character_split_across_tokens_waits_for_its_last_byte():
    start = JsonCursor.start({"type": "string"})
    half = start.feed('"é'.encode()[:2])
    assert half is not None and half.closings() == []  # (inside a character)
    assert half.feed('"é'.encode()[2:]).closings() == ['"']


def _valid_instances(path: Path) -> list[tuple[dict, str, bool]]:
    """Each valid instance: the prepared schema, the compact text, and whether the instance
    is a member of the prepared schema (``strict`` closes objects the source left open)."""
    from jsonschema import Draft202012Validator

    out = []
    for row in map(json.loads, path.open()):
        body = prepare_json_schema(row["schema"]).schema
        member = Draft202012Validator(body).is_valid
        for case in row["tests"]:
            if case["valid"]:
                text = json.dumps(case["data"], ensure_ascii=False, separators=(",", ":"))
                out.append((body, text, member(case["data"])))
    return out


def test_every_prefix_of_every_valid_instance_is_read_and_closed_to_well_formed_json():
    """The MaskBench slice's valid instances (real schemas, instances nobody here wrote), cut at
    every character: the cursor reads each prefix (a JSON prefix is never taken for broken
    text); where it writes closings, prefix plus closing is one JSON document; and along a
    member of the prepared schema it writes one at every character outside an escape."""
    read = 0
    for body, text, member in _valid_instances(DATA / "maskbench_slice.jsonl"):
        cursor = JsonCursor.start(body)
        for i, c in enumerate(text):
            cursor = cursor.feed(c.encode())
            assert cursor is not None, (text[: i + 1][-60:], c)
            for closing in cursor.closings():
                json.loads(text[: i + 1] + closing)
            read += 1
            lexeme = cursor._lexeme
            if member and not (lexeme and lexeme.escape):
                assert cursor.closings(), text[: i + 1][-60:]
    assert read > 10_000


def test_a_string_begun_under_an_anchored_pattern_is_finished_to_a_match():
    """``"pbj:gd`` under ``^pbj:[a-z]+:[a-z]+$`` (MaskBench o42568's kind): the closing
    finishes the match the text began; the pattern's shortest match after it would not."""
    schema = {"type": "string", "pattern": "^pbj:[a-z]+:[a-z]+$"}
    assert _closed(schema, '"pbj:gd')[0] == ':a"'


def test_the_cheapest_branch_closes_an_object_first():
    """A ``oneOf`` whose first branch needs more keys (MaskBench o65917's kind): the first
    closing is the shorter branch's, whatever order the schema lists them in."""
    long = {
        "required": ["status", "mode", "user", "group"],
        "properties": {k: {"type": "string"} for k in ("status", "mode", "user", "group")},
    }
    short = {"required": ["error"], "properties": {"error": {"type": "string"}}}
    schema = {"type": "object", "properties": {"name": {"type": "string"}},
              "required": ["name"], "oneOf": [long, short]}  # fmt: skip
    assert _closed(schema, '{"name":"x"')[0] == ',"error":""}'


def test_after_a_comma_the_closing_writes_the_cheapest_key_the_schema_s_order_still_allows():
    """A comma asks for one more key of an object that needs none: the closing writes the
    cheapest member among the names the schema's order still allows (JSONSchemaBench's
    docker-seq, spelled indented at exactly its own budget, lost its newline before
    ``"platform": ""`` where the closing took the next listed name, ``"read_only":true``, two
    tokens longer), never a name the order has passed (``tty``, cheaper still)."""
    flag, text = {"type": "boolean"}, {"type": "string"}
    schema = {"type": "object", "properties": {"tty": flag, "mount": {"type": "array"},
              "read_only": flag, "platform": text}}  # fmt: skip
    assert _closed(schema, '{"mount":[],')[0] == '"platform":""}'


@pytest.mark.parametrize("prefix, head", [
    (b'"a\\', b'\\"'),  # an escaped backslash, then the quote
    (b'"a\\u00', b'41"'),  # \u0041, then the quote
    (b'"a\\uda', b'00\\udc00"'),  # a high surrogate's digits, then its low surrogate
    (b'"a\\uD83D\\', b'udc00"'),  # the rest of the low surrogate
    (b'"a\\uD83D\\uDE', b'00"'),
    ('"é'.encode()[:2], b'\x80"'),  # the first valid continuation byte, then the quote
])  # fmt: skip
def test_a_character_or_escape_left_open_is_finished_before_the_closing(prefix, head):
    cursor = JsonCursor.start({"type": "string"}).feed(prefix)
    closing = next(cursor.each_closing_bytes())
    assert closing == head and json.loads(prefix + closing) is not None


def test_a_surrogate_pair_s_escapes_are_one_character_and_a_lone_surrogate_breaks_the_text():
    """hf_fvo's JSON strings spell a character above U+FFFF as two escapes, high then low, and
    refuse a lone surrogate (llguidance's lexemes alike): the cursor reads the pair as one
    character, finishes a begun pair with its low surrogate (a high one alone is no closing:
    Snowplow sp_305's drawn instances lost ``\\uda`` at any budget), and stops where a text
    leaves a surrogate alone."""
    node = {"type": "string", "maxLength": 2}
    start = JsonCursor.start(node)
    assert start.feed(b'"\\ud83d\\ude00x').string_value == ("\U0001f600x", (node,))
    for lone in (b'"\\ud83d"', b'"\\ud83dx', b'"\\ud83d\\n', b'"\\ud83d\\u0041', b'"\\ude00'):
        assert start.feed(lone) is None, lone
    for begun in (b'"\\ud8', b'"\\uDBFF', b'"\\ud83d\\u', b'"\\udb40\\uDc'):
        closing = next(start.feed(begun).each_closing_bytes())
        assert len(json.loads(begun + closing)) == 1, (begun, closing)


def test_an_escape_s_digits_are_finished_in_the_fewest_tokens_the_cost_counts():
    """Where the closings' cost counts a vocabulary's tokens, an escape's digits are finished
    with the cheapest hex that is no surrogate (SmolLM2 spells ``ffff`` in one token and
    ``0041`` in four: a member ``\\u00ed`` at exactly its own budget was refused after ``\\``
    and ``u``, the closing three tokens longer than the member's rest)."""
    cost = {"ffff": 1, "ff": 1, "fff": 1}.get
    cursor = JsonCursor.start({"type": "string"}, cost=lambda text: cost(text, len(text)))
    assert next(cursor.feed(b'"\\u').each_closing_bytes()) == b'ffff"'
    assert next(cursor.feed(b'"\\ud').each_closing_bytes()) == b'000"'  # (\udfff: a surrogate)
    assert next(JsonCursor.start({"type": "string"}).feed(b'"\\u').each_closing_bytes()) == b'0041"'
