"""Monte-Carlo rollout Φ and the gated hybrid: the shared conformance suite, Hoeffding coverage
against exact Φ on a Markov model, the gate's rule, purity per prefix, pruning reports, and
certificates through hf_fvo.generate."""

from __future__ import annotations

import math

import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM
from hf_fvo.phi import GatedPhi, MarkovExactPhi, OneStepPhi, PhiContext, RolloutPhi
from tests.phi.conformance import EstimatorConformance
from tests.phi.conformance import world as world  # the shared fixture

BOS = 3


class TestRollout(EstimatorConformance):
    varies = "somewhere"  # k draws can tie, e.g. all fail

    def make(self, grammar, model):
        return RolloutPhi(grammar, model, k=64, seed=1)


class TestMaskedRollout(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        return RolloutPhi(grammar, model, k=16, seed=1, masked=True)


class TestGated(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        return GatedPhi(grammar, model, k=64, tau=0.5, seed=1)


@pytest.fixture(scope="module")
def dyck():
    g = Grammar.dyck(3, 10, BRACKETS)
    lm = MarkovLM.random(4, order=2, seed=7, bos_token_id=BOS, eos_token_id=2)
    return g, lm, MarkovExactPhi(g, lm)


def _positions(g, lm, budget):
    """One context per reachable (context, state, tokens left) along the language."""
    out, frontier = [], {(): None}
    for t in range(budget):
        nxt = {}
        for prefix in frontier:
            state = g.walk(prefix)
            row = lm.log_probs[lm.context_of((BOS, *prefix))]
            out.append(PhiContext(state, prefix, row, budget - t, (BOS,)))
            for y in g.allowed_token_ids(state).tolist():
                child = (*prefix, y)
                if g.walk(child) is not None and g.can_accept_within(g.walk(child), budget - t - 2):
                    nxt.setdefault(child, None)
        frontier = nxt
    return out


@pytest.mark.parametrize("masked", [False, True])
def test_rollouts_lie_in_their_hoeffding_band_at_1_minus_alpha_of_steps(dyck, masked):
    g, lm, exact = dyck
    alpha = 0.1
    est = RolloutPhi(g, lm, k=32, alpha=alpha, seed=3, masked=masked)
    inside = total = 0
    for ctx in _positions(g, lm, 11):
        step = est.step(ctx)
        truth = exact.log_phi(ctx).exp()
        mine = step.log_phi.exp()
        finite = torch.isfinite(exact.log_phi(ctx))
        if int(finite.sum()) < 1:
            continue
        total += 1
        inside += float((mine[finite] - truth[finite]).abs().max()) <= step.diagnostics.delta
    assert total >= 30
    assert inside / total >= 1 - alpha


@pytest.mark.parametrize("masked", [False, True])
def test_rollout_estimates_converge_to_exact_phi(dyck, masked):
    # with k = 4096 the Hoeffding half-width at α = 1e-6 is 0.043: a loose bias would show
    g, lm, exact = dyck
    est = RolloutPhi(g, lm, k=4096, alpha=1e-6, seed=0, masked=masked)
    for ctx in _positions(g, lm, 11)[:6]:
        step = est.step(ctx)
        finite = torch.isfinite(exact.log_phi(ctx))
        gap = (step.log_phi.exp() - exact.log_phi(ctx).exp())[finite].abs().max()
        assert float(gap) <= step.diagnostics.delta


def test_masked_rollout_weight_is_the_probability_of_a_forced_completion():
    # D_{1,2} after "(": the grammar forces ")" then EOS, so every masked rollout takes that
    # path with weight p(")" | "(")·p(EOS | ")") = Φ("(") exactly; unconstrained rollouts can
    # only say 0 or 1 each
    g = Grammar.dyck(1, 2, BRACKETS)
    lm = MarkovLM.random(4, seed=11, bos_token_id=BOS, eos_token_id=2)
    ctx = PhiContext(g.initial_state, (), lm.log_probs[BOS], 3, (BOS,))
    truth = MarkovExactPhi(g, lm).log_phi(ctx)
    one = RolloutPhi(g, lm, k=1, masked=True).log_phi(ctx)
    assert torch.allclose(one[0], truth[0], rtol=0, atol=1e-12)
    assert float(truth[0].exp()) < 0.9
    assert RolloutPhi(g, lm, k=1).log_phi(ctx)[0].exp().item() in (0.0, 1.0)


def test_frozen_estimates_are_a_pure_function_of_the_prefix(dyck):
    g, lm, _ = dyck
    ctx = _positions(g, lm, 11)[0]  # Φ("(") ≈ 0.05: 64 rollouts rarely agree twice
    frozen = RolloutPhi(g, lm, k=64, seed=5, resample=False)
    assert torch.equal(frozen.log_phi(ctx), frozen.log_phi(ctx))
    assert torch.equal(frozen.log_phi(ctx), RolloutPhi(g, lm, k=64, seed=5, resample=False)
                       .log_phi(ctx))  # fmt: skip
    fresh = RolloutPhi(g, lm, k=64, seed=5)
    draws = {tuple(fresh.log_phi(ctx).tolist()) for _ in range(4)}
    assert len(draws) > 1  # resample=True: every call draws afresh
    again = RolloutPhi(g, lm, k=64, seed=5)
    assert {tuple(again.log_phi(ctx).tolist()) for _ in range(4)} == draws  # but seeded


def test_pruned_candidates_keep_onestep_and_void_the_bound(dyck):
    g, lm, _ = dyck

    def brackets(c):  # admissible non-EOS candidates
        return int(torch.isfinite(OneStepPhi(g).log_phi(c))[:2].sum())

    ctx = next(c for c in _positions(g, lm, 11) if brackets(c) == 2)
    est = RolloutPhi(g, lm, k=8, candidates=1)
    step = est.step(ctx)
    report = est.reports[ctx.generated]
    assert report.rolled_out == 1 and report.pruned >= 1 and 0 < report.pruned_mass < 1
    assert step.diagnostics.delta is None
    onestep = OneStepPhi(g).log_phi(ctx)
    scores = torch.log_softmax(ctx.logits, -1) + onestep
    scores[list(g.eos_token_ids)] = -math.inf
    pruned = torch.argsort(scores, descending=True)[1]
    assert step.log_phi[pruned] == onestep[pruned]


@pytest.mark.parametrize("tau", [0.0, 0.3, 1.0, 3.0])
def test_gate_escalates_exactly_where_onestep_is_dispersed(dyck, tau):
    g, lm, _ = dyck
    gated = GatedPhi(g, lm, k=4, tau=tau)
    onestep = OneStepPhi(g)
    for ctx in _positions(g, lm, 11):
        before = gated.escalations
        out = gated.log_phi(ctx)
        values = onestep.log_phi(ctx)
        values = values[torch.isfinite(values)]
        dispersed = len(values) >= 2 and float(values.max() - values.min()) > tau
        assert (gated.escalations > before) == dispersed
        if not dispersed:
            assert torch.equal(out, onestep.log_phi(ctx))
    assert gated.steps == len(_positions(g, lm, 11))


def test_rollout_samples_through_generate_with_certificates(dyck):
    g, lm, _ = dyck
    est = RolloutPhi(g, lm, k=16)
    out = hf_fvo.generate(lm, torch.full((3, 1), BOS), grammar=g, phi=est, max_new_tokens=11,
                          do_sample=True, top_k=0, return_dict_in_generate=True)  # fmt: skip
    assert len(out.certificates) == 3
    for row, cert in zip(out.sequences[:, 1:].tolist(), out.certificates, strict=True):
        assert g.is_accepting(g.walk(row[: row.index(2)]))
        assert len(cert.steps) == row.index(2) + 1
        assert all(s is not None and s.delta is not None for s in cert.steps[:-1])


def test_exact_certificates_are_zero_and_onestep_ones_are_void(dyck):
    g, lm, _ = dyck
    for phi, bound in (("exact", 0.0), ("onestep", math.inf)):
        out = hf_fvo.generate(lm, torch.full((2, 1), BOS), grammar=g, phi=phi, max_new_tokens=11,
                              do_sample=True, top_k=0, return_dict_in_generate=True)  # fmt: skip
        assert [c.tv_bound for c in out.certificates] == [bound, bound]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"k": 0}, "k must"), ({"alpha": 1.5}, "alpha"), ({"candidates": 0}, "candidates")],
)
def test_bad_arguments(dyck, kwargs, match):
    g, lm, _ = dyck
    with pytest.raises(ValueError, match=match):
        RolloutPhi(g, lm, **kwargs)


def test_infinite_language_needs_a_budget_or_horizon():
    g = Grammar.from_transitions({0: {0: 0, 1: 0}}, [0], vocab_size=4, eos_token_id=2)
    lm = MarkovLM.random(4, seed=0, bos_token_id=BOS, eos_token_id=2)
    ctx = PhiContext(0, (), lm.log_probs[BOS], None, (BOS,))
    with pytest.raises(ValueError, match="horizon"):
        RolloutPhi(g, lm).log_phi(ctx)
    assert torch.isfinite(RolloutPhi(g, lm, horizon=5).log_phi(ctx)).any()


def _letters():
    """A byte vocabulary, a language with 27 candidates at every step, and a tiny Llama."""
    from hf_fvo.grammar import TokenVocabulary
    from hf_fvo.models import tiny_random_llama

    vocab = TokenVocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])
    g = Grammar.from_regex("[a-z ]{1,8}", vocab)
    return g, tiny_random_llama(257, eos_token_id=256, seed=3)


@pytest.mark.parametrize("lm_kind", ["markov", "llama"])
def test_a_seed_gives_the_same_sums_whatever_the_chunk_size(dyck, lm_kind):
    """Row i draws from uniforms of (seed, i, step) alone: chunking the rows (to bound memory)
    must not change a single rollout's path, so not a single sum."""
    from hf_fvo.phi.rollout import rollout_successes

    if lm_kind == "markov":
        g, lm, _ = dyck
        prefix, y = (BOS,), 0
    else:
        g, lm = _letters()
        prefix, y = (10, 20, 30), ord("a")
    starts = [(y, g.walk([y]))]
    if lm_kind == "llama":
        starts += [(t, g.walk([t])) for t in (ord("b"), ord("q"), ord(" "))]
    sums = {rows: rollout_successes(lm, g, prefix, starts, k=64, max_steps=9, seed=11,
                                    max_rows=rows)[0]
            for rows in (None, 1, 5, 16, 100)}  # fmt: skip
    assert all(torch.equal(sums[None], other) for other in sums.values()), sums
    assert 0 < float(sums[None].sum()) < 64 * len(starts)  # not all alike: paths differ
    again = rollout_successes(lm, g, prefix, starts, k=64, max_steps=9, seed=12)[0]
    assert not torch.equal(again, sums[None])  # another seed, other paths


def test_rows_in_flight_stay_within_the_memory_budget_whatever_the_candidates():
    """The default estimator rolls out every candidate of a 27-token set ×k: with a memory
    budget of 8 rows the model never sees more than 8 rows at once, for 3 candidates or 27,
    and the estimates equal those of one unbounded batch."""
    from hf_fvo.phi.rollout import rollout_rows

    g, model = _letters()
    seen: list[int] = []
    forward = model.forward

    def counting(*args, **kwargs):
        seen.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    model.forward = counting
    prompt = (10, 20, 30)
    logits = torch.zeros(g.vocab_size)
    ctx = PhiContext(g.initial_state, (), logits, 8, prompt)
    row_bytes = (1 << 30) // rollout_rows(model, len(prompt) + 8, g.vocab_size, 1 << 30)
    small = RolloutPhi(g, model, k=4, memory=8 * row_bytes, seed=2, resample=False)
    assert len(small.rolled_out(ctx)) == 27
    estimate = small.log_phi(ctx)
    assert max(seen) <= 8 and len(seen) > 8  # many chunks, none wider than the budget
    few = Grammar.from_regex("[abc]{1,8}", g.vocabulary)
    seen.clear()
    RolloutPhi(few, model, k=4, memory=8 * row_bytes, seed=2, resample=False).log_phi(
        PhiContext(few.initial_state, (), logits, 8, prompt)
    )
    assert max(seen) <= 8
    seen.clear()
    whole = RolloutPhi(g, model, k=4, memory=1 << 34, seed=2, resample=False).log_phi(ctx)
    assert max(seen) == 27 * 4 and torch.equal(whole, estimate)


def test_the_default_candidates_are_the_smallest_top_set_holding_the_coverage():
    g, model = _letters()
    logits = torch.linspace(0.0, 12.0, g.vocab_size)  # steep: a few letters hold the mass
    ctx = PhiContext(g.initial_state, (), logits, 8, (10, 20, 30))
    est = RolloutPhi(g, model, k=2, coverage=0.9)
    chosen = est.rolled_out(ctx)
    score = torch.log_softmax(logits.double(), -1) + OneStepPhi(g).log_phi(ctx)
    live = [t for t in range(g.vocab_size) if math.isfinite(score[t]) and t != 256]
    mass = torch.softmax(score[live], 0)
    share = dict(zip(live, mass.tolist(), strict=True))
    assert len(live) == 27 and len(chosen) >= 16
    assert sum(share[t] for t in chosen) >= 0.9
    if len(chosen) > 16:  # minimal above the floor of 16
        assert sum(share[t] for t in chosen[:-1]) < 0.9
    assert len(RolloutPhi(g, model, k=2, coverage=1.0).rolled_out(ctx)) == 27
    with pytest.raises(hf_fvo.errors.InvalidArgumentError, match="coverage"):
        RolloutPhi(g, model, coverage=0.0)


def test_the_default_candidates_are_capped_where_p_is_flat(smol_tokenizer):
    """A flat p_t over thousands of admissible tokens (random weights inside a string): the
    coverage rule alone would keep nearly all of them; the default keeps 256."""
    from hf_fvo.models import tiny_random_llama

    g = Grammar.from_regex("[a-z]{1,12}", smol_tokenizer)
    model = tiny_random_llama(g.vocab_size, eos_token_id=smol_tokenizer.eos_token_id)
    ctx = PhiContext(g.initial_state, (), torch.zeros(g.vocab_size), 16, (1, 2, 3))
    every = RolloutPhi(g, model, k=2, coverage=1.0).rolled_out(ctx)
    assert len(every) > 1000
    assert len(RolloutPhi(g, model, k=2).rolled_out(ctx)) == 256
