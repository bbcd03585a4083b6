"""Every estimator runs the shared conformance suite; estimator-specific facts follow."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from hf_fvo.phi import ExactPhi, OneStepPhi, PhiContext, UniformPhi
from tests.phi.conformance import PROMPT, EstimatorConformance, contexts
from tests.phi.conformance import world as world  # the shared fixture


class TestUniform(EstimatorConformance):
    varies = False

    def make(self, grammar, model):
        return UniformPhi(grammar)


class TestOneStep(EstimatorConformance):
    varies = "somewhere"  # one-step lookahead cannot see deeper asymmetries

    def make(self, grammar, model):
        return OneStepPhi(grammar)


class TestExact(EstimatorConformance):
    def make(self, grammar, model):
        return ExactPhi(grammar, model, tol=0.0)

    def test_tiny_values_stay_exact_in_log_space(self, world):
        pytest.skip("exact Φ reads the model, not the passed logits; see the 1e-300 test below")


def _brute_phi(grammar, model, prefix, token, remaining=None):
    """Φ(token | prefix) = Σ over language members extending prefix+token of p(rest)."""
    total = -math.inf
    for seq in grammar.token_trie().sequences():
        n = len(prefix) + 1
        if seq[:n] == (*prefix, token) and (
            remaining is None or len(seq) - len(prefix) <= remaining
        ):
            rest = model.logprob((*PROMPT, *prefix, token), seq[n:])
            total = float(np.logaddexp(total, rest))
    return total


@pytest.mark.parametrize("remaining", [None, 3])
def test_exact_phi_equals_brute_force_sums(world, remaining):
    grammar, model = world
    exact = ExactPhi(grammar, model, tol=0.0)
    for ctx in contexts(grammar, model, remaining=remaining):
        log_phi = exact.log_phi(ctx)
        for t in torch.nonzero(torch.isfinite(log_phi)).flatten().tolist():
            assert math.isclose(
                log_phi[t].item(), _brute_phi(grammar, model, ctx.generated, t, remaining),
                rel_tol=1e-9, abs_tol=1e-12,
            )  # fmt: skip
        assert exact.additive_error(ctx) == 0.0


def test_exact_phi_satisfies_the_doob_recursion(world):
    grammar, model = world
    exact = ExactPhi(grammar, model, tol=0.0)
    for ctx in contexts(grammar, model):
        log_phi = exact.log_phi(ctx)
        for t in torch.nonzero(torch.isfinite(log_phi)).flatten().tolist():
            if t == grammar.eos_token_id:
                continue
            child = PhiContext(grammar.next_state(ctx.state, t), (*ctx.generated, t),
                               ctx.logits, None, PROMPT)  # fmt: skip
            nxt = exact.log_phi(child)
            logp = torch.log_softmax(model.table.double()[t], -1)
            recursion = torch.logsumexp(logp[: len(nxt)] + nxt, 0)
            assert abs(recursion.item() - log_phi[t].item()) < 1e-12


def test_exact_phi_keeps_values_near_1e300_in_log_space(sp_tokenizer):
    from hf_fvo import Grammar
    from tests.lms import BigramLM

    g = Grammar.from_choices(["ab", "b"], sp_tokenizer)
    a = sp_tokenizer.convert_tokens_to_ids("a")
    spell_b = [sp_tokenizer.convert_tokens_to_ids(x) for x in ("b", "<0x62>")]
    table = torch.zeros(len(sp_tokenizer), len(sp_tokenizer))
    table[a, spell_b] = -690.0  # p(b | a) ≈ e^-690 / V ≈ 1e-302, for both spellings of "b"
    model = BigramLM(table)
    exact = ExactPhi(g, model, tol=0.0)
    ctx = PhiContext(g.initial_state, (), torch.zeros(len(sp_tokenizer)), None, PROMPT)
    log_phi = exact.log_phi(ctx)
    expected = np.logaddexp.reduce(
        [model.logprob((*PROMPT, a), (b, g.eos_token_id)) for b in spell_b]
    )
    assert math.isclose(log_phi[a].item(), expected, rel_tol=1e-12)
    assert log_phi[a].item() < -690


def test_tolerance_gives_a_certified_bound(world):
    grammar, model = world
    loose = ExactPhi(grammar, model, tol=0.2)
    tight = ExactPhi(grammar, model, tol=0.0)
    for ctx in contexts(grammar, model)[:1]:
        lo = loose.log_phi(ctx).exp()
        true = tight.log_phi(ctx).exp()
        delta = loose.additive_error(ctx)
        assert delta >= 0 and ((true - lo)[torch.isfinite(true.log())] <= delta + 1e-12).all()


def test_onestep_equals_allowed_mass_at_the_next_state(world):
    grammar, model = world
    est = OneStepPhi(grammar)
    for ctx in contexts(grammar, model):
        log_phi = est.log_phi(ctx)
        probs = torch.softmax(ctx.logits.double(), -1)
        for t in torch.nonzero(torch.isfinite(log_phi)).flatten().tolist():
            if t == grammar.eos_token_id:
                continue
            mass = probs[: grammar.vocab_size][grammar.allowed(grammar.next_state(ctx.state, t))]
            assert math.isclose(log_phi[t].exp().item(), mass.sum().item(), rel_tol=1e-9)


def test_estimators_refuse_bad_construction(world):
    grammar, _ = world
    with pytest.raises(ValueError, match="model="):
        ExactPhi(grammar, None)
    with pytest.raises(TypeError, match="Grammar"):
        OneStepPhi("not a grammar")
    with pytest.raises(ValueError, match="tol"):
        ExactPhi(grammar, object(), tol=1.5)


def test_all_pairs_of_estimators_agree_on_the_admissible_set(world):
    grammar, model = world
    ests = [UniformPhi(grammar), OneStepPhi(grammar), ExactPhi(grammar, model, tol=0.0)]
    for ctx in contexts(grammar, model, remaining=4):
        supports = [torch.isfinite(e.log_phi(ctx)) for e in ests]
        for x, y in itertools.combinations(supports, 2):
            assert torch.equal(x, y)


class TestOneStepTrue(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        from hf_fvo.phi import OneStepTruePhi

        return OneStepTruePhi(grammar, model, k=3)


def test_onestep_true_uses_the_next_step_distribution(world):
    from hf_fvo.phi import OneStepTruePhi

    grammar, model = world
    est = OneStepTruePhi(grammar, model, k=100)  # every candidate gets the true value
    for ctx in contexts(grammar, model):
        log_phi = est.log_phi(ctx)
        for t in torch.nonzero(torch.isfinite(log_phi)).flatten().tolist():
            if t == grammar.eos_token_id:
                continue
            probs = torch.softmax(model.table.double()[t], -1)  # bigram: p(· | x, t)
            mass = probs[grammar.allowed(grammar.next_state(ctx.state, t))].sum()
            assert math.isclose(log_phi[t].exp().item(), mass.item(), rel_tol=1e-9)


@pytest.mark.parametrize("name", ["onestep", "exact"])
def test_all_zero_phi_falls_back_to_masking_not_a_dead_row(sp_tokenizer, name):
    from hf_fvo import Grammar
    from hf_fvo.phi import ESTIMATORS
    from tests.lms import BigramLM

    g = Grammar.from_choices(["ab", "b"], sp_tokenizer)
    table = torch.full((len(sp_tokenizer), len(sp_tokenizer)), -torch.inf)
    table[:, 0] = 0.0  # the model only ever emits token 0, which no member uses
    model = BigramLM(table)
    est = ESTIMATORS[name](g, model) if ESTIMATORS[name].needs_model else ESTIMATORS[name](g)
    logits = table[PROMPT[-1]].double()
    ctx = PhiContext(g.initial_state, (), logits, None, PROMPT)
    log_phi = est.log_phi(ctx)
    assert torch.equal(torch.isfinite(log_phi), g.allowed(g.initial_state))
    assert not torch.isnan(log_phi).any()
