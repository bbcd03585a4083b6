"""``keep_greedy``: beam search whose output is never less likely than masked greedy's, and the
prompt read once for beam search.

The decoder returns, per prompt, whichever of greedy's output and the beams' (Transformers'
default scoring) has the larger log p(x) under the model; both are members within the budget.
These tests recompute both outputs and their log-likelihoods independently (plain
``hf_fvo.generate`` calls and a full forward) and check the choice, the reported scores, the
budget and the refusals.
"""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation import likeliest
from hf_fvo.generation.likeliest import continuation_logp
from hf_fvo.generation.prefill import cut_to_prompt, prompt_cache
from hf_fvo.models.cache import output_cache
from tests.generation.finite import MAX_NEW, PROMPT, THREE_KEYS, finite_setting
from tests.lms import tiny_llama

GENERATE = sys.modules["hf_fvo.generation.generate"]  # the module, not the function
SEEDS = (1, 2, 3, 4, 5)
SCHEMA = THREE_KEYS


def _new(row: list[int], start: int, eos: int) -> list[int]:
    new = row[start:]
    return new[: new.index(eos) + 1] if eos in new else new


def _logp(model, prompt: list[int], new: list[int]) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *new]])).logits[0, len(prompt) - 1 : -1]
    return float(torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(new)[:, None]).sum())


@pytest.mark.parametrize("beams", [2, 4])
def test_keep_greedy_returns_the_likelier_of_greedy_and_the_beams(smol_tokenizer, beams):
    """Six choices under five tiny Llamas: the output is greedy's or the beams', whichever has
    the larger log p(x) (recomputed by a full forward); ``sequences_scores`` is that log p(x)
    and ``from_greedy`` says which; never less likely than greedy's. The beams win somewhere
    and greedy somewhere (the test has power both ways)."""
    wins = {True: 0, False: 0}
    for seed in SEEDS:
        model, g, _, _ = finite_setting(smol_tokenizer, seed=seed)
        ids = torch.tensor([list(PROMPT)])
        kw = {"grammar": g, "do_sample": False, "max_new_tokens": MAX_NEW}
        greedy = _new(hf_fvo.generate(model, ids, **kw)[0].tolist(), len(PROMPT), g.eos_token_id)
        beamed = hf_fvo.generate(model, ids, num_beams=beams, **kw)[0].tolist()
        beamed = _new(beamed, len(PROMPT), g.eos_token_id)
        out = hf_fvo.generate(model, ids, num_beams=beams, keep_greedy=True,
                              return_dict_in_generate=True, **kw)  # fmt: skip
        chosen = _new(out.sequences[0].tolist(), len(PROMPT), g.eos_token_id)
        lp_greedy, lp_beams = _logp(model, list(PROMPT), greedy), _logp(model, list(PROMPT), beamed)
        if abs(lp_greedy - lp_beams) > 1e-4:
            assert chosen == (greedy if lp_greedy > lp_beams else beamed), seed
            wins[lp_greedy > lp_beams] += 1
        assert chosen in (greedy, beamed)
        assert bool(out.from_greedy[0]) == (chosen == greedy) or greedy == beamed
        assert float(out.sequences_scores[0]) == pytest.approx(_logp(model, list(PROMPT), chosen),
                                                               abs=1e-4)  # fmt: skip
        assert _logp(model, list(PROMPT), chosen) >= lp_greedy - 1e-6
        assert len(out.certificates) == 1
    assert wins[False] > 0  # the beams found a likelier member than greedy's somewhere
    if beams == 2:
        assert wins[True] > 0  # and two beams lost one greedy kept


@pytest.mark.parametrize("margin", [0, 3])
def test_keep_greedy_never_cuts_at_a_budget_that_binds(smol_tokenizer, margin):
    """Three required keys at the shortest built member's length (+ 0, + 3) for a batch of two
    prompts: both decoders inside keep greedy finish within the budget; each returned row ends
    with EOS and parses with all three keys."""
    model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=3)
    g = Grammar.from_json_schema(SCHEMA, smol_tokenizer, vocab_size=model.config.vocab_size)
    _, shortest = g.shortest_bounds(g.initial_state)
    ids = torch.tensor([[1, 200, 300], [1, 201, 301]])
    out = hf_fvo.generate(model, ids, grammar=g, do_sample=False, num_beams=4, keep_greedy=True,
                          max_new_tokens=shortest + 1 + margin)  # fmt: skip
    for row in out.tolist():
        new = row[ids.shape[1] :]
        assert g.eos_token_id in new, "cut"
        assert set(json.loads(smol_tokenizer.decode(new[: new.index(g.eos_token_id)]))) == {
            "name", "age", "tags"}  # fmt: skip


def test_keep_greedy_on_a_batch_matches_each_prompt_alone(smol_tokenizer):
    """A left-padded batch (an attention mask) returns, row by row, what each prompt returns
    alone: the shared prompt cache and the log p(x) comparison follow each row's padding."""
    model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=5)
    g = Grammar.from_json_schema(SCHEMA, smol_tokenizer, vocab_size=model.config.vocab_size)
    pad = smol_tokenizer.eos_token_id
    rows = [[1, 200, 300, 400], [1, 201]]
    ids = torch.tensor([rows[0], [pad, pad, *rows[1]]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    kw = {"grammar": g, "do_sample": False, "num_beams": 3, "keep_greedy": True,
          "max_new_tokens": 24, "return_dict_in_generate": True}  # fmt: skip
    batch = hf_fvo.generate(model, ids, attention_mask=mask, **kw)
    for i, row in enumerate(rows):
        alone = hf_fvo.generate(model, torch.tensor([row]), **kw)
        assert _new(batch.sequences[i].tolist(), 4, g.eos_token_id) == _new(
            alone.sequences[0].tolist(), len(row), g.eos_token_id)  # fmt: skip
        assert float(batch.sequences_scores[i]) == pytest.approx(
            float(alone.sequences_scores[0]), abs=1e-3)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"num_beams": 1}, "num_beams >= 2"),
        ({"num_beams": 4, "do_sample": True}, "drop do_sample"),
        ({"num_beams": 4, "num_return_sequences": 2}, "num_return_sequences"),
        ({"num_beams": 4, "output_scores": True, "return_dict_in_generate": True},
         "output_scores"),
        ({"num_beams": 4, "particles": 4}, "particles"),
        ({"num_beams": 4, "keep_greedy": "yes"}, "True or False"),
    ],
)  # fmt: skip
def test_keep_greedy_refuses_what_it_cannot_serve(smol_tokenizer, kwargs, needle):
    """Settings that would silently change what keep_greedy returns raise a typed error naming
    the argument."""
    model, g, _, _ = finite_setting(smol_tokenizer, seed=1)
    kwargs = {"keep_greedy": True, **kwargs}
    with pytest.raises(InvalidArgumentError, match=needle):
        hf_fvo.generate(model, torch.tensor([list(PROMPT)]), grammar=g,
                        max_new_tokens=MAX_NEW, **kwargs)  # fmt: skip


def test_keep_greedy_refuses_a_cache_passed_in(smol_tokenizer):
    model, g, _, _ = finite_setting(smol_tokenizer, seed=1)
    ids = torch.tensor([list(PROMPT)])
    cache = prompt_cache(model, ids)
    with pytest.raises(InvalidArgumentError, match="cache"):
        hf_fvo.generate(model, ids, grammar=g, num_beams=4, keep_greedy=True, cache=cache,
                        max_new_tokens=MAX_NEW)  # fmt: skip


def test_log_likelihoods_from_the_kept_logits_equal_a_forward(smol_tokenizer, monkeypatch):
    """Each output's log p(x) read from the raw logits its decoding kept (greedy's assisted
    loop, the beams' search) and the one recomputed by a forward (the path above
    :data:`LOGITS_BYTES`) agree, so the choice does not depend on the path; over five models
    both greedy's and the beams' outputs are chosen somewhere."""
    chosen = set()
    for seed in SEEDS:
        model, g, _, _ = finite_setting(smol_tokenizer, seed=seed)
        ids = torch.tensor([list(PROMPT)])
        kw = {"grammar": g, "do_sample": False, "num_beams": 2, "keep_greedy": True,
              "max_new_tokens": MAX_NEW, "return_dict_in_generate": True}  # fmt: skip
        monkeypatch.setattr(likeliest, "LOGITS_BYTES", 1 << 30)
        kept = hf_fvo.generate(model, ids, **kw)
        monkeypatch.setattr(likeliest, "LOGITS_BYTES", 0)
        forward = hf_fvo.generate(model, ids, **kw)
        assert torch.equal(kept.sequences, forward.sequences), seed
        assert float(kept.sequences_scores[0]) == pytest.approx(
            float(forward.sequences_scores[0]), abs=1e-4)  # fmt: skip
        chosen.add(bool(kept.from_greedy[0]))
    assert chosen == {True, False}
    for seed in SEEDS:  # longer outputs, where the best beam changes rows along the way
        model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=seed)
        g = Grammar.from_json_schema(SCHEMA, smol_tokenizer, vocab_size=model.config.vocab_size)
        ids = torch.tensor([[1, 200, 300]])
        kw = {"grammar": g, "do_sample": False, "num_beams": 4, "keep_greedy": True,
              "max_new_tokens": 24, "return_dict_in_generate": True}  # fmt: skip
        monkeypatch.setattr(likeliest, "LOGITS_BYTES", 1 << 30)
        kept = hf_fvo.generate(model, ids, **kw)
        monkeypatch.setattr(likeliest, "LOGITS_BYTES", 0)
        forward = hf_fvo.generate(model, ids, **kw)
        assert float(kept.sequences_scores[0]) == pytest.approx(
            float(forward.sequences_scores[0]), abs=1e-4), seed  # fmt: skip


def test_continuation_logp_with_and_without_the_prompt_cache(smol_tokenizer):
    """log p(c | prompt) from the prompt's cache equals the full forward's, per row of a
    left-padded batch, several continuations a row."""
    model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=2)
    ids = torch.tensor([[1, 7, 8, 9], [0, 0, 1, 7]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    conts = [[5, 6], [5], [11, 12, 13], []]
    full = continuation_logp(model, ids, conts, attention_mask=mask)
    expected = [_logp(model, [1, 7, 8, 9], [5, 6]), _logp(model, [1, 7, 8, 9], [5]),
                _logp(model, [1, 7], [11, 12, 13]), 0.0]  # fmt: skip
    assert full == pytest.approx(expected, abs=1e-4)
    with torch.no_grad():  # a prompt cache the way greedy leaves it: its own padded prefill
        out = model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False,
                             return_dict_in_generate=True)  # fmt: skip
    cached = continuation_logp(model, ids, conts, attention_mask=mask,
                               cache=cut_to_prompt(output_cache(out), ids.shape[1]))  # fmt: skip
    assert cached == pytest.approx(expected, abs=1e-4)


def test_beam_search_reading_the_prompt_once_returns_transformers_beams(smol_tokenizer,
                                                                       monkeypatch):  # fmt: skip
    """hf_fvo's beam search reads the prompt once and copies its cache per beam: the beams, their
    scores and order are Transformers' own (the copy turned off for the reference); the copy
    did run."""
    model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=3)
    g = Grammar.from_json_schema(SCHEMA, smol_tokenizer, vocab_size=model.config.vocab_size)
    ids = torch.tensor([[1, 200, 300, 400, 500]])
    kw = {"grammar": g, "do_sample": False, "num_beams": 4, "num_return_sequences": 4,
          "max_new_tokens": 30, "return_dict_in_generate": True, "output_scores": True}  # fmt: skip
    calls = []
    real = GENERATE.prompt_cache
    monkeypatch.setattr(GENERATE, "prompt_cache", lambda *a, **k: calls.append(1) or real(*a, **k))
    once = hf_fvo.generate(model, ids, **kw)
    assert calls == [1]
    monkeypatch.setattr(GENERATE, "prompt_cache", lambda *a, **k: None)
    reference = hf_fvo.generate(model, ids, **kw)
    assert torch.equal(once.sequences, reference.sequences)
    assert torch.allclose(once.sequences_scores, reference.sequences_scores, atol=1e-5)


def test_a_prefilled_cache_passed_in_decodes_greedily_as_without_one():
    """Transformers 5.24's and 5.25's assisted decoding started from a pre-filled cache returns
    another output than plain greedy decoding (here: another tokenisation of the answer, chosen by a
    step that is not the argmax); hf_fvo runs such a call plain, so a user's cache changes
    nothing but the time."""
    from hf_fvo.models import load_default_model, load_default_tokenizer

    tok, model = load_default_tokenizer(), load_default_model()
    schema = {"type": "object", "properties": {"name": {"type": "string"},
              "age": {"type": "integer"}}, "required": ["name", "age"],
              "additionalProperties": False}  # fmt: skip
    g = Grammar.from_json_schema(schema, tok, vocab_size=model.config.vocab_size)
    ids = tok("Give me JSON for Alice, 31 years old:\n", return_tensors="pt").input_ids
    kw = {"grammar": g, "do_sample": False, "max_new_tokens": 30}
    reference = hf_fvo.generate(model, ids, **kw)
    cache = prompt_cache(model, ids)
    assert cache is not None
    out = hf_fvo.generate(model, ids, cache=copy.deepcopy(cache), **kw)
    assert torch.equal(out, reference)


def test_keep_greedy_through_model_generate_and_the_custom_generate_recipe(smol_tokenizer):
    """``model.generate(custom_generate=hf_fvo.CUSTOM_GENERATE, keep_greedy=True, num_beams=…)``
    returns what ``hf_fvo.generate`` returns."""
    model, g, _, _ = finite_setting(smol_tokenizer, seed=2)
    ids = torch.tensor([list(PROMPT)])
    kw = {"grammar": g, "num_beams": 3, "keep_greedy": True, "max_new_tokens": MAX_NEW}
    expected = hf_fvo.generate(model, ids, do_sample=False, **kw)
    out = model.generate(ids, custom_generate=hf_fvo.CUSTOM_GENERATE, trust_remote_code=True,
                         **kw)  # fmt: skip
    assert torch.equal(out, expected)


def test_grammar_draft_true_with_a_prefilled_cache_is_refused_by_name(smol_tokenizer):
    """Asking for speculation explicitly where it would start from a pre-filled cache raises
    rather than returning assisted decoding's different output."""
    model, g, _, _ = finite_setting(smol_tokenizer, seed=1)
    ids = torch.tensor([list(PROMPT)])
    with pytest.raises(InvalidArgumentError, match="pre-filled cache"):
        hf_fvo.generate(model, ids, grammar=g, grammar_draft=True, do_sample=False,
                        cache=prompt_cache(model, ids), max_new_tokens=MAX_NEW)  # fmt: skip
