"""Particles at any temperature and nucleus: ``generate(particles=N, temperature=τ, top_p=…)``
targets q(x)·1[x ∈ L_B]/Z, q the product of the warped conditionals (what unconstrained sampling
with the same settings draws), not μ_proj of the warped model and not μ* of the unwarped one.

The exact warped law comes from :func:`hf_fvo.eval.grammar_conditional_law` with ``warpers``,
itself checked against a law computed here from a bigram table. Thresholds are the null 99th
percentile of TV for the number of draws from that exact law; each setting first shows power:
the unwarped μ* and one particle (masking the warped model) lie well outside that percentile.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import ConstraintConflictError, InvalidArgumentError
from hf_fvo.eval import empirical_tv, grammar_conditional_law, null_tv_percentiles
from hf_fvo.grammar.vocabulary import TokenVocabulary
from tests.generation.finite import MAX_NEW, PROMPT, finite_setting
from tests.lms import BigramLM

DRAWS = 1000
FINITE_DRAWS = 300  # a 64-row forward over SmolLM2's vocabulary per step: fewer draws there
CHOICES = ["ab", "abc", "ba", "bca", "cab", "c"]
BOS, EOS, BUDGET = 4, 3, 4
# a, b, c, EOS, BOS; row = the previous token. From BOS the nucleus at 0.9 is {a, b}: members
# starting with c carry 0.15 of μ* and none of the warped law; EOS after a word's first letter
# takes mass the language refuses, so masking the warped model is far from its μ*.
TABLE = [
    [0.45, 0.12, 0.08, 0.35, 0.0],
    [0.30, 0.05, 0.25, 0.40, 0.0],
    [0.50, 0.15, 0.05, 0.30, 0.0],
    [0.20, 0.20, 0.20, 0.40, 0.0],
    [0.52, 0.40, 0.05, 0.03, 0.0],
]
SETTINGS = {
    "temperature=0.5": ({"temperature": 0.5}, [TemperatureLogitsWarper(0.5)]),
    "top_p=0.9": ({"top_p": 0.9}, [TopPLogitsWarper(0.9)]),
}


@pytest.fixture(scope="module")
def letters():
    vocab = TokenVocabulary([b"a", b"b", b"c", None, None], eos_token_ids=[EOS])
    lm = BigramLM(torch.log(torch.tensor(TABLE).clamp_min(1e-12)))
    return Grammar.from_choices(CHOICES, vocab), lm


def _outputs(sequences: torch.Tensor, start: int, eos: int) -> list[tuple[int, ...]]:
    rows = [row[start:] for row in sequences.tolist()]
    return [tuple(row[: row.index(eos) + 1]) for row in rows]


def _draws(model, grammar, prompt, n, draws, budget, seed, **warp):
    """One output from each of ``draws`` independent particle runs (a batch of equal prompts:
    particles run per prompt)."""
    torch.manual_seed(seed)
    ids = torch.tensor([list(prompt)] * draws)
    out = hf_fvo.generate(model, ids, grammar=grammar, particles=n, do_sample=True,
                          max_new_tokens=budget, **warp)  # fmt: skip
    return _outputs(out, len(prompt), grammar.eos_token_id)


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most likely tokens holding at least ``top_p`` of the mass."""
    order = np.argsort(-p, kind="stable")
    keep = np.zeros(len(p), dtype=bool)
    held = 0.0
    for t in order:
        keep[t] = True
        held += p[t]
        if held >= top_p:
            break
    return keep


def test_the_warped_reference_law_is_the_product_of_warped_conditionals(letters):
    """q(x) = Π q_t(x_t) over the members, q_t the bigram row tempered or cut to its nucleus
    and renormalised, computed here from the table without Transformers' warpers."""
    g, lm = letters
    table = np.array(TABLE)
    words = [[b"abc".index(ch.encode()) for ch in w] + [EOS] for w in CHOICES]
    for name, (_, warpers) in SETTINGS.items():
        rows = []
        for row in table:
            tempered = name.startswith("temperature")
            q = row**2.0 if tempered else row * _nucleus(row, 0.9)  # p^{1/T} at T = 0.5
            rows.append(q / q.sum())
        logs = {}
        for w in words:
            prev, total = BOS, 0.0
            for t in w:
                total += math.log(rows[prev][t]) if rows[prev][t] > 0 else -math.inf
                prev = t
            if total > -math.inf:
                logs[tuple(w)] = total
        z = math.log(sum(math.exp(v) for v in logs.values()))
        expected = {k: math.exp(v - z) for k, v in logs.items()}
        law = grammar_conditional_law(g, lm, (BOS,), max_new_tokens=BUDGET, warpers=warpers)
        assert set(law.probs) == set(expected), name
        for k, v in expected.items():
            assert law.probs[k] == pytest.approx(v, rel=1e-6), (name, k)  # a float32 table


@pytest.mark.parametrize("name", list(SETTINGS))
def test_particles_sample_the_warped_mu_star_not_masking_nor_the_model_law(letters, name):
    g, lm = letters
    warp, warpers = SETTINGS[name]
    star = grammar_conditional_law(g, lm, (BOS,), max_new_tokens=BUDGET)
    warped = grammar_conditional_law(g, lm, (BOS,), max_new_tokens=BUDGET, warpers=warpers)
    _, p99 = null_tv_percentiles(warped, DRAWS, seed=1)
    assert warped.tv(star) > 3 * p99  # the warp matters at this many draws
    masked = _draws(lm, g, (BOS,), 1, DRAWS, BUDGET, seed=2, **warp)
    assert empirical_tv(masked, warped) > 3 * p99  # masking the warped model is μ_proj of q
    many = _draws(lm, g, (BOS,), 64, DRAWS, BUDGET, seed=3, **warp)
    assert empirical_tv(many, warped) <= p99


def test_particles_at_temperature_half_on_smollm2s_vocabulary(smol_tokenizer):
    """A tiny Llama over SmolLM2's 49,152 tokens, six choices: at T = 0.5 the warped μ* moves
    most of the mass, and 32 particles land within its null."""
    model, g, star, _ = finite_setting(smol_tokenizer)
    warped = grammar_conditional_law(g, model, PROMPT, max_new_tokens=MAX_NEW,
                                     warpers=[TemperatureLogitsWarper(0.5)])  # fmt: skip
    _, p99 = null_tv_percentiles(warped, FINITE_DRAWS, seed=4)
    assert warped.tv(star) > 3 * p99
    many = _draws(model, g, PROMPT, 32, FINITE_DRAWS, MAX_NEW, seed=5, temperature=0.5)
    assert empirical_tv(many, warped) <= p99


def test_a_processor_with_its_own_history_is_refused_by_name(letters):
    """Classifier-free guidance keeps a cache of the calls before: its scores are not a function
    of one particle's prefix, so no law over sequences is defined by them."""
    g, lm = letters
    guidance = UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, lm)
    with pytest.raises(InvalidArgumentError, match="UnbatchedClassifierFreeGuidance"):
        hf_fvo.generate(lm, torch.tensor([[BOS]]), grammar=g, particles=4, do_sample=True,
                        max_new_tokens=BUDGET, logits_processor=[guidance])  # fmt: skip


def test_a_warp_that_leaves_the_language_no_mass_is_named(letters):
    """top_p = 0.5 keeps only ``a`` after BOS, and after ``a`` only ``a`` and EOS: no member has
    mass under the warped model. The reference law and the particles both say so."""
    g, lm = letters
    with pytest.raises(InvalidArgumentError, match="no member"):
        grammar_conditional_law(g, lm, (BOS,), max_new_tokens=BUDGET,
                                warpers=[TopPLogitsWarper(0.5)])  # fmt: skip
    with pytest.raises(ConstraintConflictError, match="warper"):
        _draws(lm, g, (BOS,), 8, 1, BUDGET, seed=6, top_p=0.5)


def test_the_reference_law_refuses_a_processor_that_reads_the_prefix(letters):
    g, lm = letters
    with pytest.raises(InvalidArgumentError, match="RepetitionPenaltyLogitsProcessor"):
        grammar_conditional_law(g, lm, (BOS,), max_new_tokens=BUDGET,
                                warpers=[RepetitionPenaltyLogitsProcessor(1.3)])  # fmt: skip
