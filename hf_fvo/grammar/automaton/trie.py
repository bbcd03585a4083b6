"""The token trie of a finite (or length-bounded) language: every token sequence, EOS included.

Exact Φ for finite languages is a backward pass over this trie; exact terminal laws are sums over
its leaves. Nodes are numbered breadth-first, so a node's children are contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidArgumentError,
)

if TYPE_CHECKING:
    from hf_fvo.grammar.interface import Grammar

__all__ = ["TokenTrie", "build_token_trie"]


@dataclass(frozen=True, eq=False)
class TokenTrie:
    """All token sequences an automaton accepts from one state, as a breadth-first trie.

    Node 0 is the root (the empty prefix, ``token == -1``). The children of node ``i`` are
    nodes ``child_ptr[i] .. child_ptr[i + 1] - 1``, ordered by token id. Leaves are exactly the
    EOS nodes; every root-to-leaf path is one member of the language followed by EOS.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tokenizer = load_default_tokenizer()
        >>> trie = Grammar.from_choices(["yes", "no"], tokenizer).token_trie()
        >>> trie.num_sequences  # every segmentation of "yes" and "no" into tokens
        6
        >>> [tokenizer.convert_ids_to_tokens(list(s[:-1])) for s in trie.sequences()][:3]
        [['no'], ['yes'], ['n', 'o']]
    """

    parent: torch.Tensor  # int64 (N,), -1 at the root
    token: torch.Tensor  # int64 (N,), the token leading into the node, -1 at the root
    state: torch.Tensor  # int64 (N,), automaton state after the node's prefix
    depth: torch.Tensor  # int64 (N,), number of tokens in the node's prefix
    child_ptr: torch.Tensor  # int64 (N + 1,)
    is_eos: torch.Tensor  # bool (N,), True at leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes, root and EOS leaves included."""
        return len(self.parent)

    @property
    def num_sequences(self) -> int:
        """Number of token sequences (= EOS leaves)."""
        return int(self.is_eos.sum())

    def children(self, node: int) -> torch.Tensor:
        """Child node ids of ``node`` (empty at leaves)."""
        return torch.arange(int(self.child_ptr[node]), int(self.child_ptr[node + 1]))

    def prefix(self, node: int) -> tuple[int, ...]:
        """Token ids from the root to ``node`` (EOS included at a leaf)."""
        out = []
        parent, token = self.parent.tolist(), self.token.tolist()
        while node > 0:
            out.append(token[node])
            node = parent[node]
        return tuple(reversed(out))

    def sequences(self) -> list[tuple[int, ...]]:
        """Every accepted token sequence, each ending with EOS, in leaf (BFS) order."""
        parent, token = self.parent.tolist(), self.token.tolist()
        out = []
        for leaf in torch.nonzero(self.is_eos).flatten().tolist():
            path, node = [], leaf
            while node > 0:
                path.append(token[node])
                node = parent[node]
            out.append(tuple(reversed(path)))
        return out


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
