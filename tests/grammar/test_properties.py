"""Property tests: random regexes compile or raise GrammarError, and every accepted token path
decodes to a string that fully matches."""

from __future__ import annotations

import random

import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_fvo import Grammar, GrammarError
from hf_fvo.grammar import TokenVocabulary

ATOMS = ["a", "b", "c", " ", "[ab]", "[^a]", ".", r"\.", "[0-9]", "é"]


def _regexes():
    leaf = st.sampled_from(ATOMS)

    def extend(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{1,3}", "{2}"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"
            ),
        )

    return st.recursive(leaf, extend, max_leaves=6)


SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip


@SETTINGS
@given(pattern=_regexes(), seed=st.integers(0, 2**16))
def test_accepted_token_paths_spell_full_matches(sp_tokenizer, pattern, seed):
    try:
        g = Grammar.from_regex(pattern, sp_tokenizer, max_states=2000)
    except GrammarError:
        return
    vocab = TokenVocabulary.from_tokenizer(sp_tokenizer)
    rx = regex.compile(pattern)
    rng = random.Random(seed)
    for _ in range(5):
        state, path = g.initial_state, []
        for _ in range(40):
            choices = g.allowed(state).nonzero().flatten().tolist()
            token = rng.choice(choices)
            path.append(token)
            state = g.next_state(state, token)
            assert state is not None
            text = vocab.decode(path)
            if token == g.eos_token_id:
                assert rx.fullmatch(text.decode("utf-8")), (pattern, text)
                break
            head = text.decode("utf-8", errors="ignore")
            assert rx.fullmatch(head, partial=True) or len(head) < len(text), (pattern, text)


@SETTINGS
@given(pattern=st.text(alphabet="ab()|*+?[]{}.\\^$-,0123", max_size=12))
def test_arbitrary_pattern_compiles_or_raises_grammar_error(sp_tokenizer, pattern):
    try:
        g = Grammar.from_regex(pattern, sp_tokenizer, max_states=2000)
    except GrammarError:
        return
    assert g.num_states >= 2  # at least one live state plus the terminal state
