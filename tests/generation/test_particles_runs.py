"""Spelled-out runs and ``particles="auto"`` keep particles on μ*.

A finite regex over a small vocabulary whose tokens spell one another's prefixes (``a``,
``ab``, ``abc``): where the grammar fixes the text it offers a single token, so particles feed
those runs with their last token and the forward scores them at once. μ*_B is computed exactly
(every member scored), and the outputs are compared with it against the null distribution of
TV for the number of draws.
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.eval import empirical_tv, grammar_conditional_law, null_tv_percentiles, sampling_law
from hf_fvo.generation.particles import AutoParticles, sample_particles
from hf_fvo.grammar import TokenVocabulary
from hf_fvo.models import tiny_random_llama

SPELLINGS = [b"a", b"b", b"c", b"d", b"ab", b"abc", b"cd", b"bcd"]
EOS, BOS = len(SPELLINGS), len(SPELLINGS) + 1
VOCAB = TokenVocabulary([*SPELLINGS, None, None], eos_token_ids=[EOS])
BUDGET = 8
DRAWS = 400


@pytest.fixture(scope="module")
def setting():
    model = tiny_random_llama(len(VOCAB), eos_token_id=EOS, seed=1, sharpness=3.0)
    grammar = Grammar.from_regex("abc(dd|cd)|abdd|bcdd", VOCAB, backend="pushdown")
    star = grammar_conditional_law(grammar, model, (BOS,), max_new_tokens=BUDGET)
    proj = sampling_law(grammar, model, (BOS,), "uniform", max_new_tokens=BUDGET)
    return model, grammar, star, proj


def _outputs(model, grammar, particles_, seed, draws=DRAWS):
    torch.manual_seed(seed)
    outputs, reports = [], []
    for _ in range(draws):
        found = sample_particles(model, torch.tensor([[BOS]]), grammar=grammar,
                                 particles=particles_, max_new_tokens=BUDGET)  # fmt: skip
        row = found.sequences[int(found.draw(1)), 1:].tolist()
        outputs.append(tuple(row[: row.index(EOS) + 1]))
        reports.append(found.report)
    return outputs, reports


def test_runs_scored_in_one_forward_keep_particles_on_mu_star(setting):
    """400 outputs of 64 particles whose spelled-out runs ride along with the next forward
    land within the null 99th percentile of TV to μ*_B, which masking is far outside; the
    runs did happen (more than one token per forward)."""
    model, grammar, star, proj = setting
    _, p99 = null_tv_percentiles(star, DRAWS, seed=2)
    assert star.tv(proj) > 4 * p99  # masking is far: the test has power
    outputs, reports = _outputs(model, grammar, 64, seed=3)
    assert empirical_tv(outputs, star) <= p99
    assert max(r.tokens_per_forward for r in reports) > 1.0
    assert all(len(r.ess) <= r.positions <= BUDGET for r in reports)  # forwards ≤ positions


def test_one_particle_with_runs_draws_the_masked_law_with_a_weight_unbiased_for_z(setting):
    """One particle never resamples: its output follows the masked law μ_proj exactly (every
    run token, the only admissible one, kept with its weight p_t(c)), and its weight
    p(x)/q(x) has mean Z_B = Pr_p[a member within the budget]. 2000 outputs lie within the
    null 99th percentile of TV to μ_proj (computed exactly), and the mean weight within a
    99.9 % normal interval of Z_B (μ*'s members scored one by one)."""
    model, grammar, star, proj = setting
    draws = 2000
    outputs, reports = _outputs(model, grammar, 1, seed=7, draws=draws)
    _, p99 = null_tv_percentiles(proj, draws, seed=8)
    assert empirical_tv(outputs, proj) <= p99 < star.tv(proj) / 4
    assert sum(r.tokens_per_forward for r in reports) / draws > 1.0
    z = 0.0
    for x in star.probs:
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([[BOS, *x]])).logits[0].double(), -1)
        z += math.exp(sum(float(logp[i, t]) for i, t in enumerate(x)))
    est = torch.tensor([r.log_z for r in reports], dtype=torch.float64).exp()
    assert abs(float(est.mean()) - z) <= 3.29 * float(est.std()) / math.sqrt(draws)


def test_auto_particles_pool_growing_runs_and_stay_on_mu_star(setting):
    """``AutoParticles(min_ess=40, start=16)``: runs of 16, 32, 64… particles are pooled
    until their smallest ESS add up to 40; the report names the runs (doubling, at most
    ``largest``), and 400 pooled outputs land within the null 99th percentile of μ*_B."""
    model, grammar, star, _ = setting
    _, p99 = null_tv_percentiles(star, DRAWS, seed=4)
    outputs, reports = _outputs(model, grammar, AutoParticles(min_ess=40, start=16), seed=5)
    assert empirical_tv(outputs, star) <= p99
    for r in reports:
        sizes = [run.particles for run in r.runs]
        assert sizes == [16 * 2**k for k in range(len(sizes))] and sizes[-1] <= 128
        assert r.particles == sum(sizes)
        assert r.min_ess >= 40 or sizes[-1] * 2 > 128
    assert max(len(r.runs) for r in reports) > 1


def test_auto_particles_stop_at_the_largest_run_and_refuse_bad_settings(setting):
    """A threshold no run reaches stops at ``largest``; a bad setting is refused with
    InvalidArgumentError naming it, as is a ``particles`` string other than "auto"."""
    from hf_fvo.errors import InvalidArgumentError

    model, grammar, _, _ = setting
    torch.manual_seed(0)
    found = sample_particles(model, torch.tensor([[BOS]]), grammar=grammar, max_new_tokens=BUDGET,
                             particles=AutoParticles(min_ess=1e9, start=2, largest=8))  # fmt: skip
    assert [run.particles for run in found.report.runs] == [2, 4, 8]
    assert len(found.sequences) == len(found.log_weights) == 14
    assert abs(float(found.log_weights.exp().sum()) - 1.0) < 1e-9
    for bad in ({"min_ess": 0}, {"start": 0}, {"start": 8, "largest": 4}, {"seconds": -1}):
        with pytest.raises(InvalidArgumentError):
            AutoParticles(**bad)
    with pytest.raises(InvalidArgumentError, match="auto"):
        sample_particles(model, torch.tensor([[BOS]]), grammar=grammar, max_new_tokens=BUDGET,
                         particles="many")  # fmt: skip


def test_generate_takes_particles_auto_and_reports_the_runs(setting):
    """``hf_fvo.generate(particles="auto")`` samples members and reports, per output, the runs
    it pooled (8, 16, … particles: the defaults of AutoParticles)."""
    import hf_fvo

    model, grammar, star, _ = setting
    torch.manual_seed(0)
    out = hf_fvo.generate(model, torch.tensor([[BOS]]), grammar=grammar, particles="auto",
                          do_sample=True, max_new_tokens=BUDGET, pad_token_id=EOS,
                          return_dict_in_generate=True)  # fmt: skip
    row = out.sequences[0, 1:].tolist()
    assert tuple(row[: row.index(EOS) + 1]) in star.probs
    sizes = [run.particles for run in out["particles"][0].runs]
    assert sizes[0] == 8 and sizes == [8 * 2**k for k in range(len(sizes))]
