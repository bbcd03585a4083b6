"""The μ* reference for open grammars: importance weights are exactly p/q, the weighted estimates
and the rejection draws follow the exact μ* of a language small enough to enumerate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from hf_fvo import Grammar
from hf_fvo.errors import InvalidArgumentError
from hf_fvo.eval import grammar_conditional_law, sampling_law
from hf_fvo.eval.reference import (
    WeightedSample,
    importance_sample,
    mixture_sample,
    rejection_sample,
    sequence_log_probs,
)
from hf_fvo.models import tiny_random_llama
from hf_fvo.phi import UniformPhi

PROMPT = torch.tensor([[1, 6]])
BUDGET = 5
EOS = 2


@pytest.fixture(scope="module")
def world():
    # 3* (4 | 5 7): infinite; within the budget, 7 members of different lengths
    g = Grammar.from_transitions(
        {0: {3: 0, 4: 1, 5: 2}, 1: {}, 2: {7: 1}}, [1], vocab_size=8, eos_token_id=EOS
    )
    model = tiny_random_llama(8, eos_token_id=EOS, seed=4, sharpness=4.0)
    star = grammar_conditional_law(g, model, (1, 6), max_new_tokens=BUDGET)
    proj = sampling_law(g, model, (1, 6), "uniform", max_new_tokens=BUDGET)
    return g, model, star, proj


def test_importance_log_weights_are_log_p_over_q(world):
    g, model, star, proj = world
    ref = importance_sample(model, PROMPT, g, 48, max_new_tokens=BUDGET, seed=1)
    assert all(math.isfinite(w) for w in ref.log_weights)  # masking never leaves the language
    # log w(x) = log p(x) − log q(x) = log Z + log μ*(x) − log μ_proj(x): constant over x.
    # Tolerance: float32 forwards through a KV cache and without one agree to ~1e-5 per step
    # in log probability (docs/benchmarks.md), 5 steps at most
    offsets = [w - math.log(star.probs[x] / proj.probs[x]) for x, w in zip(ref.sequences,
               ref.log_weights, strict=True)]  # fmt: skip
    assert max(offsets) - min(offsets) < 1e-4
    assert star.tv(proj) > 0.05  # the weights had something to correct


@pytest.mark.parametrize("proposal", ["uniform", "onestep"])
def test_importance_estimates_cover_the_exact_mu_star(world, proposal):
    g, model, star, _ = world
    ref = importance_sample(model, PROMPT, g, 400, proposal=proposal, max_new_tokens=BUDGET,
                            seed=2, batch_size=200)  # fmt: skip
    assert 1.0 <= ref.ess <= 400
    exact = {}
    for x, p in star.probs.items():
        exact[len(x)] = exact.get(len(x), 0.0) + p
    law = ref.law(len)
    # each estimate within the two-sided 99 % normal interval of its delta-method error: the
    # SNIS estimator's asymptotic null distribution (fixed seed, so the outcome is fixed too)
    z = stats.norm.ppf(0.995)
    for length, p in exact.items():
        est, se = law[length]  # every length has ≥ 2 % of the proposal's mass: all are drawn
        assert abs(est - p) <= z * se, (length, est, se, p)


def test_rejection_draws_follow_mu_star(world):
    g, model, star, _ = world
    ref = rejection_sample(model, PROMPT, g, 300, max_new_tokens=BUDGET, max_draws=20_000, seed=3,
                           batch_size=512)  # fmt: skip
    assert len(ref.sequences) == 300 and 0 < ref.acceptance <= 1
    keys = sorted(star.probs)
    observed = np.array([sum(x == k for x in ref.sequences) for k in keys])
    expected = np.array([star.probs[k] for k in keys]) * len(ref.sequences)
    # χ² goodness of fit against the exact law, pooling members expected fewer than 5 times
    rare = expected < 5
    observed = np.append(observed[~rare], observed[rare].sum())
    expected = np.append(expected[~rare], expected[rare].sum())
    assert stats.chisquare(observed, expected).pvalue > 0.01


def test_a_draw_outside_the_language_weighs_nothing():
    s = WeightedSample(((3, 2), (3, 3)), (0.0, -math.inf))
    assert s.estimate(lambda x: x == (3, 2)) == (1.0, 0.0) and s.ess == 1.0
    with pytest.raises(InvalidArgumentError, match="no draw"):
        WeightedSample(((3, 3),), (-math.inf,)).law(len)


def test_reference_needs_one_prompt(world):
    g, model, *_ = world
    with pytest.raises(InvalidArgumentError, match=r"shape \(1, length\)"):
        importance_sample(model, PROMPT.repeat(2, 1), g, 4, max_new_tokens=BUDGET)
    with pytest.raises(InvalidArgumentError, match="max_draws"):
        rejection_sample(model, PROMPT, g, 4, max_new_tokens=BUDGET, max_draws=0)


class _Collapsed(UniformPhi):
    """Masking that all but forbids leaving the path 3 4: draws are nearly all (3, 4, EOS)."""

    name = "collapsed"

    @property
    def is_masking(self) -> bool:
        return False

    def log_phi(self, ctx):
        out = super().log_phi(ctx)
        if len(ctx.generated) < 2:
            keep = 3 if not ctx.generated else 4
            out[[t for t in (3, 4, 5) if t != keep]] -= 12.0
        return out


def test_teacher_forced_log_q_is_each_proposals_sampling_law(world):
    g, model, star, proj = world
    members = sorted(star.probs)
    log_p, log_q = sequence_log_probs(model, PROMPT, g, members, ["uniform", "onestep"],
                                      max_new_tokens=BUDGET)  # fmt: skip
    onestep = sampling_law(g, model, (1, 6), "onestep", max_new_tokens=BUDGET)
    # float32 forwards with and without a KV cache agree to ~1e-5 per step (5 steps at most)
    for k, x in enumerate(members):
        assert abs(math.exp(log_q[k, 0]) - proj.probs[x]) < 1e-4
        assert abs(math.exp(log_q[k, 1]) - onestep.probs[x]) < 1e-4
    z = np.exp(log_p).sum()  # p(x)/Z over the members is μ*
    for lp, x in zip(log_p, members, strict=True):
        assert abs(math.exp(lp) / z - star.probs[x]) < 1e-4


def test_mixture_reference_is_not_dominated_by_a_collapsed_proposal(world):
    # 200 masked draws pooled with 200 draws of a proposal collapsed on (3, 4, EOS): the collapsed
    # proposal's own weights are all alike (ESS ≈ 200), so pooling self-normalised laws in
    # proportion to ESS puts ~half the mass there (μ* 0.044); the balance heuristic keeps μ*
    g, model, star, _ = world
    collapsed = _Collapsed(g)
    a = importance_sample(model, PROMPT, g, 200, max_new_tokens=BUDGET, seed=5, batch_size=200)
    b = importance_sample(model, PROMPT, g, 200, proposal=collapsed, max_new_tokens=BUDGET,
                          seed=6, batch_size=200)  # fmt: skip
    assert b.ess > 150 and sum(x == (3, 4, EOS) for x in b.sequences) > 190
    seqs = [*a.sequences, *b.sequences]
    log_p, log_q = sequence_log_probs(model, PROMPT, g, seqs, ["uniform", collapsed],
                                      max_new_tokens=BUDGET)  # fmt: skip
    mixed = mixture_sample([a, b], log_p, log_q)
    z = stats.norm.ppf(0.995)  # the SNIS estimate's 99 % normal interval, as above
    est, se = mixed.estimate(lambda x: x == (3, 4, EOS))
    assert abs(est - star.probs[(3, 4, EOS)]) <= z * se, (est, se, star.probs[(3, 4, EOS)])
    by_ess = (a.ess * a.estimate(lambda x: x == (3, 4, EOS))[0] + b.ess) / (a.ess + b.ess)
    assert abs(by_ess - star.probs[(3, 4, EOS)]) > 0.2  # what the balance heuristic avoids
