"""A token automaton's language (within a budget) as a :class:`~hf_fvo.grammar.TokenTrie`:
count first (a cheap DP over states, which also detects infinite languages), then build.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidArgumentError,
)
from hf_fvo.grammar.trie import TokenTrie

if TYPE_CHECKING:
    from hf_fvo.grammar.interface import Grammar

__all__ = ["build_token_trie"]


def build_token_trie(
    grammar: Grammar, start: int, max_new_tokens: int | None, max_nodes: int
) -> TokenTrie:
    """Count first (cheap DP over states), then build; see :meth:`Grammar.token_trie`."""
    if max_new_tokens is not None and (
        isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
    ):
        raise InvalidArgumentError(f"max_new_tokens must be an int or None, got {max_new_tokens!r}")
    if max_new_tokens is not None and grammar.min_tokens_to_accept(start) + 1 > max_new_tokens:
        raise EmptyLanguageError(
            f"no member fits in max_new_tokens={max_new_tokens}: the shortest needs "
            f"{grammar.min_tokens_to_accept(start)} tokens plus EOS"
        )
    total = _count_nodes(grammar, start, max_new_tokens)
    if total > max_nodes:
        raise GrammarTooLargeError(
            f"the token trie has {total} nodes (max_nodes={max_nodes}); bound max_new_tokens "
            "or use an estimator that does not enumerate"
        )
    return _build(grammar, start, max_new_tokens)


def _fits(grammar: Grammar, state: int, remaining: int | None) -> bool:
    """A node at ``state`` with ``remaining`` tokens left can still end with EOS."""
    return remaining is None or grammar.min_tokens_to_accept(state) + 1 <= remaining


def _count_nodes(grammar: Grammar, start: int, max_new_tokens: int | None) -> int:
    """Nodes of the trie under (start, budget), by memoised iterative DFS; detects cycles."""
    memo: dict[tuple[int, int | None], int] = {}
    on_stack: set[tuple[int, int | None]] = set()
    root = (start, max_new_tokens)
    stack: list[tuple[tuple[int, int | None], bool]] = [(root, False)]
    while stack:
        key, expanded = stack.pop()
        if key in memo:
            continue
        state, remaining = key
        groups = grammar.transitions(state)
        sizes = torch.diff(groups.offsets).tolist()
        nxt = None if remaining is None else remaining - 1
        kids = [
            ((d, nxt), size)
            for d, size in zip(groups.next_states.tolist(), sizes, strict=True)
            if _fits(grammar, d, nxt)
        ]
        if expanded:
            on_stack.discard(key)
            eos = 1 if grammar.is_accepting(state) else 0
            memo[key] = 1 + eos + sum(size * memo[k] for k, size in kids)
            continue
        on_stack.add(key)
        stack.append((key, True))
        for k, _ in kids:
            if k in on_stack:
                raise InfiniteLanguageError(
                    f"{grammar.source} has infinitely many members; pass max_new_tokens"
                )
            if k not in memo:
                stack.append((k, False))
    return memo[root]


def _build(grammar: Grammar, start: int, max_new_tokens: int | None) -> TokenTrie:
    eos = grammar.eos_token_id
    terminal = grammar.terminal_state
    parent, token, state, depth, is_eos = [-1], [-1], [start], [0], [False]
    child_ptr = []
    i = 0
    while i < len(parent):
        child_ptr.append(len(parent))
        if is_eos[i]:
            i += 1
            continue
        s = state[i]
        remaining = None if max_new_tokens is None else max_new_tokens - depth[i]
        nxt = None if remaining is None else remaining - 1
        groups = grammar.transitions(s)
        offsets = groups.offsets.tolist()
        kid_tokens, kid_states = [], []
        for k, d in enumerate(groups.next_states.tolist()):
            if _fits(grammar, d, nxt):
                toks = groups.token_ids[offsets[k] : offsets[k + 1]].numpy()
                kid_tokens.append(toks.astype(np.int64))
                kid_states.append(np.full(len(toks), d, dtype=np.int64))
        if grammar.is_accepting(s):
            kid_tokens.append(np.array([eos], dtype=np.int64))
            kid_states.append(np.array([terminal], dtype=np.int64))
        if kid_tokens:
            toks = np.concatenate(kid_tokens)
            sts = np.concatenate(kid_states)
            by = np.argsort(toks, kind="stable")
            toks, sts = toks[by].tolist(), sts[by].tolist()
            parent.extend([i] * len(toks))
            token.extend(toks)
            state.extend(sts)
            depth.extend([depth[i] + 1] * len(toks))
            is_eos.extend(t == eos for t in toks)
        i += 1
    child_ptr.append(len(parent))
    starts = np.asarray(child_ptr, dtype=np.int64)
    return TokenTrie(
        parent=torch.tensor(parent, dtype=torch.int64),
        token=torch.tensor(token, dtype=torch.int64),
        state=torch.tensor(state, dtype=torch.int64),
        depth=torch.tensor(depth, dtype=torch.int64),
        child_ptr=torch.from_numpy(starts),
        is_eos=torch.tensor(is_eos, dtype=torch.bool),
    )
