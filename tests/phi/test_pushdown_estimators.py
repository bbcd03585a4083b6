"""Φ estimators on pushdown grammars agree with the same estimators on the token automaton of the
same language (the conformance world: a finite language, a bigram LM with a known table)."""

from __future__ import annotations

import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import GrammarError
from hf_fvo.generation import FVOLogitsProcessor
from hf_fvo.phi import (
    ExactPhi,
    GatedPhi,
    MarkovExactPhi,
    OneStepPhi,
    OneStepTruePhi,
    PhiContext,
    RolloutPhi,
    UniformPhi,
)
from tests.phi.conformance import CHOICES, PROMPT, contexts
from tests.phi.conformance import world as world  # the shared fixture

BUDGET = 12  # longer than any member: the budget never binds


def pushdown_twin(grammar: Grammar, tokenizer) -> Grammar:
    pattern = "(?:" + "|".join(CHOICES) + ")"
    twin = Grammar.from_regex(pattern, tokenizer, backend="pushdown")
    assert twin.backend == "pushdown" and grammar.backend == "automaton"
    return twin


def paired(grammar, twin, model, remaining=None):
    """(automaton context, pushdown context) at every non-leaf node of the language's trie."""
    for ctx in contexts(grammar, model, remaining):
        state = twin.walk(ctx.generated)
        assert state is not None
        yield ctx, PhiContext(state, ctx.generated, ctx.logits, ctx.remaining, ctx.prompt)


def test_full_coverage_onestep_equals_the_grouped_sums(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    grouped = OneStepPhi(grammar)
    scored = OneStepPhi(twin, coverage=1.0, max_candidates=10_000)
    for a, b in paired(grammar, twin, model):
        expected, got = grouped.log_phi(a), scored.log_phi(b)
        assert torch.equal(torch.isfinite(expected), torch.isfinite(got))
        finite = torch.isfinite(expected)
        assert torch.allclose(expected[finite], got[finite], atol=1e-12)
        assert scored.step(b).diagnostics.unscored == 0.0


def test_partial_coverage_reports_the_unscored_mass(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    est = OneStepPhi(twin, coverage=0.5, max_candidates=10_000)
    seen = []
    for _, ctx in paired(grammar, twin, model):
        step = est.step(ctx)
        seen.append(step.diagnostics.unscored)
        assert 0.0 <= step.diagnostics.unscored <= 0.5 + 1e-12
        allowed = twin.allowed(ctx.state)
        assert torch.equal(torch.isfinite(step.log_phi), allowed)
    assert max(seen) > 0.0  # some position left candidates unscored


def test_exact_phi_is_the_same_on_both_backends(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    on_automaton = ExactPhi(grammar, model, tol=0.0)
    on_pushdown = ExactPhi(twin, model, tol=0.0)
    for a, b in paired(grammar, twin, model, remaining=BUDGET):
        expected, got = on_automaton.log_phi(a), on_pushdown.log_phi(b)
        finite = torch.isfinite(expected)
        assert torch.equal(finite, torch.isfinite(got))
        assert torch.allclose(expected[finite], got[finite], atol=1e-9)


def test_model_based_estimators_run_on_pushdown_grammars(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    for est in (UniformPhi(twin), OneStepTruePhi(twin, model, k=4),
                RolloutPhi(twin, model, k=8), GatedPhi(twin, model, k=8, tau=0.0)):  # fmt: skip
        for _, ctx in list(paired(grammar, twin, model, remaining=BUDGET))[:4]:
            log_phi = est.log_phi(ctx)
            assert not torch.isnan(log_phi).any()
            assert torch.equal(torch.isfinite(log_phi) & ~twin.allowed(ctx.state),
                               torch.zeros_like(log_phi, dtype=torch.bool))  # fmt: skip


def test_automaton_only_estimators_say_so(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    try:
        MarkovExactPhi(twin, model)
    except GrammarError as exc:
        assert "needs a token automaton" in str(exc)
    else:
        raise AssertionError("MarkovExactPhi accepted a pushdown grammar")
    try:
        twin.token_trie()
    except GrammarError as exc:
        assert "token automata" in str(exc)
    else:
        raise AssertionError("token_trie on a pushdown grammar")


def test_processor_is_prefix_pure_on_pushdown_grammars(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    proc = FVOLogitsProcessor(twin, phi="onestep", prompt_length=len(PROMPT))
    prefixes = [ctx.generated for ctx in contexts(grammar, model)]
    scores = torch.randn(1, model.config.vocab_size, generator=torch.Generator().manual_seed(0))
    first = {p: proc(torch.tensor([[*PROMPT, *p]]), scores.clone()) for p in prefixes}
    for p in reversed(prefixes):  # another order, after other prefixes were visited
        assert torch.equal(proc(torch.tensor([[*PROMPT, *p]]), scores.clone()), first[p])


def test_fvo_spec_samples_members_of_a_pushdown_grammar(world, sp_tokenizer):
    grammar, model = world
    twin = pushdown_twin(grammar, sp_tokenizer)
    torch.manual_seed(0)
    out = hf_fvo.generate(model, torch.tensor([PROMPT]), grammar=twin, phi="onestep",
                          assistant_model=model, do_sample=True, top_k=0, max_new_tokens=8,
                          return_dict_in_generate=True)  # fmt: skip
    row = out.sequences[0, len(PROMPT) :].tolist()
    text = sp_tokenizer.decode(row[: row.index(twin.eos_token_id)])
    assert text in CHOICES and out.speculation.rounds >= 1
