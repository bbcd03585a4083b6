"""PrefixLM: rows after prompt + prefix, whichever way they are computed (in full, one token
over stored ancestors, from the row cache), equal the model's own full-sequence forward."""

from __future__ import annotations

import torch

from hf_fvo.models import tiny_random_llama
from hf_fvo.phi import PrefixLM


def _model():
    return tiny_random_llama(40, eos_token_id=2, seed=3).double()


def _reference(model, prompt, prefix):
    ids = torch.tensor([(*prompt, *prefix)])
    return torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), dim=-1)


def _trie(depth: int = 4, width: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    levels = [[()]]
    for _ in range(depth):
        levels.append(
            [
                (*p, int(t))
                for p in levels[-1][:6]
                for t in torch.randint(3, 40, (width,), generator=g)
            ]
        )
    return levels


def test_trie_rows_run_incrementally_and_match_full_forwards():
    model, prompt = _model(), (1, 5, 7)
    lm = PrefixLM(model, batch_size=8)
    for level in _trie():
        rows = lm.next_logprobs(prompt, level)
        for prefix, row in zip(level, rows, strict=True):
            torch.testing.assert_close(row, _reference(model, prompt, prefix), rtol=0, atol=1e-10)
    # explored level by level, every prefix found its ancestors stored: it ran as one token
    assert lm.incremental == lm.forwards - 1  # all but the prompt


def test_mixed_batches_of_stored_and_unseen_ancestors():
    model, prompt = _model(), (1, 5)
    lm = PrefixLM(model, batch_size=16)
    lm.next_logprobs(prompt, [(4,), (4, 9)])
    batch = [(4, 9, 11), (8, 8, 8, 8), (4,), (), (12, 3)]
    rows = lm.next_logprobs(prompt, batch)
    for prefix, row in zip(batch, rows, strict=True):
        torch.testing.assert_close(row, _reference(model, prompt, prefix), rtol=0, atol=1e-10)


def test_without_kv_store_or_after_eviction_rows_are_unchanged():
    model, prompt = _model(), (1,)
    levels = _trie(depth=3)
    flat = [p for level in levels for p in level]
    stored = PrefixLM(model).next_logprobs(prompt, flat)
    for kv_bytes in (0, 20_000):  # none at all; room for a few prefixes only
        lm = PrefixLM(model, kv_bytes=kv_bytes)
        rows = torch.cat([lm.next_logprobs(prompt, level) for level in levels])
        torch.testing.assert_close(rows, stored, rtol=0, atol=1e-10)
        if kv_bytes == 0:
            assert lm.incremental == 0


def test_cached_rows_are_bit_identical_and_not_recomputed():
    model, prompt = tiny_random_llama(40, seed=1), (1, 2)
    lm = PrefixLM(model, cache_rows=100)
    first = lm.next_logprobs(prompt, [(3,), (3, 4)])
    forwards = lm.forwards
    again = lm.next_logprobs(prompt, [(3, 4), (3,), (3, 4)])
    assert lm.forwards == forwards
    assert torch.equal(again, first[[1, 0, 1]])


def test_a_new_prompt_drops_the_stored_keys():
    model = _model()
    lm = PrefixLM(model)
    lm.next_logprobs((1, 2), [(3,), (3, 4)])
    row = lm.next_logprobs((1, 9), [(3, 4)])[0]
    torch.testing.assert_close(row, _reference(model, (1, 9), (3, 4)), rtol=0, atol=1e-10)
