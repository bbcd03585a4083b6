"""Grammars given as token automata: explicit transition tables and the budget language L_{n,K}."""

from __future__ import annotations

import itertools
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, GrammarError


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 7), k=st.integers(0, 7))
def test_budget_language_members_are_exactly_the_bounded_strings(n, k):
    g = Grammar.budget(n, k, zero=0, one=1, eos_token_id=2, vocab_size=3)
    members = 0
    for length in range(n + 2):
        for x in itertools.product((0, 1), repeat=length):
            state = g.walk(x)
            inside = length == n and sum(x) <= k
            accepted = state is not None and g.is_accepting(state)
            assert accepted == inside, (x, n, k)
            if inside:
                members += 1
            # a proper prefix of a member is live; anything else is rejected at once
            live = length <= n and sum(x) <= k
            assert (state is not None) == live
    assert members == sum(comb(n, c) for c in range(min(n, k) + 1))
    assert g.token_trie().num_sequences == members


def test_explicit_transitions_are_trimmed_and_renumbered():
    # state 7 is dead (cannot accept), state 9 unreachable
    table = {3: {0: 5, 1: 7}, 5: {0: 5}, 7: {1: 7}, 9: {0: 3}}
    g = Grammar.from_transitions(table, [5], vocab_size=3, eos_token_id=2, initial_state=3)
    assert g.num_states == 3  # 3 → 0, 5 → 1, plus the terminal state
    assert g.next_state(g.initial_state, 1) is None
    assert g.is_accepting(g.walk([0, 0, 0]))
    assert not g.is_finite


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"transitions": {0: {2: 0}}, "accepting": [0]}, GrammarError, "EOS"),
        ({"transitions": {0: {5: 0}}, "accepting": [0]}, GrammarError, "outside"),
        (
            {"transitions": {0: {0: 1}}, "accepting": [], "vocab_size": 3},
            EmptyLanguageError,
            "no accepting",
        ),
        ({"transitions": {0: {}}, "accepting": [0], "vocab_size": 0}, GrammarError, "vocab_size"),
        ({"transitions": {0: {}}, "accepting": [0], "eos_token_id": 9}, GrammarError, "eos"),
    ],
)
def test_bad_tables_get_a_typed_error_naming_the_cause(kwargs, error, match):
    args = {"vocab_size": 3, "eos_token_id": 2, **kwargs}
    with pytest.raises(error, match=match):
        Grammar.from_transitions(args.pop("transitions"), args.pop("accepting"), **args)


@pytest.mark.parametrize(
    ("n", "k", "tokens", "match"),
    [(-1, 2, (0, 1), "n must"), (3, 1.5, (0, 1), "k must"), (3, 1, (0, 0), "different")],
)
def test_bad_budget_parameters(n, k, tokens, match):
    with pytest.raises(GrammarError, match=match):
        Grammar.budget(n, k, zero=tokens[0], one=tokens[1], eos_token_id=2, vocab_size=3)
