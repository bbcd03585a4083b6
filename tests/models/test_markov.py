"""MarkovLM is a real Transformers model: its logits are its table, and generate(), beam search,
assisted generation, the Auto classes and save/load work on it unchanged."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_fvo.models import MarkovConfig, MarkovLM

V = 5  # tokens 0..2, EOS 3, BOS 4


@pytest.fixture(scope="module")
def lm():
    return MarkovLM.random(V, order=2, seed=0, bos_token_id=4, eos_token_id=3, pad_token_id=3)


def test_logits_are_the_table_rows_for_every_history(lm):
    ids = torch.tensor([[4, 0, 1, 2, 2, 0, 1]])
    logits = lm(ids).logits[0]
    table = lm.transition_table()
    for i in range(ids.shape[1]):
        row = lm.context_of(ids[0, : i + 1].tolist())
        assert torch.allclose(logits[i].exp(), table[row], atol=1e-12)
    # the first position reads start_token_id (BOS) before the first token
    assert lm.context_of([0]) == lm.context_index([4, 0])


def test_cached_decoding_matches_a_full_forward(lm):
    ids = torch.tensor([[4, 0, 1, 2, 2, 0]])
    out = lm(ids[:, :3], use_cache=True)
    step = lm(ids[:, 3:], past_key_values=out.past_key_values, use_cache=True)
    assert torch.allclose(step.logits, lm(ids).logits[:, 3:])


def test_the_cache_is_read_under_either_keyword(lm):
    # transformers 5.24 passes the cache to forward() as `cache`; earlier 5.x as
    # `past_key_values`. Dropping either would make every cached step see one token of history.
    ids = torch.tensor([[4, 0, 1, 2, 2, 0]])
    full = lm(ids).logits[:, 3:]
    for name in ("cache", "past_key_values"):
        out = lm(ids[:, :3], use_cache=True)
        cache = out["cache"] if "cache" in out else out["past_key_values"]
        step = lm(ids[:, 3:], use_cache=True, **{name: cache})
        assert torch.allclose(step.logits, full), name


def test_generate_scores_are_the_table_rows_of_the_whole_history(lm):
    torch.manual_seed(3)
    out = lm.generate(torch.tensor([[4]] * 3), max_new_tokens=6, do_sample=True, top_k=0,
                      output_logits=True, return_dict_in_generate=True)  # fmt: skip
    table = lm.transition_table()
    for b, row in enumerate(out.sequences.tolist()):
        for t, logits in enumerate(out.logits):
            if 3 in row[1 : t + 1]:
                break
            assert torch.allclose(logits[b].exp().double(), table[lm.context_of(row[: t + 1])],
                                  atol=1e-12)  # fmt: skip


def test_left_padding_keeps_the_context_of_real_tokens(lm):
    ids = torch.tensor([[3, 3, 4, 0, 1], [4, 2, 4, 0, 1]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    logits = lm(ids, attention_mask=mask).logits
    alone = lm(torch.tensor([[4, 0, 1]])).logits
    assert torch.allclose(logits[0, -1], alone[0, -1])


def test_generate_sampling_greedy_beam_and_assisted(lm):
    ids = torch.tensor([[4]])
    greedy = lm.generate(ids, max_new_tokens=8, do_sample=False)
    draft = MarkovLM.random(V, order=2, seed=1, bos_token_id=4, eos_token_id=3, pad_token_id=3)
    assisted = lm.generate(ids, max_new_tokens=8, do_sample=False, assistant_model=draft)
    assert torch.equal(greedy, assisted)
    beams = lm.generate(ids, max_new_tokens=6, num_beams=3, do_sample=False)
    assert beams.shape[0] == 1
    torch.manual_seed(0)
    sampled = lm.generate(ids.expand(4, -1), max_new_tokens=6, do_sample=True, top_k=0)
    assert sampled.shape[0] == 4 and bool((sampled < V).all())


def test_greedy_follows_the_table_argmax(lm):
    out = lm.generate(torch.tensor([[4]]), max_new_tokens=5, do_sample=False)[0].tolist()
    table = lm.transition_table()
    for i in range(1, len(out)):
        if out[i - 1] == 3:
            break
        assert out[i] == int(table[lm.context_of(out[:i])].argmax())


def test_auto_classes_and_local_save_load(lm, tmp_path):
    lm.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, MarkovConfig) and config.order == 2
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert isinstance(again, MarkovLM)
    assert torch.equal(again.log_probs, lm.log_probs)


def test_fit_counts_transitions_with_add_k_smoothing():
    seqs = [[0, 1, 0, 1], [0, 1]]
    lm = MarkovLM.fit(seqs, vocab_size=3, order=1, add_k=0.5, start_token_id=2)
    table = lm.transition_table()
    # after 0: 1 seen 3 times, 0 and 2 never → (0.5, 3.5, 0.5) / 4.5
    assert torch.allclose(table[0], torch.tensor([0.5, 3.5, 0.5], dtype=torch.float64) / 4.5)
    # the start context (token 2) precedes each sequence's first token: 0 twice
    assert torch.allclose(table[2], torch.tensor([2.5, 0.5, 0.5], dtype=torch.float64) / 3.5)


def test_from_table_accepts_both_shapes():
    t = torch.softmax(torch.randn(3, 3, 3, generator=torch.Generator().manual_seed(0)), -1)
    a = MarkovLM.from_table(t)
    b = MarkovLM.from_table(t.reshape(9, 3))
    assert a.config.order == b.config.order == 2
    assert torch.equal(a.log_probs, b.log_probs)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: MarkovLM.from_table([[0.5, 0.6], [0.5, 0.5]]), "sum to 1"),
        (lambda: MarkovLM.from_table([[1.5, -0.5], [0.5, 0.5]]), "non-negative"),
        (lambda: MarkovLM.from_table(torch.ones(3, 2) / 2), "power"),
        (lambda: MarkovLM.random(3, temperature=0.0), "temperature"),
        (lambda: MarkovLM.fit([[0, 7]], vocab_size=3), "outside the vocabulary"),
        (lambda: MarkovLM.fit([[0]], vocab_size=3, add_k=-1), "add_k"),
    ],
)
def test_bad_input_is_refused_with_the_cause(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_random_tables_are_seeded_and_normalised():
    a, b = MarkovLM.random(4, order=2, seed=3), MarkovLM.random(4, order=2, seed=3)
    assert torch.equal(a.log_probs, b.log_probs)
    sums = a.transition_table().sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums))
    for ctx in itertools.product(range(4), repeat=2):
        assert 0 <= a.context_index(ctx) < 16
