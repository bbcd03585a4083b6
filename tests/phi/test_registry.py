"""Estimators named by string are kept per model: a second generate() call with phi="exact"
reuses the first one's tables instead of exploring again (issue 31), as an instance would."""

from __future__ import annotations

import copy

import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.models import tiny_random_llama
from hf_fvo.models.memory import forget
from hf_fvo.phi import ExactPhi, OneStepPhi, make_estimator

CHOICES = ["yes", "no", "maybe", "yes please", "not now"]


def _setup(smol_tokenizer):
    model = tiny_random_llama(len(smol_tokenizer), eos_token_id=2)
    return model, Grammar.from_choices(CHOICES, smol_tokenizer, vocab_size=model.config.vocab_size)


def test_a_second_call_by_name_runs_no_new_exploration(smol_tokenizer):
    model, g = _setup(smol_tokenizer)
    ids = torch.tensor([[1, 5]])
    hf_fvo.generate(model, ids, grammar=g, phi="exact", max_new_tokens=8, do_sample=True)
    phi = make_estimator("exact", g, model)  # the instance generate() used
    assert isinstance(phi, ExactPhi) and phi.lm.forwards > 0
    explored = phi.lm.forwards
    for _ in range(3):
        out = hf_fvo.generate(model, ids, grammar=g, phi="exact", max_new_tokens=8,
                              do_sample=True)  # fmt: skip
        text = smol_tokenizer.decode(out[0, 2:], skip_special_tokens=True)
        assert text in CHOICES
    assert phi.lm.forwards == explored  # on the previous code: explored again on every call


def test_kept_per_model_and_grammar_and_name(smol_tokenizer):
    model, g = _setup(smol_tokenizer)
    other_model, _ = _setup(smol_tokenizer)
    other_grammar = Grammar.from_choices(["a"], smol_tokenizer, vocab_size=model.config.vocab_size)
    exact = make_estimator("exact", g, model)
    assert make_estimator("exact", g, model) is exact
    assert make_estimator("exact", g, other_model) is not exact
    assert make_estimator("exact", other_grammar, model) is not exact
    assert isinstance(make_estimator("onestep", g, model), OneStepPhi)
    assert make_estimator("onestep", g) is not make_estimator("onestep", g)  # no model: fresh


def test_a_copy_of_the_model_starts_empty_and_forget_clears(smol_tokenizer):
    model, g = _setup(smol_tokenizer)
    exact = make_estimator("exact", g, model)
    twin = copy.deepcopy(model)  # a draft made from the target must not share its tables
    assert make_estimator("exact", g, twin) is not exact
    assert make_estimator("exact", g, twin).model is twin
    forget(model)
    assert make_estimator("exact", g, model) is not exact
