"""The properties every Φ estimator must satisfy, as a pytest mixin outside authors can run.

Subclass :class:`EstimatorConformance` in a test module, define ``make(grammar, model)`` and
import the :func:`world` fixture beside it::

    from hf_fvo.testing import EstimatorConformance, world  # noqa: F401  (the fixture)

    class TestMyPhi(EstimatorConformance):
        varies = "somewhere"  # or "everywhere" (default), or False for a constant estimator

        def make(self, grammar, model):
            return MyPhi(grammar, model)

The default world is a finite language over a small byte vocabulary, scored by an order-1
:class:`~hf_fvo.models.MarkovLM` whose table is known, so exact Φ is known by brute force. A
test module may define its own ``world`` fixture returning ``(grammar, model)``: a finite
grammar and an order-1 Markov LM over the grammar's token ids, prompted with :data:`PROMPT`.
Requires pytest (the ``test`` extra).
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_fvo.generation import FVOLogitsProcessor
from hf_fvo.grammar import Grammar, TokenVocabulary
from hf_fvo.models import MarkovLM
from hf_fvo.phi import ExactPhi, PhiContext, PhiEstimator

__all__ = ["CHOICES", "PROMPT", "EstimatorConformance", "contexts", "default_world", "world"]

CHOICES = ["ab", "abc", "ba", "bca", "cab", "c"]
PROMPT = (5,)
# token ids 0–4 spell text (several splits of each choice); 5 is BOS (the prompt), 6 EOS
_TOKENS = [b"a", b"b", b"c", b"ab", b"ca", None, None]


def default_world() -> tuple[Grammar, MarkovLM]:
    """The default world: :data:`CHOICES` over a seven-token vocabulary, and an order-1 Markov LM
    with sharp random rows (logits of standard deviation 3).

    Example:
        >>> from hf_fvo.testing import default_world
        >>> grammar, model = default_world()
        >>> grammar.token_trie().num_sequences  # every tokenization of every choice
        11
    """
    vocab = TokenVocabulary(_TOKENS, eos_token_ids=[6])
    grammar = Grammar.from_choices(CHOICES, vocab)
    model = MarkovLM.random(len(_TOKENS), seed=3, temperature=1 / 3, bos_token_id=5,
                            eos_token_id=6, pad_token_id=6)  # fmt: skip
    return grammar, model


@pytest.fixture(scope="module")
def world() -> tuple[Grammar, MarkovLM]:
    """``(grammar, model)`` the suite runs in (:func:`default_world`)."""
    return default_world()


def contexts(grammar: Grammar, model: MarkovLM, remaining: int | None = None) -> list[PhiContext]:
    """One context per explored prefix of the grammar's token trie, with the order-1 model's
    next-token log-probabilities there."""
    trie = grammar.token_trie()
    logp = torch.log_softmax(model.log_probs.detach().double(), dim=-1)
    out = []
    for node in range(trie.num_nodes):
        if bool(trie.is_eos[node]):
            continue
        prefix = trie.prefix(node)
        last = prefix[-1] if prefix else PROMPT[-1]
        out.append(PhiContext(int(trie.state[node]), prefix, logp[last], remaining, PROMPT))
    return out


class EstimatorConformance:
    """The conformance suite; see the module docstring."""

    # Where the true Φ varies across candidates, Φ̂ must vary too: "everywhere" (at each such
    # position), "somewhere" (at one at least: a heuristic may miss some), or False (constant
    # by design, e.g. uniform).
    varies: str | bool = "everywhere"

    def make(self, grammar: Grammar, model: MarkovLM) -> PhiEstimator:
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
            special = next(i for i in range(len(logits)) if not bool(grammar.allowed(ctx.state)[i]))
            logits[special] = 0.0  # an inadmissible token takes all the mass
            tiny = PhiContext(ctx.state, ctx.generated, logits, ctx.remaining, ctx.prompt)
            log_phi = est.log_phi(tiny)
            assert not torch.isnan(log_phi).any() and torch.isfinite(log_phi).any()
            assert (log_phi[torch.isfinite(log_phi)] > -math.inf).all()
