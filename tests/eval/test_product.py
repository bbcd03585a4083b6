"""Exact TV over product states (Markov LMs): equal to TV between enumerated terminal laws, and
seed 000 Table 8 (budget DFA) reproduced to the published three decimals."""

from __future__ import annotations

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import GrammarTooLargeError
from hf_fvo.eval import grammar_conditional_law, product_tv, sampling_law
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM, tiny_random_llama
from hf_fvo.phi import MarkovExactPhi

PROMPT = (3,)

# seed 000 Table 8: (n, K, p1) → TV(μ_proj, μ*)
TABLE_8 = {
    (20, 10, 0.62): 0.670,
    (22, 11, 0.65): 0.755,
    (24, 12, 0.68): 0.836,
    (24, 10, 0.65): 0.884,
    (24, 8, 0.70): 0.961,
    (26, 13, 0.68): 0.851,
    (28, 14, 0.68): 0.864,
    (30, 15, 0.70): 0.909,
}


@pytest.fixture(scope="module")
def dyck_world():
    g = Grammar.dyck(3, 10, BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=4, bos_token_id=3, eos_token_id=2)
    return g, lm, grammar_conditional_law(g, lm, PROMPT)


@pytest.mark.parametrize("phi", ["uniform", "onestep", "onestep_true", "exact"])
def test_grouped_tv_equals_tv_of_enumerated_laws(dyck_world, phi):
    g, lm, star = dyck_world
    law = sampling_law(g, lm, PROMPT, phi)
    grouped = product_tv(g, lm, PROMPT, phi, "exact")
    assert abs(grouped.tv - law.tv(star)) <= 1e-12
    assert abs(grouped.mass_a - 1) <= 1e-12 and abs(grouped.mass_b - 1) <= 1e-12


def test_grouped_tv_between_two_approximations(dyck_world):
    g, lm, _ = dyck_world
    a, b = sampling_law(g, lm, PROMPT, "onestep"), sampling_law(g, lm, PROMPT, "uniform")
    assert abs(product_tv(g, lm, PROMPT, "onestep", "uniform").tv - a.tv(b)) <= 1e-12


def _bernoulli(p1: float, e: float = 0.05) -> MarkovLM:
    # i.i.d. digits with P(1) = p1 given a digit; any EOS probability e > 0 gives the same laws
    return MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3)


@pytest.mark.parametrize(("setting", "published"), list(TABLE_8.items()))
def test_seed_table_8(setting, published):
    n, k, p1 = setting
    g = Grammar.budget(n, k, zero=0, one=1, eos_token_id=2, vocab_size=3)
    lm = _bernoulli(p1)
    proj = product_tv(g, lm, (0,), "uniform", "exact")
    assert round(proj.tv, 3) == published
    assert product_tv(g, lm, (0,), "exact", "exact").tv <= 1e-12
    assert MarkovExactPhi(g, lm).doob_residual(n + 1) <= 1e-12


def test_group_limit_and_bad_models():
    g = Grammar.dyck(3, 10, BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=4, bos_token_id=3, eos_token_id=2)
    with pytest.raises(GrammarTooLargeError, match="max_groups"):
        product_tv(g, lm, PROMPT, "onestep", "exact", max_groups=3)
    with pytest.raises(TypeError, match="MarkovLM"):
        product_tv(g, tiny_random_llama(4), PROMPT)
    infinite = Grammar.from_transitions({0: {0: 0}}, [0], vocab_size=4, eos_token_id=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        product_tv(infinite, lm, PROMPT)
