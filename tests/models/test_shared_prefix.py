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
