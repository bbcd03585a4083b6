"""Exact Φ sampled through hf_fvo.generate on a Markov LM (Dyck D_{3,16}): the draws follow μ*
within the null 95th percentile, and are far from μ_proj (the test has power)."""

from __future__ import annotations

import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.eval import empirical_tv, grammar_conditional_law, null_tv_percentiles, sampling_law
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM

N = 4000
BATCH = 1000


@pytest.fixture(scope="module")
def setting():
    g = Grammar.dyck(3, 16, BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=2, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    star = grammar_conditional_law(g, lm, (3,))
    proj = sampling_law(g, lm, (3,), "uniform")
    return g, lm, star, proj


def _draws(g, lm, phi, seed):
    torch.manual_seed(seed)
    samples = []
    for _ in range(N // BATCH):
        out = hf_fvo.generate(lm, torch.full((BATCH, 1), 3), grammar=g, phi=phi,
                              max_new_tokens=17, do_sample=True, top_k=0)  # fmt: skip
        for row in out[:, 1:].tolist():
            samples.append(tuple(row[: row.index(2) + 1]))
    return samples


def test_exact_phi_samples_mu_star_on_dyck(setting):
    g, lm, star, proj = setting
    assert len(star.probs) == 988 and star.tv(proj) > 0.3
    samples = _draws(g, lm, "exact", seed=0)
    p95, _ = null_tv_percentiles(star, N, seed=1)
    _, p99_proj = null_tv_percentiles(proj, N, seed=2)
    assert empirical_tv(samples, star) <= p95
    assert empirical_tv(samples, proj) > p99_proj
