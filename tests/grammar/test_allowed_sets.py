"""The admissible sets A_t are exact: equal to brute-force partial matching at every state."""

from __future__ import annotations

import itertools

import pytest

from hf_fvo.grammar import TokenVocabulary
from tests.grammar.bruteforce import bfs_states
from tests.grammar.cases import CASE_IDS, CASES, CHOICES

BFS_DEPTH = 6


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_allowed_sets_equal_bruteforce_partial_matching(tokenizer, case):
    grammar = case.build(tokenizer)
    token_bytes = TokenVocabulary.from_tokenizer(tokenizer).token_bytes
    oracle = case.oracle(grammar)
    states = bfs_states(grammar, token_bytes, BFS_DEPTH)
    assert len(states) > 3
    for state, prefix in states.items():
        got = set(grammar.allowed_token_ids(state).tolist())
        expected = oracle.allowed(prefix, token_bytes)
        assert got == expected, (
            f"{case.name} state {state} after {prefix!r}: missing "
            f"{[token_bytes[t] for t in sorted(expected - got)[:5]]}, extra "
            f"{[token_bytes[t] for t in sorted(got - expected)[:5]]}"
        )
        assert grammar.is_accepting(state) == oracle.is_member(prefix)
        mask = grammar.allowed(state)
        assert bool(mask[grammar.eos_token_id]) == oracle.is_member(prefix)


def _dyck_members(max_length: int, depth: int) -> list[str]:
    out = []
    for n in range(0, max_length + 1, 2):
        for chars in itertools.product("()", repeat=n):
            level, ok = 0, True
            for c in chars:
                level += 1 if c == "(" else -1
                ok &= 0 <= level <= depth
            if ok and level == 0:
                out.append("".join(chars))
    return out


FINITE_LANGUAGES = {
    "choices": (lambda g, tok: g.from_choices(CHOICES, tok), CHOICES),
    "dyck_3_10": (lambda g, tok: g.dyck(3, 10, tok), _dyck_members(10, 3)),
    "years": (
        lambda g, tok: g.from_regex(r"19[0-9]{2}|20[0-2][0-9]", tok),
        [str(y) for y in range(1900, 2030)],
    ),
    "json_enum": (
        lambda g, tok: g.from_json_schema(
            {
                "type": "object",
                "properties": {"status": {"enum": ["ok", "error", "timeout"]}},
                "required": ["status"],
            },
            tok,
            whitespace="",
        ),
        [f'{{"status":"{s}"}}' for s in ("ok", "error", "timeout")],
    ),
}


@pytest.mark.parametrize("language", FINITE_LANGUAGES)
def test_tokenizer_own_tokenization_of_members_is_accepted(tokenizer, language):
    from hf_fvo import Grammar

    build, members = FINITE_LANGUAGES[language]
    grammar = build(Grammar, tokenizer)
    for text in members:
        ids = tokenizer.encode(text, add_special_tokens=False)
        state = grammar.walk(ids)
        assert state is not None and grammar.is_accepting(state), (text, ids)
        assert grammar.walk([*ids, grammar.eos_token_id]) == grammar.terminal_state


@pytest.mark.parametrize("language", FINITE_LANGUAGES)
def test_strings_outside_the_language_are_rejected(tokenizer, language):
    from hf_fvo import Grammar

    build, members = FINITE_LANGUAGES[language]
    grammar = build(Grammar, tokenizer)
    member_set = set(members)
    outsiders = {m + s for m in members for s in (")", "x", "0", " ")} | {
        m[:-1] for m in members if m
    }
    outsiders -= member_set
    assert outsiders
    for text in sorted(outsiders):
        state = grammar.walk(tokenizer.encode(text, add_special_tokens=False))
        assert state is None or not grammar.is_accepting(state), text
