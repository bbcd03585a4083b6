"""The shared-prefix cache: N rows continuing one prompt read the same logits as N copies."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.models import tiny_random_llama
from hf_fvo.models.cache import cache_argument
from hf_fvo.models.shared_prefix import SharedPrefixCache, shared_prefix, shared_prefix_supported


def _logits(model, ids, cache, shared):
    with torch.no_grad():
        if shared:
            with shared_prefix(model, cache):
                return model(ids, use_cache=True, **cache_argument(model, cache)).logits
        return model(ids, use_cache=True, **cache_argument(model, cache)).logits


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_shared_prefix_rows_read_the_logits_of_repeated_prompt_copies(implementation):
    """A 2-layer Llama with grouped keys (4 heads, 2 key heads): after a 9-token prompt, 5
    rows decode 6 steps one token at a time, then 3 tokens at once (causal among them),
    with rows copied, reordered and dropped between steps as particles are; every step's
    logits equal those of a DynamicCache repeated 5 times (to float32 rounding), and the
    model's attention implementation is restored after each block."""
    model = tiny_random_llama(64, seed=3)
    model.config._attn_implementation = implementation
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 64, (1, 9), generator=gen)
    dense, single = DynamicCache(), DynamicCache()
    _logits(model, prompt, dense, False)
    _logits(model, prompt, single, False)
    dense.batch_repeat_interleave(5)
    shared = SharedPrefixCache.from_prompt(single, rows=5)
    rows = 5
    orders = [[0, 0, 2, 3, 4], [4, 3, 2, 1, 0], [1, 1, 1, 2, 3], [0, 2, 4], [2, 1, 0], [0, 1]]
    for order in orders:
        ids = torch.randint(0, 64, (rows, 1), generator=gen)
        want = _logits(model, ids, dense, False)
        got = _logits(model, ids, shared, True)
        assert model.config._attn_implementation == implementation
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        index = torch.tensor(order)
        dense.reorder_cache(index)
        shared.reorder_cache(index)
        rows = len(order)
    ids = torch.randint(0, 64, (rows, 3), generator=gen)
    torch.testing.assert_close(_logits(model, ids, shared, True), _logits(model, ids, dense, False),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    assert shared.get_seq_length() == dense.get_seq_length() == 9 + len(orders) + 3


def test_the_shared_prefix_path_is_taken_only_where_its_arithmetic_is_the_models():
    """Plain causal Llama attention qualifies; a sliding window, a non-Llama-like model type,
    an unknown attention implementation or a non-Transformers object does not."""
    model = tiny_random_llama(16)
    assert shared_prefix_supported(model)
    model.config.sliding_window = 4
    assert not shared_prefix_supported(model)
    model.config.sliding_window = None
    model.config._attn_implementation = "flex_attention"
    assert not shared_prefix_supported(model)
    assert not shared_prefix_supported(object())


def test_the_shared_prefix_attention_refuses_to_run_outside_its_block():
    """The registered attention needs the block's cache: called without it, it raises instead of
    attending to nothing."""
    from hf_fvo.models.shared_prefix import _attention

    q = torch.zeros(1, 2, 1, 4)
    with pytest.raises(RuntimeError, match="outside shared_prefix"):
        _attention(None, q, q, q, None)


def test_the_prompt_cache_must_hold_one_row():
    """A batch of prompts is not one shared prefix: building from it is refused."""
    model = tiny_random_llama(16)
    cache = DynamicCache()
    _logits(model, torch.zeros(2, 3, dtype=torch.long), cache, False)
    with pytest.raises(InvalidArgumentError, match="one row"):
        SharedPrefixCache.from_prompt(cache, rows=4)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_packed_ragged_steps_read_the_logits_of_each_rows_whole_sequence(implementation):
    """Rows that hold different numbers of tokens (speculated runs, some cut back by trim)
    advance in one packed forward of 1–4 tokens each; every packed position's logits equal
    those of the row's whole sequence (prompt + its tokens) run without a cache, through
    trims, copies and reorders."""
    model = tiny_random_llama(64, seed=5)
    model.config._attn_implementation = implementation
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 64, (1, 7), generator=gen)
    single = DynamicCache()
    _logits(model, prompt, single, False)
    cache = SharedPrefixCache.from_prompt(single, rows=4)
    own: list[list[int]] = [[] for _ in range(4)]
    plans = [[1, 3, 2, 4], [2, 1, 1, 3], [4, 4, 1, 1], [1, 2, 3, 1], [3, 1, 2, 2]]
    for step, counts in enumerate(plans):
        new = [torch.randint(0, 64, (c,), generator=gen).tolist() for c in counts]
        positions = cache.pack(counts)
        ids = torch.tensor([[t for row in new for t in row]])
        with torch.no_grad(), shared_prefix(model, cache):
            got = model(ids, position_ids=positions, use_cache=True,
                        **cache_argument(model, cache)).logits[0]  # fmt: skip
        at = 0
        for r, row in enumerate(new):
            own[r] += row
            whole = torch.cat([prompt[0], torch.tensor(own[r])])[None]
            with torch.no_grad():
                want = model(whole).logits[0, -len(row) :]
            torch.testing.assert_close(got[at : at + len(row)], want, rtol=1e-5, atol=1e-5)
            at += len(row)
        keep = [max(1, len(o) - (r + step) % 3) for r, o in enumerate(own)]  # rejected tails
        cache.trim(keep)
        own = [o[:k] for o, k in zip(own, keep, strict=True)]
        order = [[0, 1, 2, 3], [3, 3, 0, 1], [1, 0, 2, 2], [2, 3, 1, 0], [0, 0, 1, 1]][step]
        cache.reorder_cache(torch.tensor(order))
        own = [list(own[j]) for j in order]
    assert cache.lengths.tolist() == [len(o) for o in own]


def test_packed_plans_and_trims_refuse_what_does_not_fit_the_rows():
    """A pack needs one count ≥ 1 per row, a packed forward exactly its tokens in one row,
    a trim lengths within the rows' own, a per-row forward rows of equal length: each is
    refused with InvalidArgumentError naming it."""
    model = tiny_random_llama(16)
    single = DynamicCache()
    _logits(model, torch.tensor([[1, 2]]), single, False)
    cache = SharedPrefixCache.from_prompt(single, rows=2)
    with pytest.raises(InvalidArgumentError, match="one count"):
        cache.pack([1, 0])
    with pytest.raises(InvalidArgumentError, match="one count"):
        cache.pack([1])
    positions = cache.pack([2, 1])
    assert positions.tolist() == [[2, 3, 2]]
    with pytest.raises(InvalidArgumentError, match="3 tokens in one row"):
        _logits(model, torch.tensor([[1, 2]]), cache, True)
    cache.pack([2, 1])
    _logits(model, torch.tensor([[1, 2, 3]]), cache, True)
    with pytest.raises(InvalidArgumentError, match="trim"):
        cache.trim([3, 1])
    with pytest.raises(InvalidArgumentError, match="unequal lengths"):
        _logits(model, torch.tensor([[1], [2]]), cache, True)
    cache.trim([1, 1])
    assert _logits(model, torch.tensor([[1], [2]]), cache, True).shape[:2] == (2, 1)
