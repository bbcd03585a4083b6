"""The audit: exact branches and TV for finite languages, a sampled comparison with a
permutation null otherwise, and a readable figure for both."""

from __future__ import annotations

import math

import pytest

from hf_fvo import Grammar
from hf_fvo.eval import audit, grammar_conditional_law, plot_audit, sampling_law
from tests.lms import tiny_llama


@pytest.fixture(scope="module")
def model(sp_tokenizer):
    return tiny_llama(len(sp_tokenizer), sp_tokenizer.eos_token_id, seed=1)


def test_exact_audit_matches_the_string_laws(sp_tokenizer, model, tmp_path):
    g = Grammar.from_choices(["ab", "abc", "ba", "c"], sp_tokenizer)
    report = audit(model, sp_tokenizer, g, (1, 5, 9), samples=40)
    text = lambda s: sp_tokenizer.decode(s[:-1])  # noqa: E731
    star = grammar_conditional_law(g, model, (1, 5, 9)).pushforward(text)
    proj = sampling_law(g, model, (1, 5, 9), "uniform").pushforward(text)
    assert report.exact and math.isclose(report.tv, proj.tv(star), abs_tol=1e-12)
    assert {b.text: b.star for b in report.branches} == pytest.approx(star.probs, abs=1e-12)
    assert sum(b.fvo for b in report.branches) == pytest.approx(1.0)
    over = report.over_produced(1)[0]
    assert over.proj - over.star == max(b.proj - b.star for b in report.branches)
    assert plot_audit(report, tmp_path / "a.png").stat().st_size > 10_000


def test_sampled_audit_for_an_infinite_language(sp_tokenizer, model, tmp_path):
    """The sampled audit, with the particle row: log Ẑ of one 16-particle run (a probability:
    ≤ 0) and its ESS, in the report and the summary."""
    g = Grammar.from_regex("[ab]+c", sp_tokenizer)
    report = audit(model, sp_tokenizer, g, (1, 5, 9), samples=30, max_new_tokens=6, particles=16)
    assert not report.exact and report.samples == 30
    assert 0.0 <= report.tv <= 1.0 and 0.0 < report.null_p95 <= 1.0
    assert report.log_gamma and min(report.log_gamma) >= 0.0
    assert "log Γ" in report.summary()
    found = report.particles
    assert found.particles == 16 and -math.inf < found.log_z <= 0.0
    assert 1.0 <= found.min_ess <= 16.0 and len(found.ess) <= 6
    assert f"log Ẑ = {found.log_z:.3f}" in report.summary()
    assert plot_audit(report, tmp_path / "s.png").stat().st_size > 10_000


def test_a_sampled_audit_needs_samples(sp_tokenizer, model):
    with pytest.raises(ValueError, match="samples"):
        audit(model, sp_tokenizer, Grammar.from_regex("[ab]+c", sp_tokenizer), (1,), samples=1)
