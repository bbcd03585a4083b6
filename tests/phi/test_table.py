"""Exact Φ from a table of member log-probabilities (what a host that runs the model itself,
like vLLM, can hand a logits processor) equals exact Φ from the model's own forwards."""

from __future__ import annotations

import math

import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.errors import GrammarTooLargeError, InvalidArgumentError
from hf_fvo.models import tiny_random_llama
from hf_fvo.phi import ExactPhi, PhiContext, TablePhi, enumerate_members

PROMPT = (1, 5, 9)


def _logprobs(model, grammar, prompt, member):
    """log p of each token of ``member`` after ``prompt``, then log p(EOS) summed over the
    grammar's EOS ids, from one forward."""
    ids = torch.tensor([[*prompt, *member]])
    with torch.no_grad():
        rows = torch.log_softmax(model(ids).logits[0].double(), -1)
    out = [float(rows[len(prompt) - 1 + i, t]) for i, t in enumerate(member)]
    end = rows[len(prompt) + len(member) - 1, list(grammar.eos_token_ids)]
    return [*out, float(torch.logsumexp(end, 0))]


@pytest.fixture(scope="module")
def world(smol_tokenizer):
    g = Grammar.from_choices(["yes", "yet", "no", "nothing"], smol_tokenizer)
    model = tiny_random_llama(len(smol_tokenizer), sharpness=4.0)
    return g, model


def _contexts(g, model, budget):
    """Every prefix of every member within the budget, with the model's logits there."""
    members = enumerate_members(g, budget)
    prefixes = {m[:k] for m in members for k in range(len(m) + 1)}
    for u in sorted(prefixes):
        with torch.no_grad():
            logits = model(torch.tensor([[*PROMPT, *u]])).logits[0, -1]
        remaining = None if budget is None else budget - len(u)
        yield PhiContext(g.walk(u), u, logits, remaining, PROMPT)


@pytest.mark.parametrize("budget", [None, 3])
def test_table_phi_equals_exact_phi_from_forwards_at_every_prefix(world, budget):
    g, model = world
    table = [(m, _logprobs(model, g, PROMPT, m)) for m in enumerate_members(g, budget)]
    by_table, by_model = TablePhi(g, table), ExactPhi(g, model, tol=0.0)
    checked = 0
    for ctx in _contexts(g, model, budget):
        a, b = by_table.log_phi(ctx), by_model.log_phi(ctx)
        assert torch.equal(torch.isfinite(a), torch.isfinite(b))
        finite = torch.isfinite(a)
        assert torch.allclose(a[finite], b[finite], atol=1e-5), ctx.generated
        # the power of the comparison: Φ is not constant on the candidates somewhere
        checked += int(finite.sum() > 1 and (a[finite].max() - a[finite].min()) > 0.1)
    assert checked > 0


def test_a_budget_drops_the_members_that_do_not_fit(world):
    g, _ = world
    every, short = enumerate_members(g), enumerate_members(g, 2)
    assert set(short) < set(every)
    assert all(len(m) + 1 <= 2 for m in short)


def test_the_table_refuses_what_is_not_a_member_or_malformed(world):
    g, _ = world
    with pytest.raises(InvalidArgumentError, match="not a member"):
        TablePhi(g, [((5, 6, 7), [0.0, 0.0, 0.0, 0.0])])
    member = enumerate_members(g)[0]
    with pytest.raises(InvalidArgumentError, match="one per token plus the end"):
        TablePhi(g, [(member, [0.0])])
    with pytest.raises(InvalidArgumentError, match="NaN or above 0"):
        TablePhi(g, [(member, [math.nan] * (len(member) + 1))])


def test_enumerating_an_infinite_language_stops_with_a_typed_error(smol_tokenizer):
    g = Grammar.from_regex("a+", smol_tokenizer)
    with pytest.raises(GrammarTooLargeError):
        enumerate_members(g, limit=50)
