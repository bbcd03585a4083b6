"""The literal-text lower bound on a JSON schema member's tokens (hf_fvo.grammar.schema.literals)
is a lower bound: it never exceeds the tokens of a text that holds the blocks, on random
vocabularies and texts, nor the tokens of members the grammar accepts on the development set; and
it turns the large required-key schemas' refusals at 256 tokens into proofs. The same holds where
each object's members may come in any order (``key_order="any"``, ``unordered_blocks``)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_fvo import Grammar
from hf_fvo.errors import BudgetTooSmallError, GrammarError
from hf_fvo.grammar.schema.literals import (
    fewest_tokens,
    fewest_tokens_unordered,
    literal_blocks,
    unordered_blocks,
)

DATA = Path(__file__).resolve().parents[1] / "data"
_ALPHABET = b'ab{":'


def _fewest_spelling(text: bytes, vocab: set[bytes]) -> int:
    """The fewest tokens that spell ``text`` exactly (a shortest path over its positions)."""
    best = [0] + [len(text) + 1] * len(text)
    for a in range(len(text)):
        for b in range(a + 1, len(text) + 1):
            if text[a:b] in vocab:
                best[b] = min(best[b], best[a] + 1)
    return best[-1]


_piece = st.binary(min_size=1, max_size=6).map(lambda b: bytes(_ALPHABET[x % 3] for x in b))


_class = st.sets(st.sampled_from(_ALPHABET[:3]), min_size=2, max_size=2).map(frozenset)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(tokens=st.lists(_piece.filter(lambda t: len(t) > 1), max_size=30),
       blocks=st.lists(st.one_of(_piece, _class), max_size=3))  # fmt: skip
def test_the_bound_never_exceeds_the_tokens_of_any_text_holding_the_blocks(tokens, blocks):
    """Against the fewest tokens over every text that puts at most one byte before, between and
    after the blocks (where tokens that straddle free text and a block matter most) and any of
    a class block's bytes in its place."""
    vocab = {bytes([c]) for c in _ALPHABET[:3]} | set(tokens)  # every byte spelled, as in BPE
    free = [b""] + [bytes([c]) for c in _ALPHABET[:3]]
    spellings = [[b] if isinstance(b, bytes) else [bytes([x]) for x in sorted(b)] for b in blocks]
    fewest = min(
        _fewest_spelling(gaps[0] + b"".join(map(bytes.__add__, spelled, gaps[1:])), vocab)
        for spelled in itertools.product(*spellings)
        for gaps in itertools.product(free, repeat=len(blocks) + 1)
    )
    assert fewest_tokens(blocks, list(vocab)) <= fewest


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tokens=st.lists(_piece.filter(lambda t: len(t) > 1), max_size=30),
       segments=st.lists(st.lists(_piece, min_size=1, max_size=2), min_size=1,
                         max_size=3))  # fmt: skip
def test_the_unordered_bound_never_exceeds_the_tokens_of_any_arrangement(tokens, segments):
    """Every order of the segments, at most one byte before, between and after their blocks:
    the text that a token straddling two segments (both ways round) makes shortest."""
    vocab = {bytes([c]) for c in _ALPHABET[:3]} | set(tokens)
    free = [b""] + [bytes([c]) for c in _ALPHABET[:3]]
    fewest = min(
        _fewest_spelling(gaps[0] + b"".join(map(bytes.__add__, blocks, gaps[1:])), vocab)
        for order in itertools.permutations(segments)
        for blocks in [[b for seg in order for b in seg]]
        for gaps in itertools.product(free, repeat=len(blocks) + 1)
        if len(blocks) <= 4 or gaps.count(b"") >= len(gaps) - 2  # (bounded: ≤ 2 bytes free)
    )
    assert fewest_tokens_unordered(segments, list(vocab)) <= fewest


def test_unordered_blocks_cut_where_members_may_move():
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "string"}, "y": {}},
              "required": ["x", "y"]},
        "b": {"type": "integer"},
    }, "required": ["a", "b"], "minProperties": 3}  # fmt: skip
    assert unordered_blocks(schema) == [
        [b"{"],
        [b'"a":{'],
        [b'"x":"', b'"'],
        [b'"y":'],
        [b"}"],
        [b'"b":', frozenset(b"0123456789")],  # (a number's last byte)
        [b'"', b'":'],
        [b"}"],
    ]  # (the third member minProperties asks: a key's quotes and colon)
    flat = [b for seg in unordered_blocks(schema) for b in seg if seg != [b'"', b'":']]
    assert flat == literal_blocks(schema)  # the ordered reading's blocks, cut between members


def test_blocks_follow_the_grammars_spelling_of_required_names():
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "opt": {"type": "integer"},
        "b\n": {"enum": [1, 2]},
    }, "required": ["b\n", "a"]}  # fmt: skip
    assert literal_blocks(schema) == [b"{", b'"a":["', b'","', b'"', b"]", b'"b', b'":', b"}"]
    assert literal_blocks(schema, compact=False)[:4] == [b"{", b'"a"', b":", b"["]


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").open()]


@pytest.mark.parametrize("name", ["jsonschemabench_slice", "maskbench_slice", "required_keys"])
def test_the_bound_never_exceeds_a_member_the_grammar_accepts(smol_tokenizer, name):
    """Slices of the development set (nobody here wrote them): the bound is at most the tokens of
    the built member and of every listed valid instance (compact) that the grammar accepts."""
    checked = 0
    for row in _rows(name):
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="",
                                         strict="tests" not in row)  # fmt: skip
        except GrammarError:
            continue
        rule = getattr(g, "budget_rule", None)
        if rule is None or rule._lower is None:
            continue  # no bound given (an automaton grammar, or keys in any order)
        floor = fewest_tokens(literal_blocks(rule._lower.args[0]), g._vocab.token_bytes)
        upper = g.tokens_to_accept(g.initial_state)
        assert upper is None or floor <= upper, row.get("name") or row.get("file")
        for test in row.get("tests", []):
            if test["valid"]:
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                ids = smol_tokenizer.encode(text)
                state = g.walk(ids)
                if state is not None and g.is_accepting(state):
                    assert floor <= len(ids), (row["file"], text)
                    checked += 1
        checked += upper is not None
    assert checked >= len(_rows(name)) // 2


@pytest.mark.parametrize("name", ["maskbench_slice", "required_keys", "object_keys"])
def test_the_any_order_bound_never_exceeds_a_member_in_its_own_order(smol_tokenizer, name):
    """key_order='any' on development-set slices: the lower bound at the start is at most the
    upper one (a member the check passes) and the tokens of every listed valid instance, written
    in its own key order, that the masks and the check accept."""
    checked = 0
    for row in _rows(name):
        try:
            g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="",
                                         strict="tests" not in row, key_order="any")  # fmt: skip
        except GrammarError:
            continue
        lower, upper = g.shortest_bounds(g.initial_state)
        label = row.get("name") or row.get("file")
        if upper is not None:
            text = smol_tokenizer.decode(g.completion(g.initial_state) or [])
            assert lower <= upper, (label, text)
            checked += 1
        for test in row.get("tests", []):
            if test["valid"]:
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                ids = smol_tokenizer.encode(text)
                state = g.walk(ids)
                if state is not None and g.is_accepting(state) and g.check(ids) is None:
                    assert lower <= len(ids), (label, text)
                    checked += 1
    assert checked >= len(_rows(name)) // 2


@pytest.mark.parametrize("row", _rows("required_keys"), ids=lambda r: r.get("name") or r["file"])
def test_large_required_key_schemas_are_refused_at_256_tokens_with_a_proof(smol_tokenizer, row):
    """Members of hundreds of required keys (409 and 786 tokens built): before the literal bound
    a refusal at 256 could not be proven (a regular superset has too many states)."""
    g = Grammar.from_json_schema(row["schema"], smol_tokenizer, whitespace="",
                                 strict="tests" not in row)  # fmt: skip
    lower, upper = g.shortest_bounds(g.initial_state)
    assert upper is not None and 255 < lower <= upper
    assert isinstance(g.budget_refusal(g.initial_state, 256, "256 tokens"), BudgetTooSmallError)
