"""Φ̂-twisted sequential Monte Carlo (``particles=N``): the weighted particle set targets μ*_B.

Where μ* is exact (a finite language under a tiny Llama; a budgeted Dyck language under a Markov
LM), the law of outputs drawn from N particles approaches μ* as N grows and at N = 64 lies under
the null 99th percentile of TV for the number of draws, while N = 1 (plain masking) lies far
outside it; under exact Φ every weight stays equal; log Ẑ is unbiased for Z_B.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import BudgetTooSmallError, InvalidArgumentError
from hf_fvo.eval import empirical_tv, grammar_conditional_law, null_tv_percentiles, sampling_law
from hf_fvo.generation.particles import effective_sample_size, sample_particles
from hf_fvo.grammar.interface import LazyAdmissible
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM, tiny_random_llama
from hf_fvo.phi import PhiEstimator, make_estimator
from tests.generation.finite import MAX_NEW, PROMPT, finite_setting

DRAWS = 1000
FINITE_DRAWS = 300  # a 64-row forward over SmolLM2's vocabulary per step: fewer draws there
BUDGET = 9  # Dyck D_{2,8}: 8 brackets and EOS
SIZES = (1, 4, 16, 64)


@pytest.fixture(scope="module")
def dyck():
    g = Grammar.dyck(2, 8, BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=2, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    star = grammar_conditional_law(g, lm, (3,), max_new_tokens=BUDGET)
    proj = sampling_law(g, lm, (3,), "uniform", max_new_tokens=BUDGET)
    return g, lm, star, proj


def _runs(model, grammar, prompt, n, budget, seed, phi="uniform", draws=DRAWS):
    """Independent particle runs: one output drawn from each, and each run's log Ẑ."""
    torch.manual_seed(seed)
    eos = grammar.eos_token_id
    outputs, log_z = [], []
    ids = torch.tensor([prompt])
    for _ in range(draws):
        found = sample_particles(model, ids, grammar=grammar, particles=n, max_new_tokens=budget,
                                 phi=phi)  # fmt: skip
        row = found.sequences[int(found.draw(1)), len(prompt) :].tolist()
        outputs.append(tuple(row[: row.index(eos) + 1]))
        log_z.append(found.report.log_z)
    return outputs, log_z


@pytest.fixture(scope="module")
def dyck_runs(dyck):
    g, lm, _, _ = dyck
    return {n: _runs(lm, g, (3,), n, BUDGET, seed=n) for n in SIZES}


def _log_likelihood(model, prompt, seq):
    ids = torch.tensor([[*prompt, *seq]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), -1)
    return sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(seq))


def test_masking_is_far_from_mu_star_and_64_particles_are_within_the_null(dyck, dyck_runs):
    _, _, star, proj = dyck
    assert star.tv(proj) > 0.3  # the setting has power
    _, p99 = null_tv_percentiles(star, DRAWS, seed=1)
    tv = {n: empirical_tv(dyck_runs[n][0], star) for n in SIZES}
    assert tv[1] > 10 * p99  # one particle is masking: μ_proj
    assert tv[1] > tv[4] > tv[16]  # falls with N
    assert tv[64] <= p99


def test_particles_approach_mu_star_on_a_finite_language(smol_tokenizer):
    model, g, star, proj = finite_setting(smol_tokenizer)
    assert star.tv(proj) > 0.1
    _, p99 = null_tv_percentiles(star, FINITE_DRAWS, seed=3)
    masked, _ = _runs(model, g, PROMPT, 1, MAX_NEW, seed=5, draws=FINITE_DRAWS)
    many, _ = _runs(model, g, PROMPT, 64, MAX_NEW, seed=6, draws=FINITE_DRAWS)
    assert empirical_tv(masked, star) > 3 * p99
    assert empirical_tv(many, star) <= p99


def test_exact_phi_keeps_every_weight_equal_and_the_ess_at_n(dyck):
    g, lm, star, _ = dyck
    torch.manual_seed(0)
    found = sample_particles(lm, torch.tensor([[3]]), grammar=g, particles=16,
                             max_new_tokens=BUDGET, phi="exact")  # fmt: skip
    assert found.report.resamplings == 0
    assert all(abs(e - 16) < 1e-6 for e in found.report.ess)
    assert torch.allclose(found.log_weights, torch.full((16,), -math.log(16), dtype=torch.float64))
    # with exact Φ the estimate has no variance: log Ẑ is log Z_B itself
    z = sum(math.exp(_log_likelihood(lm, (3,), x)) for x in star.probs)
    assert found.report.log_z == pytest.approx(math.log(z), abs=1e-9)


class _Vanishing(PhiEstimator):
    """Exact Φ, except that EOS gets Φ̂ = 0 wherever "(" is admissible too: a twist that
    vanishes on admissible tokens, as a rollout estimate with no success does."""

    name = "vanishing"

    def __init__(self, grammar, model):
        super().__init__(grammar, model)
        self.inner = make_estimator("exact", grammar, model)

    def log_phi(self, ctx):
        out = self.inner.log_phi(ctx).clone()
        if math.isfinite(out[0]) and math.isfinite(out[2]):
            out[2] = -math.inf
        return out


def test_a_twist_that_vanishes_on_admissible_tokens_still_targets_mu_star(dyck):
    """Sampling from the vanishing twist alone never ends where it could go on (far from μ*);
    particles propose every admissible token (a vanished one at the smallest positive Φ̂) and
    reweight, so 300 outputs of 16 particles each land within the null 99th percentile of μ*."""
    g, lm, star, _ = dyck
    twist = _Vanishing(g, lm)
    _, p99 = null_tv_percentiles(star, 300, seed=7)
    alone = sampling_law(g, lm, (3,), twist, max_new_tokens=BUDGET)
    assert alone.tv(star) > 10 * p99
    outputs, _ = _runs(lm, g, (3,), 16, BUDGET, seed=8, phi=twist, draws=300)
    assert empirical_tv(outputs, star) <= p99


def test_log_z_estimates_the_probability_of_a_valid_output_without_bias(dyck, dyck_runs):
    _, lm, star, _ = dyck
    z = sum(math.exp(_log_likelihood(lm, (3,), x)) for x in star.probs)
    for n in (1, 4):
        est = torch.tensor(dyck_runs[n][1], dtype=torch.float64).exp()
        half_width = 3.29 * float(est.std()) / math.sqrt(DRAWS)  # 99.9 % normal interval
        assert abs(float(est.mean()) - z) <= half_width


def test_effective_sample_size_counts_equal_weights_and_ignores_dead_particles():
    assert effective_sample_size(torch.zeros(5)) == pytest.approx(5.0)
    assert effective_sample_size(torch.tensor([0.0, 0.0, -math.inf])) == pytest.approx(2.0)
    assert effective_sample_size(torch.full((3,), -math.inf)) == 0.0


def test_generate_with_particles_returns_members_and_reports(dyck):
    g, lm, _, _ = dyck
    torch.manual_seed(0)
    out = hf_fvo.generate(lm, torch.tensor([[3], [3]]), grammar=g, particles=8, do_sample=True,
                          max_new_tokens=BUDGET, num_return_sequences=3,
                          return_dict_in_generate=True)  # fmt: skip
    assert out.sequences.shape[0] == 6 and len(out["particles"]) == 6
    for row in out.sequences[:, 1:].tolist():
        assert g.is_accepting(g.walk(row[: row.index(2)]))
    report = out["particles"][0]
    assert report.particles == 8 and math.isfinite(report.log_z) and report.log_z < 0
    assert len(report.ess) >= 2 and 0 < report.min_ess <= 8


def test_particles_never_cut_an_output_at_a_tight_budget(smol_tokenizer):
    smol_model = tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)
    schema = {"type": "object", "properties": {"status": {"enum": ["ok", "error"]}},
              "required": ["status"]}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    torch.manual_seed(0)
    out = hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=g, particles=4,
                          do_sample=True, max_new_tokens=7, num_return_sequences=2)  # fmt: skip
    for row in out[:, 2:].tolist():
        assert g.eos_token_id in row
        assert json.loads(smol_tokenizer.decode(row[: row.index(g.eos_token_id)]))["status"]


def test_particles_refuse_what_they_cannot_honour(dyck):
    g, lm, _, _ = dyck
    ids = torch.tensor([[3]])
    with pytest.raises(InvalidArgumentError, match="do_sample=True"):
        hf_fvo.generate(lm, ids, grammar=g, particles=4, max_new_tokens=BUDGET)
    with pytest.raises(InvalidArgumentError, match="particles must be"):
        hf_fvo.generate(lm, ids, grammar=g, particles=0, do_sample=True, max_new_tokens=BUDGET)
    with pytest.raises(InvalidArgumentError, match="assistant_model"):
        hf_fvo.generate(lm, ids, grammar=g, particles=4, do_sample=True, assistant_model=lm,
                        max_new_tokens=BUDGET)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="output_scores"):
        hf_fvo.generate(lm, ids, grammar=g, particles=4, do_sample=True, output_scores=True,
                        max_new_tokens=BUDGET)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="ess_threshold"):
        sample_particles(lm, ids, grammar=g, particles=4, max_new_tokens=BUDGET,
                         ess_threshold=2.0)  # fmt: skip


def test_the_custom_generate_recipe_passes_particles_through(dyck):
    g, lm, _, _ = dyck
    ids = torch.tensor([[3]])
    torch.manual_seed(4)
    expected = hf_fvo.generate(lm, ids, grammar=g, particles=4, do_sample=True,
                               max_new_tokens=BUDGET)  # fmt: skip
    torch.manual_seed(4)
    out = lm.generate(ids, custom_generate=hf_fvo.CUSTOM_GENERATE, trust_remote_code=True,
                      grammar=g, particles=4, do_sample=True, max_new_tokens=BUDGET,
                      return_dict_in_generate=True)  # fmt: skip
    assert out["particles"][0].particles == 4
    assert torch.equal(out.sequences, expected)


LAZY_BUDGET = 10  # unbounded Dyck (Lark, pushdown): up to 8 brackets and EOS; the parity makes
# "(" a non-member at lazily decided steps where the room equals the witness


@pytest.fixture(scope="module")
def lazy_dyck():
    """A pushdown grammar without a closing bound, so its budget rule can be decided token by
    token (far from the end of the budget), under a Markov LM that likes to open brackets."""
    g = Grammar.from_lark('start: "(" start ")" start | ', BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=5, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    star = grammar_conditional_law(g, lm, (3,), max_new_tokens=LAZY_BUDGET)
    return g, lm, star


def _lazy_runs(monkeypatch, g, lm, n, draws, seed, trials):
    """Particle runs with ``trials`` draws checked before a lazy A_t is resolved; also how
    many steps were lazy and how many resolved."""
    import hf_fvo.generation.proposals as proposals
    import hf_fvo.grammar.budget.certified as pushdown

    monkeypatch.setattr(proposals, "_TRIALS", trials)
    monkeypatch.setattr(pushdown, "_LAZY_SLACK", 0)  # lazy wherever a witness fits
    counts = {"lazy": 0, "resolved": 0}
    lazy_admissible = type(g).lazy_admissible

    def counted(self, state, remaining):
        lazy = lazy_admissible(self, state, remaining)
        if lazy is None:
            return None
        counts["lazy"] += 1

        def resolve():
            counts["resolved"] += 1
            return lazy.resolve()

        return LazyAdmissible(lazy.superset, lazy.admits, resolve)

    monkeypatch.setattr(type(g), "lazy_admissible", counted)
    outputs, log_z = _runs(lm, g, (3,), n, LAZY_BUDGET, seed=seed, draws=draws)
    return outputs, log_z, counts


@pytest.mark.parametrize("trials", [8, 2])
def test_token_by_token_budget_checks_keep_particles_on_mu_star(monkeypatch, lazy_dyck, trials):
    """Particles that check their draws against a lazily decided A_t (an unbiased estimate of
    p_t(A_t) as the weight; with 2 trials most steps fall back to the resolved set) still land
    within the null 99th percentile of μ*_B, while one particle (masking) is far outside."""
    g, lm, star = lazy_dyck
    _, p99 = null_tv_percentiles(star, DRAWS, seed=11)
    masked, _, _ = _lazy_runs(monkeypatch, g, lm, 1, DRAWS, seed=12, trials=trials)
    many, _, counts = _lazy_runs(monkeypatch, g, lm, 32, DRAWS, seed=13, trials=trials)
    assert counts["lazy"] > 0 and (trials > 2 or counts["resolved"] > 0)
    assert empirical_tv(masked, star) > 5 * p99
    assert empirical_tv(many, star) <= p99


def test_token_by_token_weights_estimate_z_without_bias(monkeypatch, lazy_dyck):
    """With one particle, exp(log Ẑ) is the product of the lazy steps' weights: its mean over
    runs is Z_B = Pr_p[a member within the budget] (a 99.9 % normal interval), also when
    most steps fall back to the resolved set (2 trials)."""
    g, lm, star = lazy_dyck
    z = sum(math.exp(_log_likelihood(lm, (3,), x)) for x in star.probs)
    for trials in (8, 2):
        _, log_z, counts = _lazy_runs(monkeypatch, g, lm, 1, DRAWS, seed=14, trials=trials)
        assert counts["lazy"] > 0
        est = torch.tensor(log_z, dtype=torch.float64).exp()
        half_width = 3.29 * float(est.std()) / math.sqrt(DRAWS)
        assert abs(float(est.mean()) - z) <= half_width


@pytest.mark.parametrize("trials", [2, 8])
def test_a_lazy_draw_is_distributed_as_p_on_a_t_with_an_unbiased_weight(trials):
    """On a superset of 5 tokens of which 2 are members (r = p_t(A_t)/p_t(superset) = 0.3),
    20,000 lazy draws: the drawn member follows p_t restricted to A_t (χ², 1 degree of
    freedom, 99.9 %), and the mean weight is p_t(A_t) (99.9 % normal interval), whether the
    draw ends in two checked members or in the resolved set."""
    from scipy.stats import chi2

    from hf_fvo.generation.proposals import _lazy_draw

    probs = torch.tensor([0.1, 0.2, 0.25, 0.25, 0.15, 0.05], dtype=torch.float64)  # id 5 out
    logits = probs.log()
    superset = torch.tensor([True, True, True, True, True, False])
    resolved = torch.tensor([True, True, False, False, False, False])
    lazy = LazyAdmissible(superset, lambda y: bool(resolved[y]), resolved.clone)
    torch.manual_seed(trials)
    draws = [_lazy_draw(lazy, logits, torch.tensor(0.0), trials) for _ in range(20_000)]
    counts = torch.bincount(torch.tensor([y for y, _ in draws]), minlength=6).double()
    assert counts[2:].sum() == 0
    expected = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64) * len(draws)
    assert float(((counts[:2] - expected) ** 2 / expected).sum()) <= chi2.ppf(0.999, 1)
    weights = torch.tensor([w for _, w in draws], dtype=torch.float64).exp()
    half_width = 3.29 * float(weights.std()) / math.sqrt(len(draws))
    assert abs(float(weights.mean()) - 0.3) <= half_width


def test_sample_particles_refuses_a_budget_no_member_fits_as_generate_does(smol_tokenizer):
    """Called directly (not through generate()), the particle sampler stands on the same bounds:
    a budget below the shortest member is refused with BudgetTooSmallError (at the first step,
    where every particle finds nothing admissible), not a ConstraintConflictError."""
    g = Grammar.from_choices(["yes", "no"], smol_tokenizer)
    model = tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)
    lower, _ = g.shortest_bounds(g.initial_state)
    with pytest.raises(BudgetTooSmallError, match="max_new_tokens"):
        sample_particles(model, torch.tensor([[1]]), grammar=g, particles=4,
                         max_new_tokens=lower)  # fmt: skip
    out = sample_particles(model, torch.tensor([[1]]), grammar=g, particles=4,
                           max_new_tokens=lower + 1)  # fmt: skip
    assert all(int(s[-1]) in g.eos_token_ids for s in out.sequences)
