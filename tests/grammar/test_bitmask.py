"""Packed admissible sets for a batch of rows (``Grammar.admissible_words``) and their
application to logits (``hf_fvo.grammar.bitmask``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.errors import GrammarError
from hf_fvo.grammar.bitmask import apply_bitmask, pack, unpack

MASKBENCH = Path(__file__).resolve().parents[1] / "data" / "maskbench_slice.jsonl"


def _walks(tokenizer, count: int, backend: str):
    """(grammar, the states along a valid MaskBench instance) for ``count`` schemas."""
    out = []
    for line in MASKBENCH.open():
        row = json.loads(line)
        data = next((t["data"] for t in row["tests"] if t["valid"]), None)
        if data is None:
            continue
        try:
            g = Grammar.from_json_schema(row["schema"], tokenizer, whitespace="", backend=backend)
        except GrammarError:
            continue
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        states, s = [g.initial_state], g.initial_state
        for token in tokenizer.encode(text)[:40]:
            s = g.next_state(s, token)
            if s is None:
                break
            states.append(s)
        if s is None:
            continue
        out.append((g, states))
        if len(out) == count:
            break
    return out


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_batched_words_are_the_rows_admissible_sets(backend, smol_tokenizer):
    """Along MaskBench's valid instances (not written here), one batched call over the states
    of a walk — repeated rows, no budget, the last token's budget, a budget its closing bound
    covers — packs exactly what ``admissible`` returns row by row (the pushdown grammar
    computes its distinct parser masks together, in parallel threads)."""
    walks = _walks(smol_tokenizer, 6, backend)
    assert len(walks) >= 4
    for g, states in walks:
        closing = getattr(getattr(g, "budget_rule", None), "_closing", None)
        budgets = [None, 1] + ([closing + 2] if closing is not None else [])
        rows = [(s, b) for s in states for b in budgets] + [(states[0], None)] * 3
        words = g.admissible_words([s for s, _ in rows], [b for _, b in rows])
        assert words.dtype == np.int32 and words.shape == (len(rows), (g.vocab_size + 31) // 32)
        kept = unpack(words, g.vocab_size)
        for i, (s, b) in enumerate(rows):
            assert torch.equal(kept[i], g.admissible(s, b)), (g.source, i, b)


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_batched_words_under_budgets_that_bind(backend, smol_tokenizer):
    """Rows whose budgets bind (the set is the budget rule's, not the parser's) beside rows
    that do not, in one call: each row is its ``admissible`` set."""
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "n"],
              "properties": {"name": {"type": "string", "maxLength": 8},
                             "n": {"type": "integer"}}}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="", backend=backend)
    path = smol_tokenizer.encode('{"name":"Ann Lee","n":42}')
    states = [g.walk(path[:k]) for k in range(len(path) + 1)]
    rows = [(s, len(path) - k + slack) for k, s in enumerate(states) for slack in (1, 2, 4)]
    rows += [(s, None) for s in states]
    kept = unpack(g.admissible_words([s for s, _ in rows], [b for _, b in rows]), g.vocab_size)
    for i, (s, b) in enumerate(rows):
        assert torch.equal(kept[i], g.admissible(s, b)), (i, b)


def test_parallel_masks_equal_one_at_a_time(smol_tokenizer):
    """The pushdown grammar's masks of fresh states (none computed yet), filled together in
    one call, equal each state's own mask computed alone."""
    for g, states in _walks(smol_tokenizer, 3, "pushdown"):
        tokens = [s._path[-1] for s in states[1:]]
        fresh = [g.walk(tokens[:k]) for k in range(1, len(tokens) + 1)]  # new leaf objects
        assert all(g._memos[s].words is None for s in fresh)
        together = unpack(g.admissible_words(fresh, [None] * len(fresh)), g.vocab_size)
        for i, s in enumerate(states[1:]):
            assert torch.equal(together[i], g.allowed(s))


def test_apply_bitmask_masks_each_row_in_place():
    """−inf exactly where a row's bit is 0, and on ids past the words' width; other scores
    unchanged."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 70, generator=gen)
    keep = torch.rand(3, 64, generator=gen) < 0.3
    words = np.stack([pack(k.numpy()) for k in keep])
    before = scores.clone()
    out = apply_bitmask(scores, words)
    assert out is scores
    assert torch.equal(torch.isinf(scores[:, :64]), ~keep)
    assert torch.equal(scores[:, :64][keep], before[:, :64][keep])
    assert bool((scores[:, 64:] == -torch.inf).all())


def test_a_budget_per_state_is_required(smol_tokenizer):
    """States and budgets of different lengths: a typed error naming both counts."""
    from hf_fvo.errors import InvalidArgumentError

    g = Grammar.from_choices(["yes", "no"], smol_tokenizer)
    with pytest.raises(InvalidArgumentError, match="2 states, 1 budgets"):
        g.admissible_words([g.initial_state] * 2, [None])
