"""Exact Φ under Markov LMs (product-state DP): the shared conformance suite, agreement with the
token-trie DP and with brute-force sums, the Doob recursion, and its errors."""

from __future__ import annotations

import math

import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM, tiny_random_llama
from hf_fvo.phi import ExactPhi, MarkovExactPhi, PhiContext, make_estimator
from tests.phi.conformance import EstimatorConformance
from tests.phi.conformance import world as world  # the shared fixture


class TestMarkovExact(EstimatorConformance):
    def make(self, grammar, model):
        return MarkovExactPhi(grammar, model)

    def test_tiny_values_stay_exact_in_log_space(self, world):
        pytest.skip("exact Φ reads the model's table; see test_phi_of_1e_300_is_kept below")


@pytest.fixture(scope="module")
def dyck():
    return Grammar.dyck(3, 8, BRACKETS)


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("remaining", [None, 9, 6, 3])
def test_equals_the_token_trie_dp(dyck, order, remaining):
    lm = MarkovLM.random(4, order=order, seed=order, bos_token_id=3, eos_token_id=2)
    markov, trie = MarkovExactPhi(dyck, lm), ExactPhi(dyck, lm, tol=0.0)
    for prefix in [(), (0,), (0, 0), (0, 1), (0, 0, 1), (0, 0, 0, 1)]:
        state = dyck.walk(prefix)
        ctx = PhiContext(state, prefix, torch.zeros(4), remaining, (3,))
        a, b = markov.log_phi(ctx), trie.log_phi(ctx)
        assert torch.equal(torch.isfinite(a), torch.isfinite(b))
        f = torch.isfinite(a)
        assert torch.allclose(a[f], b[f], rtol=0, atol=1e-12)


def test_budget_language_phi_equals_the_binomial_sum():
    p1, e, n, k = 0.7, 0.05, 12, 4
    lm = MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3)
    g = Grammar.budget(n, k, zero=0, one=1, eos_token_id=2, vocab_size=3)
    phi = MarkovExactPhi(g, lm)
    row = phi.log_phi(PhiContext(g.initial_state, (), torch.zeros(3), n + 1, (0,)))

    def valid(ones_used):  # Pr[the n − 1 remaining digits keep Σ ≤ k, then EOS]
        rest = n - 1
        total = sum(math.comb(rest, c) * p1**c * (1 - p1) ** (rest - c)
                    for c in range(k - ones_used + 1))  # fmt: skip
        return total * (1 - e) ** rest * e

    assert math.isclose(row[0].exp().item(), valid(0), rel_tol=1e-12)
    assert math.isclose(row[1].exp().item(), valid(1), rel_tol=1e-12)


@pytest.mark.parametrize("order", [1, 2])
def test_doob_recursion_holds_to_float_precision(dyck, order):
    lm = MarkovLM.random(4, order=order, seed=5, bos_token_id=3, eos_token_id=2)
    assert MarkovExactPhi(dyck, lm).doob_residual(9) <= 1e-12


def test_phi_of_1e_300_is_kept():
    # EOS has probability 1e-300: every Φ carries that factor, and stays finite and exact
    table = torch.tensor([[0.5, 0.5, 1e-300]] * 3, dtype=torch.float64)
    lm = MarkovLM.from_table(table / table.sum(-1, keepdim=True))
    g = Grammar.budget(3, 1, zero=0, one=1, eos_token_id=2, vocab_size=3)
    row = MarkovExactPhi(g, lm).log_phi(PhiContext(0, (), torch.zeros(3), 4, (0,)))
    # after a 0, two digits with at most one 1 (prob 3/4); after a 1, two 0s (prob 1/4)
    assert math.isclose(row[0].item(), math.log(0.75) + math.log(1e-300), rel_tol=1e-12)
    assert math.isclose(row[1].item(), math.log(0.25) + math.log(1e-300), rel_tol=1e-12)


def test_exact_picks_the_product_dp_for_markov_models(dyck):
    lm = MarkovLM.random(4, seed=0)
    assert isinstance(make_estimator("exact", dyck, lm), MarkovExactPhi)
    assert type(make_estimator("exact", dyck, tiny_random_llama(4))) is ExactPhi


def test_refuses_non_markov_models_and_unbounded_infinite_languages():
    with pytest.raises(TypeError, match="MarkovLM"):
        MarkovExactPhi(Grammar.dyck(2, 4, BRACKETS), tiny_random_llama(4))
    g = Grammar.from_transitions({0: {0: 0}}, [0], vocab_size=3, eos_token_id=2)  # 0*
    phi = MarkovExactPhi(g, MarkovLM.random(3, seed=0))
    with pytest.raises(ValueError, match="infinite"):
        phi.log_phi(PhiContext(0, (), torch.zeros(3), None, (0,)))
    assert torch.isfinite(phi.log_phi(PhiContext(0, (), torch.zeros(3), 5, (0,)))).all() == 0
