"""Grammar states are values: no grammar call changes a state, whatever it computes about it,
and one compiled grammar serves several threads with the sets each would get alone."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.eval.instances import in_schema_order
from tests.grammar.test_budget import STATUS

DRAWN = Path(__file__).resolve().parents[1] / "data" / "drawn_walks.jsonl"


def _drawn(name: str) -> dict:
    """A row of tests/data/drawn_walks.jsonl: a JSONSchemaBench schema and a member of it that
    hypothesis-jsonschema drew (``benchmarks/draw_instances.py``)."""
    return next(row for row in map(json.loads, DRAWN.open()) if name in row["description"])


def _member(row: dict, tokenizer) -> tuple[Grammar, list[int]]:
    schema, data = row["schema"], row["tests"][0]["data"]
    g = Grammar.from_json_schema(schema, tokenizer, whitespace="", strict=row.get("strict", True))
    text = json.dumps(in_schema_order(data, schema), ensure_ascii=False, separators=(",", ":"))
    return g, tokenizer.encode(text)


def _value(g: Grammar, state) -> tuple:
    """What a state is: its fields, each by identity, and for a parser snapshot the parser's
    own answers (its mask, whether it accepts), which a consumed parser would change."""
    if isinstance(state, int):
        return (state,)
    fields = tuple(id(getattr(state, name)) for name in type(state).__slots__
                   if name != "__weakref__")  # fmt: skip
    matcher = state._matcher
    if matcher is None:  # (the terminal state)
        return fields
    return (*fields, bytes(matcher.compute_bitmask()), matcher.is_accepting())


def _every_call(g: Grammar, state, budgets: list[int]) -> None:
    """Every question the Grammar interface answers about ``state``, at ``budgets``."""
    g.allowed(state)
    g.is_accepting(state)
    g.min_tokens_to_accept(state)
    g.tokens_to_accept(state)
    g.shortest_bounds(state)
    g.admissible(state, None)
    for remaining in budgets:
        admitted = g.admissible(state, remaining)
        g.admissible_bias(state, remaining)
        g.admissible_words([state, state], [remaining, None])
        lazy = g.lazy_admissible(state, remaining)
        if lazy is not None:
            for y in admitted.nonzero().flatten()[:4].tolist():
                lazy.admits(y)
            lazy.resolve()
        for y in admitted.nonzero().flatten()[:4].tolist():
            g.next_state(state, y)


@pytest.mark.parametrize("backend", ["pushdown", "automaton"])
def test_no_grammar_call_changes_a_state(smol_tokenizer, backend):
    """Along a member, each state is the same value (its fields, its parser's answers) after
    every call of the Grammar interface at binding and free budgets, and its budgeted sets are
    those a fresh grammar gives it first. Before, the pushdown grammar wrote its caches into
    the state (the witness, the checks by room, the masks): 8 of 15 fields."""
    g = Grammar.from_json_schema(STATUS, smol_tokenizer, whitespace="", backend=backend)
    ids = smol_tokenizer.encode('{"status":"error"}')
    fresh = Grammar.from_json_schema(STATUS, smol_tokenizer, whitespace="", backend=backend)
    state = g.initial_state
    for t, y in enumerate(ids):
        budgets = [len(ids) + 1 - t, len(ids) + 3 - t, 64]
        first = [fresh.admissible(fresh.walk(ids[:t]), b) for b in budgets]
        before = _value(g, state)
        _every_call(g, state, budgets)
        assert _value(g, state) == before, t
        for b, want in zip(budgets, first, strict=True):
            assert torch.equal(g.admissible(state, b), want), (t, b)
        state = g.next_state(state, y)


@pytest.mark.parametrize("name", ["kb_206", "o21418"])
def test_no_budget_check_changes_a_real_schema_s_states(smol_tokenizer, name):
    """The same on members of real schemas that hypothesis-jsonschema drew, at exactly their
    own length (where the budget rule certifies, splices, closes and searches: an open object's
    keys, a JSON-mode grammar's probe), and a write to a state is refused."""
    g, ids = _member(_drawn(name), smol_tokenizer)
    state = g.initial_state
    for t, y in enumerate(ids[:24]):
        before = _value(g, state)
        _every_call(g, state, [len(ids) + 1 - t])
        assert _value(g, state) == before, t
        state = g.next_state(state, y)
    with pytest.raises(AttributeError, match="is a value"):
        state._utf8 = 1


def _walk(g: Grammar, ids: list[int], budget: int, out: list) -> None:
    """The member's budgeted sets step by step (packed), or the exception raised."""
    try:
        state, sets = g.initial_state, []
        for t, y in enumerate(ids):
            sets.append(np.packbits(g.admissible(state, budget - t).numpy()).tobytes())
            state = g.next_state(state, y)
        out.append(sets)
    except Exception as error:  # (the test reports it)
        out.append(error)


@pytest.mark.parametrize("name", ["kb_206", "sp_410"])
def test_two_threads_stepping_one_grammar_get_the_sets_each_gets_alone(smol_tokenizer, name):
    """Two threads walk a drawn member through one compiled grammar at once (the initial
    state, its memos, the schema cursors and the spellings shared), at its own length and
    three tokens more, with the interpreter switching threads every microsecond: each gets,
    step by step, the sets a fresh grammar gives the same walk in one thread."""
    row = _drawn(name)
    g, ids = _member(row, smol_tokenizer)
    budgets = [len(ids) + 1, len(ids) + 4]
    alone = []
    for budget in budgets:
        _walk(_member(row, smol_tokenizer)[0], ids, budget, alone)
    outs: list[list] = [[] for _ in budgets]
    threads = [threading.Thread(target=_walk, args=(g, ids, b, out))
               for b, out in zip(budgets, outs, strict=True)]  # fmt: skip
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    for budget, want, out in zip(budgets, alone, outs, strict=True):
        got = out[0]
        assert not isinstance(got, Exception), (budget, got)
        differ = [t for t, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
        assert not differ, (budget, differ[:5])
