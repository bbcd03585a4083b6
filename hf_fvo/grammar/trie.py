"""The token trie of a finite (or length-bounded) language: every token sequence, EOS included.

Exact Φ for finite languages is a backward pass over this trie; exact terminal laws are sums over
its leaves. Nodes are numbered breadth-first, so a node's children are contiguous. Token automata
build them (:meth:`~hf_fvo.grammar.TokenAutomaton.token_trie`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TokenTrie"]


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
