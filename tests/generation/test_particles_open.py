"""Particles against rejection sampling on an open grammar.

Exact μ*_B needs no Φ where the unconstrained model answers in the format often enough: draw
from p (no grammar) within the budget and keep the outputs that end and that Python's ``re``
accepts. Those kept draws follow μ*_B = p(x)·1[x ∈ L, |x| ≤ B]/Z_B exactly, for any model,
with nothing of hf_fvo's grammar or Φ in them. The open regex ``[ab]*c`` (unbounded, several
tokenizations of one text) under a 2-layer random Llama (a transformer: the particles' shared
prompt cache and shrinking batch are exercised) whose outputs match it about 5 % of the time.
"""

from __future__ import annotations

import re

import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.eval import two_sample_null_tv, two_sample_tv
from hf_fvo.grammar import TokenVocabulary
from hf_fvo.models import tiny_random_llama

SPELLINGS = [b"a", b"b", b"c", b"ab", b"bc", b"d", b"cd"]
EOS, BOS = len(SPELLINGS), len(SPELLINGS) + 1
VOCAB = TokenVocabulary([*SPELLINGS, None, None], eos_token_ids=[EOS])
PATTERN = "[ab]*c"
BUDGET = 8
DRAWS = 400


def open_setting():
    """(model, grammar): the random Llama and the pushdown-compiled regex (also used by
    ``benchmarks/particles_rejection.py``)."""
    model = tiny_random_llama(len(VOCAB), eos_token_id=EOS, seed=1, sharpness=3.0)
    return model, Grammar.from_regex(PATTERN, VOCAB, backend="pushdown")


@pytest.fixture(scope="module")
def setting():
    model, grammar = open_setting()
    return model, grammar, rejection_draws(model, DRAWS, seed=0)


def _until_eos(row: list[int]) -> tuple[int, ...]:
    return tuple(row[: row.index(EOS) + 1]) if EOS in row else tuple(row)


def rejection_draws(model, count: int, seed: int) -> list[tuple[int, ...]]:
    """``count`` exact draws from μ*_B: unconstrained samples kept when they end within the
    budget and ``re.fullmatch`` accepts their text."""
    torch.manual_seed(seed)
    kept: list[tuple[int, ...]] = []
    while len(kept) < count:
        out = model.generate(torch.full((4000, 1), BOS), do_sample=True, top_k=0,
                             max_new_tokens=BUDGET, pad_token_id=EOS, eos_token_id=EOS,
                             attention_mask=torch.ones(4000, 1, dtype=torch.long))  # fmt: skip
        for row in out[:, 1:].tolist():
            x = _until_eos(row)
            ended = x[-1:] == (EOS,) and BOS not in x
            if ended and re.fullmatch(PATTERN, VOCAB.decode(x[:-1]).decode()):
                kept.append(x)
    return kept[:count]


def constrained_draws(
    model, grammar, seed: int, count: int = DRAWS, **kwargs
) -> list[tuple[int, ...]]:
    """``count`` outputs of ``hf_fvo.generate`` (masked; ``particles=N`` in ``kwargs``)."""
    torch.manual_seed(seed)
    out = hf_fvo.generate(model, torch.full((count, 1), BOS), grammar=grammar, do_sample=True,
                          top_k=0, max_new_tokens=BUDGET, pad_token_id=EOS, **kwargs)  # fmt: skip
    return [_until_eos(row) for row in out[:, 1:].tolist()]


def test_particles_on_an_open_regex_match_rejection_draws_and_masking_does_not(setting):
    """400 outputs of 32 particles each and 400 rejection draws: their two-sample TV lies within
    the permutation null's 99th percentile; 400 masked outputs lie outside it."""
    model, grammar, exact = setting
    particles = constrained_draws(model, grammar, seed=2, particles=32)
    masked = constrained_draws(model, grammar, seed=3)
    assert all(re.fullmatch(PATTERN, VOCAB.decode(x[:-1]).decode()) for x in particles + masked)
    _, p99 = two_sample_null_tv(particles, exact, seed=4)
    assert two_sample_tv(particles, exact) <= p99
    _, p99_masked = two_sample_null_tv(masked, exact, seed=5)
    assert two_sample_tv(masked, exact) > p99_masked
