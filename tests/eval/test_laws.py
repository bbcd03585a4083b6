"""Exact terminal laws agree with brute-force enumeration; statistics behave as their nulls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.eval import (
    TerminalLaw,
    bootstrap_tv_ci,
    empirical_tv,
    grammar_conditional_law,
    null_tv_percentiles,
    sampling_law,
    sampling_law_on,
)
from hf_fvo.phi import ExactPhi, PrefixLM
from tests.lms import random_bigram

CHOICES = ["ab", "abc", "ba", "bca", "cab", "c"]
PROMPT = (5,)


@pytest.fixture(scope="module")
def world(sp_tokenizer):
    return Grammar.from_choices(CHOICES, sp_tokenizer), random_bigram(len(sp_tokenizer), seed=3)


def _brute_star(grammar, model, budget=None):
    seqs = [s for s in grammar.token_trie().sequences() if budget is None or len(s) <= budget]
    logs = np.array([model.logprob(PROMPT, s) for s in seqs])
    z = np.logaddexp.reduce(logs)
    return {s: math.exp(v - z) for s, v in zip(seqs, logs, strict=True)}


def _brute_proj(grammar, model, budget=None):
    """μ_proj by direct product of masked, renormalised steps (independent of the library)."""
    logp = torch.log_softmax(model.table.double(), -1)
    out = {}
    for seq in grammar.token_trie().sequences():
        if budget is not None and len(seq) > budget:
            continue
        state, prev, total = grammar.initial_state, PROMPT[-1], 0.0
        for i, t in enumerate(seq):
            remaining = None if budget is None else budget - i
            allowed = [
                u for u in grammar.allowed(state).nonzero().flatten().tolist()
                if u == grammar.eos_token_id or remaining is None
                or grammar.min_tokens_to_accept(grammar.next_state(state, u)) + 1 <= remaining - 1
            ]  # fmt: skip
            total += float(logp[prev, t] - torch.logsumexp(logp[prev, allowed], 0))
            state, prev = grammar.next_state(state, t), t
        out[seq] = math.exp(total)
    return out


@pytest.mark.parametrize("budget", [None, 3])
def test_laws_equal_brute_force_enumeration(world, budget):
    grammar, model = world
    star = grammar_conditional_law(grammar, model, PROMPT, max_new_tokens=budget)
    proj = sampling_law(grammar, model, PROMPT, "uniform", max_new_tokens=budget)
    exact = sampling_law(grammar, model, PROMPT, ExactPhi(grammar, model, tol=0.0),
                         max_new_tokens=budget)  # fmt: skip
    star_bf, proj_bf = _brute_star(grammar, model, budget), _brute_proj(grammar, model, budget)
    assert star.probs.keys() == star_bf.keys() == proj.probs.keys()
    assert star.tv(TerminalLaw(star_bf)) < 1e-12
    assert proj.tv(TerminalLaw(proj_bf)) < 1e-12
    assert exact.tv(star) < 1e-12  # sampling with exact Φ is μ*
    assert proj.tv(star) > 0.05  # and masking is not
    assert star.residual == proj.residual == 0.0


def test_tolerance_bounds_the_unexplored_mass(world):
    grammar, model = world
    full = grammar_conditional_law(grammar, model, PROMPT)
    cut = grammar_conditional_law(grammar, model, PROMPT, tol=0.05)
    assert 0 < cut.residual <= 0.05 and len(cut.probs) < len(full.probs)
    missing = sum(p for k, p in full.probs.items() if k not in cut.probs)
    assert missing <= cut.residual + 1e-12


@pytest.mark.parametrize("tol", [0.0, 0.05])
def test_exact_phi_exploration_completions_are_mu_star(world, tol):
    """Exact Φ's exploration yields μ* (on which grammar_conditional_law is built): brute-force
    μ* renormalised on the explored support, with the missing mass under the residual."""
    grammar, model = world
    ex = ExactPhi(grammar, model, tol=tol).root_exploration(PROMPT)
    mine = TerminalLaw.from_log_weights(ex.completions(), ex.residual)
    brute = _brute_star(grammar, model)
    kept = sum(brute[k] for k in mine.probs)
    assert mine.tv(TerminalLaw({k: brute[k] / kept for k in mine.probs})) < 1e-12
    assert (1.0 - kept) / kept <= mine.residual + 1e-12  # the residual is relative to the kept
    assert (mine.residual == 0.0) == (tol == 0.0)
    star = grammar_conditional_law(grammar, model, PROMPT, tol=tol)
    assert star.probs == pytest.approx(mine.probs, abs=1e-15)


def test_law_on_support_takes_model_probabilities_from_the_exploration(world):
    """With the exploration, μ_exact on μ*'s support uses the DP's own rows: no forward runs,
    and a row changed in the exploration changes the law (it is read, not recomputed)."""
    grammar, model = world
    lm = PrefixLM(model)
    phi = ExactPhi(grammar, lm, tol=0.0)
    ex = phi.root_exploration(PROMPT)
    star = TerminalLaw.from_log_weights(ex.completions(), ex.residual)
    before = lm.forwards
    law = sampling_law_on(grammar, lm, PROMPT, phi, star.probs, exploration=ex)
    assert lm.forwards == before
    assert law.tv(star) < 1e-12 and law.residual < 1e-12
    node = ex.nodes[()]
    node.child_logp = node.child_logp.flip(0)  # the root's step law, permuted
    tampered = sampling_law_on(grammar, lm, PROMPT, phi, star.probs, exploration=ex)
    assert tampered.tv(star) > 1e-3
    with pytest.raises(ValueError, match="same prompt"):
        sampling_law_on(grammar, lm, (6,), phi, star.probs, exploration=ex)


def test_from_log_weights_refuses_empty_or_zero_weights():
    with pytest.raises(ValueError, match="at least one"):
        TerminalLaw.from_log_weights({})
    with pytest.raises(ValueError, match="zero weight"):
        TerminalLaw.from_log_weights({(1,): -math.inf})
    tiny = TerminalLaw.from_log_weights({(1,): -800.0, (2,): -800.0 + math.log(3)})
    assert tiny.probs == pytest.approx({(1,): 0.25, (2,): 0.75}, rel=1e-12)  # no underflow


def test_kl_and_pushforward():
    a = TerminalLaw({(1, 2): 0.5, (3, 2): 0.5})
    b = TerminalLaw({(1, 2): 0.25, (3, 2): 0.75})
    assert math.isclose(a.kl(b), 0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert a.kl(TerminalLaw({(1, 2): 1.0})) == math.inf
    assert a.pushforward(lambda s: s[-1]).probs == {2: 1.0}


def test_null_percentiles_bound_the_tv_of_draws_from_the_law(world):
    grammar, model = world
    law = grammar_conditional_law(grammar, model, PROMPT)
    n, rng = 2000, np.random.default_rng(7)
    p95, p99 = null_tv_percentiles(law, n, seed=1)
    reps = 200
    tvs = [empirical_tv(law.sample(n, rng), law) for _ in range(reps)]
    # exceedances of the 95th percentile are Binomial(reps, 0.05): allow up to its 99.9th pct
    tail = [sum(math.comb(reps, j) * 0.05**j * 0.95 ** (reps - j) for j in range(k, reps + 1))
            for k in range(reps + 1)]  # fmt: skip
    limit = next(k for k in range(reps + 1) if tail[k] <= 1e-3)
    assert int(np.sum(np.array(tvs) > p95)) < limit
    assert p95 < p99
    lo, hi = bootstrap_tv_ci(law.sample(n, rng), law, seed=2)
    assert 0 <= lo <= hi
