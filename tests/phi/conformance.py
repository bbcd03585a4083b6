"""Properties every Φ estimator must satisfy: subclass :class:`EstimatorConformance` and define
``make(grammar, model)``; set ``varies = False`` for estimators that are constant by design.

The fixture world: a finite language over the small SentencePiece-style tokenizer, scored by a
bigram LM whose table we control, so exact Φ is known by brute force.
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.generation import FVOLogitsProcessor
from hf_fvo.phi import ExactPhi, PhiContext, PhiEstimator
from tests.lms import random_bigram

CHOICES = ["ab", "abc", "ba", "bca", "cab", "c"]
PROMPT = (5,)


@pytest.fixture(scope="module")
def world(sp_tokenizer):
    grammar = Grammar.from_choices(CHOICES, sp_tokenizer)
    model = random_bigram(len(sp_tokenizer), seed=3)
    return grammar, model


def contexts(grammar, model, remaining=None):
    """One context per explored prefix of the trie (logits from the bigram LM)."""
    trie = grammar.token_trie()
    logp = torch.log_softmax(model.table.double(), dim=-1)
    out = []
    for node in range(trie.num_nodes):
        if bool(trie.is_eos[node]):
            continue
        prefix = trie.prefix(node)
        last = prefix[-1] if prefix else PROMPT[-1]
        out.append(PhiContext(int(trie.state[node]), prefix, logp[last], remaining, PROMPT))
    return out


class EstimatorConformance:
    # Where the true Φ varies across candidates, Φ̂ must vary too: "everywhere" (at each such
    # position), "somewhere" (at one at least: a heuristic may miss some), or False (constant
    # by design, e.g. uniform).
    varies: str | bool = "everywhere"

    def make(self, grammar: Grammar, model) -> PhiEstimator:
        raise NotImplementedError

    def test_minus_inf_exactly_off_the_admissible_set(self, world):
        grammar, model = world
        est = self.make(grammar, model)
        for ctx in contexts(grammar, model):
            log_phi = est.log_phi(ctx)
            assert log_phi.dtype == torch.float64 and not torch.isnan(log_phi).any()
            finite = torch.isfinite(log_phi)
            assert not (finite & ~grammar.allowed(ctx.state)).any()
            assert finite.any(), "an admissible row must keep a candidate"

    def test_values_are_probabilities(self, world):
        grammar, model = world
        est = self.make(grammar, model)
        for ctx in contexts(grammar, model):
            log_phi = est.log_phi(ctx)
            assert (log_phi[torch.isfinite(log_phi)] <= 1e-12).all()

    def test_eos_is_certain_at_accepting_states(self, world):
        grammar, model = world
        est = self.make(grammar, model)
        for ctx in contexts(grammar, model):
            if grammar.is_accepting(ctx.state):
                assert est.log_phi(ctx)[grammar.eos_token_id] == 0.0

    def test_budget_excludes_candidates_that_cannot_finish(self, world):
        grammar, model = world
        est = self.make(grammar, model)
        for ctx in contexts(grammar, model, remaining=2):
            log_phi = est.log_phi(ctx)
            for t in torch.nonzero(torch.isfinite(log_phi)).flatten().tolist():
                if t in grammar.eos_token_ids:
                    continue
                nxt = grammar.next_state(ctx.state, t)
                assert grammar.min_tokens_to_accept(nxt) + 1 <= 1  # EOS must fit after t

    def test_constant_shift_changes_nothing(self, world):
        # Seed 000 §5: Φ̂ + c is the same correction; the sampled distribution is unchanged.
        grammar, model = world
        est = self.make(grammar, model)

        class Shifted(type(est)):
            def log_phi(self, ctx):
                return super().log_phi(ctx) - 7.0

        shifted = Shifted.__new__(Shifted)
        shifted.__dict__.update(est.__dict__)
        for ctx in contexts(grammar, model)[:5]:
            scores = ctx.logits.float().unsqueeze(0)
            ids = torch.tensor([[*PROMPT, *ctx.generated]])
            a = FVOLogitsProcessor(grammar, est, prompt_length=1)(ids, scores.clone())
            b = FVOLogitsProcessor(grammar, shifted, prompt_length=1)(ids, scores.clone())
            assert torch.allclose(torch.softmax(a, -1), torch.softmax(b, -1), atol=1e-6)

    def test_varies_per_candidate_where_phi_varies(self, world):
        if not self.varies:
            pytest.skip("constant by design")
        grammar, model = world
        est, exact = self.make(grammar, model), ExactPhi(grammar, model, tol=0.0)
        varying = []
        for ctx in contexts(grammar, model):
            true = exact.log_phi(ctx)
            finite = torch.isfinite(true)
            if finite.sum() > 1 and (true[finite].max() - true[finite].min()) > 1e-3:
                # over the candidates that can complete; Φ̂ = 0 (−inf) is a value too
                vals = est.log_phi(ctx)[finite].exp()
                varying.append(bool(vals.max() - vals.min() > 1e-12))
        assert varying, "the fixture must have positions where Φ varies"
        assert all(varying) if self.varies == "everywhere" else any(varying)

    def test_tiny_values_stay_exact_in_log_space(self, world):
        grammar, model = world
        est = self.make(grammar, model)
        for ctx in contexts(grammar, model)[:3]:
            logits = ctx.logits * 0 - 700.0  # every probability ~1e-304 before normalising
            logits[0] = 0.0  # token 0 is special: never admissible, takes all the mass
            tiny = PhiContext(ctx.state, ctx.generated, logits, ctx.remaining, ctx.prompt)
            log_phi = est.log_phi(tiny)
            assert not torch.isnan(log_phi).any() and torch.isfinite(log_phi).any()
            assert (log_phi[torch.isfinite(log_phi)] > -math.inf).all()
