"""The token automaton backend: admissible next-token sets A_t and next states as tables.

A :class:`TokenAutomaton` is immutable and holds no tokenizer: per state, the allowed tokens
grouped by the state they lead to (a CSR table), a token-sorted copy for lookups, the accepting
flags and the distance to acceptance. Memory is proportional to the number of transitions,
never states × vocabulary. Per-sequence state is an ``int`` the caller keeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from hf_fvo.errors import GrammarError, InvalidArgumentError
from hf_fvo.grammar.automaton.trie import build_token_trie
from hf_fvo.grammar.interface import Grammar
from hf_fvo.grammar.trie import TokenTrie

__all__ = ["TokenAutomaton", "TransitionGroups"]


class TransitionGroups(NamedTuple):
    """The transitions out of one state, grouped by destination.

    ``token_ids[offsets[k]:offsets[k + 1]]`` are the tokens leading to ``next_states[k]``.
    EOS is not listed: it is allowed exactly at accepting states and leads to
    :attr:`Grammar.terminal_state`.
    """

    next_states: torch.Tensor  # int64 (k,)
    offsets: torch.Tensor  # int64 (k + 1,)
    token_ids: torch.Tensor  # int32 (m,), grouped by next state, ascending within a group


class TokenAutomaton(Grammar):
    """A compiled, immutable automaton over token ids for one grammar and one tokenizer.

    States are ints ``0 .. num_states - 1``; :attr:`initial_state` is 0. Every state can reach an
    accepting state (dead states are trimmed at compile time). After EOS the automaton sits in
    :attr:`terminal_state`, where only EOS is allowed, so EOS stays legal after EOS. The text never
    contains :attr:`reserved_character`, a Unicode noncharacter the compiler uses internally.

    Build one with the :class:`~hf_fvo.grammar.Grammar` constructors (:meth:`from_regex`,
    :meth:`from_choices`, :meth:`dyck`, ``from_json_schema(..., backend="automaton")``…);
    compiled automata are cached by (grammar, tokenizer) and pickle.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_regex("[0-9]+", load_default_tokenizer())
        >>> g.backend, g.num_states, g.is_finite
        ('automaton', 3, False)
    """

    backend = "automaton"
    initial_state: int = 0

    def __init__(
        self,
        *,
        state_ptr: np.ndarray,
        tokens: np.ndarray,
        group_ptr: np.ndarray,
        group_dst: np.ndarray,
        group_start: np.ndarray,
        accepting: np.ndarray,
        vocab_size: int,
        eos_token_ids: Sequence[int],
        source: str,
        reserved_character: str | None = None,
        tokenizer_fingerprint: str | None = None,
    ) -> None:
        """Assemble from grouped tables; use the ``Grammar.from_*`` constructors instead."""
        n = len(accepting)
        self._fingerprint = (
            tokenizer_fingerprint or f"token-table:{vocab_size}:{list(eos_token_ids)}"
        )
        self._reserved = reserved_character
        self._vocab_size = int(vocab_size)
        self._eos = tuple(int(e) for e in eos_token_ids)
        self._source = source
        self._state_ptr = torch.from_numpy(np.ascontiguousarray(state_ptr, dtype=np.int64))
        self._tokens = torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int32))
        self._group_ptr = torch.from_numpy(np.ascontiguousarray(group_ptr, dtype=np.int64))
        self._group_dst = torch.from_numpy(np.ascontiguousarray(group_dst, dtype=np.int64))
        self._group_start = torch.from_numpy(np.ascontiguousarray(group_start, dtype=np.int64))
        self._accepting = torch.from_numpy(np.ascontiguousarray(accepting, dtype=np.bool_))
        # Token-sorted copy of each state's transitions, for next_state lookups.
        lookup_tok = np.empty(len(tokens), dtype=np.int32)
        lookup_dst = np.empty(len(tokens), dtype=np.int32)
        group_len = np.diff(group_start)
        dst_per_token = np.repeat(group_dst, group_len).astype(np.int32)
        for s in range(n):
            a, b = int(state_ptr[s]), int(state_ptr[s + 1])
            order = np.argsort(tokens[a:b], kind="stable")
            lookup_tok[a:b] = tokens[a:b][order]
            lookup_dst[a:b] = dst_per_token[a:b][order]
        self._lookup_tok = torch.from_numpy(lookup_tok)
        self._lookup_dst = torch.from_numpy(lookup_dst)
        self._distance, self._finite = _distances_and_finiteness(n, group_ptr, group_dst, accepting)
        self._longest: np.ndarray | None = None
        self._init_views()
        self._check_invariants()

    # -- queries ----------------------------------------------------------------------------

    @property
    def num_states(self) -> int:
        """Number of states, the terminal state included."""
        return len(self._accepting)

    @property
    def vocab_size(self) -> int:
        """Length of every mask returned by :meth:`allowed`."""
        return self._vocab_size

    @property
    def eos_token_id(self) -> int:
        """The (first) end-of-sequence token id."""
        return self._eos[0]

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """All end-of-sequence token ids."""
        return self._eos

    @property
    def terminal_state(self) -> int:
        """The absorbing state after EOS; only EOS is allowed there."""
        return self.num_states - 1

    @property
    def source(self) -> str:
        """A short description of what was compiled."""
        return self._source

    @property
    def tokenizer_fingerprint(self) -> str:
        """Digest of the token bytes compiled for (a token table's ids when built directly)."""
        return self._fingerprint

    @property
    def reserved_character(self) -> str | None:
        """A Unicode noncharacter the text never contains (the compiler's internal sentinel)."""
        return self._reserved

    @property
    def is_finite(self) -> bool:
        """Whether the language has finitely many token sequences (no cycle among states)."""
        return self._finite

    @property
    def num_transitions(self) -> int:
        """Number of (state, non-EOS token) pairs allowed."""
        return len(self._tokens)

    @property
    def nbytes(self) -> int:
        """Memory held by the automaton's tables, in bytes."""
        return sum(
            t.nbytes
            for t in (
                self._state_ptr,
                self._tokens,
                self._group_ptr,
                self._group_dst,
                self._group_start,
                self._accepting,
                self._lookup_tok,
                self._lookup_dst,
                self._distance,
            )
        )

    def is_accepting(self, state: int) -> bool:
        """True where the text so far is a complete member of the language."""
        return bool(self._accepting_np[self._check_state(state)])

    def allowed(self, state: int) -> torch.Tensor:
        """The admissible set A_t as a ``torch.bool`` mask of length :attr:`vocab_size`.

        EOS is ``True`` exactly at accepting states.
        """
        s = self._check_state(state)
        mask = torch.zeros(self._vocab_size, dtype=torch.bool)
        a, b = self._state_ptr_np[s], self._state_ptr_np[s + 1]
        if b > a:
            mask[self._tokens[a:b]] = True
        if self._accepting_np[s]:
            mask[list(self._eos)] = True
        return mask

    def allowed_token_ids(self, state: int) -> torch.Tensor:
        """Allowed non-EOS token ids at ``state`` (int32, grouped by next state)."""
        s = self._check_state(state)
        return self._tokens[self._state_ptr_np[s] : self._state_ptr_np[s + 1]]

    def transitions(self, state: int) -> TransitionGroups:
        """The CSR view ``{next_state: token ids}`` of the transitions out of ``state``.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tokenizer = load_default_tokenizer()
            >>> g = Grammar.from_choices(["ab", "ac"], tokenizer)
            >>> groups = g.transitions(g.initial_state)
            >>> {int(n): tokenizer.convert_ids_to_tokens(
            ...     groups.token_ids[groups.offsets[k]:groups.offsets[k + 1]].tolist())
            ...  for k, n in enumerate(groups.next_states)}
            {1: ['a'], 2: ['ab', 'ac']}
        """
        s = self._check_state(state)
        g0, g1 = self._group_ptr_np[s], self._group_ptr_np[s + 1]
        starts = self._group_start[g0 : g1 + 1]
        return TransitionGroups(
            next_states=self._group_dst[g0:g1],
            offsets=starts - starts[0],
            token_ids=self._tokens[self._state_ptr_np[s] : self._state_ptr_np[s + 1]],
        )

    def next_state(self, state: int, token: int) -> int | None:
        """The state after ``token``, or ``None`` when the token is not allowed at ``state``."""
        s = self._check_state(state)
        token = int(token)
        if token in self._eos:
            return self.terminal_state if self._accepting_np[s] else None
        a, b = self._state_ptr_np[s], self._state_ptr_np[s + 1]
        row = self._lookup_tok_np[a:b]
        i = int(np.searchsorted(row, token))
        if i < len(row) and row[i] == token:
            return int(self._lookup_dst_np[a + i])
        return None

    def min_tokens_to_accept(self, state: int) -> int:
        """Fewest tokens (EOS not counted) that take ``state`` to an accepting state."""
        return int(self._distance[self._check_state(state)])

    def max_tokens_to_accept(self, state: int) -> int | None:
        """Most tokens (EOS not counted) on a path from ``state`` to acceptance; ``None`` when
        the language is infinite. A budget of this plus one (for EOS) never binds.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_choices(["ab", "abcd"], load_default_tokenizer())
            >>> g.max_tokens_to_accept(g.initial_state)  # one token per character at most
            4
        """
        state = self._check_state(state)
        if not self._finite:
            return None
        if getattr(self, "_longest", None) is None:  # computed on first use
            self._longest = _longest_paths(
                self.num_states, self._group_ptr.numpy(), self._group_dst.numpy(),
                self._accepting.numpy(),
            )  # fmt: skip
        return max(int(self._longest[state]), 0)

    def acceptance_probability(self, token_probs: torch.Tensor, horizon: int) -> torch.Tensor:
        """Per state, the probability that tokens drawn i.i.d. from ``token_probs`` reach EOS at
        an accepting state within ``horizon`` tokens (EOS counted), leaving the automaton
        counting as failure: exact Φ under the context-free surrogate LM "every step is
        ``token_probs``", one pass over the transitions plus ``horizon`` sweeps over the
        (state, next state) groups.

        Example:
            >>> import torch
            >>> from hf_fvo import Grammar
            >>> g = Grammar.budget(4, 1, zero=0, one=1, eos_token_id=2, vocab_size=3)
            >>> q = torch.tensor([0.5, 0.25, 0.25])  # four symbols, then EOS
            >>> round(float(g.acceptance_probability(q, 5)[g.initial_state]), 6)
            0.046875
        """
        q = token_probs.detach().double().flatten()[: self._vocab_size]
        if len(q) < self._vocab_size:
            q = torch.nn.functional.pad(q, (0, self._vocab_size - len(q)))
        if getattr(self, "_group_src", None) is None:
            counts = self._group_ptr[1:] - self._group_ptr[:-1]
            self._group_src = torch.repeat_interleave(torch.arange(self.num_states), counts)
        csum = torch.zeros(len(self._tokens) + 1, dtype=torch.float64)
        torch.cumsum(q[self._tokens.long()], 0, out=csum[1:])
        mass = csum[self._group_start[1:]] - csum[self._group_start[:-1]]
        base = self._accepting.double() * q[list(self._eos)].sum()
        v = torch.zeros(self.num_states, dtype=torch.float64)
        for _ in range(max(int(horizon), 0)):
            v = base.index_add(0, self._group_src, mass * v[self._group_dst])
        return v

    def admissible(self, state: int, remaining: int | None) -> torch.Tensor:
        """A_t restricted to candidates whose completion fits in ``remaining`` tokens (EOS
        counted): y is kept when its next state can accept within ``remaining - 1`` tokens."""
        mask = self.allowed(state)
        if remaining is None:
            return mask
        if remaining < 1:
            return torch.zeros_like(mask)
        groups = self.transitions(state)
        for k, nxt in enumerate(groups.next_states.tolist()):
            # after y, the next state needs its distance in content tokens plus EOS
            if int(self._distance[nxt]) + 1 > remaining - 1:
                a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
                mask[groups.token_ids[a:b]] = False
        return mask

    def token_trie(
        self,
        max_new_tokens: int | None = None,
        *,
        state: int | None = None,
        max_nodes: int = 1_000_000,
    ) -> TokenTrie:
        """Enumerate every token sequence from ``state`` to EOS as a trie (see :class:`TokenTrie`).

        Args:
            max_new_tokens: Keep sequences of at most this many tokens, EOS included.
                Required when the language is infinite.
            state: Start state (default: initial).
            max_nodes: Size guard; larger tries raise instead of being built.

        Raises:
            InfiniteLanguageError: the language is infinite and no ``max_new_tokens`` is given.
            EmptyLanguageError: no sequence fits in ``max_new_tokens``.
            GrammarTooLargeError: the trie would have more than ``max_nodes`` nodes.
        """
        start = self.initial_state if state is None else self._check_state(state)
        return build_token_trie(self, start, max_new_tokens, max_nodes)

    # -- internals --------------------------------------------------------------------------

    def _check_state(self, state: int) -> int:
        if isinstance(state, bool) or not isinstance(state, (int, np.integer)):
            raise InvalidArgumentError(f"a state of this automaton is an int, got {state!r}")
        s = int(state)
        if not 0 <= s < len(self._accepting_np):
            raise InvalidArgumentError(f"state {state} is not a state of this automaton")
        return s

    def _init_views(self) -> None:
        self._state_ptr_np = self._state_ptr.numpy()
        self._group_ptr_np = self._group_ptr.numpy()
        self._accepting_np = self._accepting.numpy()
        self._lookup_tok_np = self._lookup_tok.numpy()
        self._lookup_dst_np = self._lookup_dst.numpy()

    def _check_invariants(self) -> None:
        vocab = self._vocab_size
        if len(self._tokens) and int(self._tokens.max()) >= vocab:
            raise GrammarError("a transition token id exceeds vocab_size")
        if any(not 0 <= e < vocab for e in self._eos):
            raise GrammarError(f"eos_token_id {self._eos} outside vocab_size {vocab}")
        if not bool(self._accepting[-1]):
            raise GrammarError("internal: the terminal state must be accepting")

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.endswith("_np")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_views()

    def __repr__(self) -> str:
        return (
            f"TokenAutomaton({self._source}, states={self.num_states}, "
            f"transitions={self.num_transitions}, vocab_size={self._vocab_size})"
        )


def _longest_paths(
    n: int, group_ptr: np.ndarray, group_dst: np.ndarray, accepting: np.ndarray
) -> np.ndarray:
    """Longest token path to acceptance from each state of an acyclic automaton."""
    longest = np.full(n, -1, dtype=np.int64)

    def visit(s: int) -> int:  # iterative post-order: depth can reach the string length
        stack = [(s, False)]
        while stack:
            node, done = stack.pop()
            if longest[node] >= 0:
                continue
            dsts = [int(d) for d in group_dst[group_ptr[node] : group_ptr[node + 1]]]
            if done:
                best = 0 if accepting[node] else -(10**9)
                for d in dsts:
                    best = max(best, int(longest[d]) + 1)
                longest[node] = best
            else:
                stack.append((node, True))
                stack.extend((d, False) for d in dsts if longest[d] < 0)
        return int(longest[s])

    for s in range(n):
        visit(s)
    return longest


def _distances_and_finiteness(
    n: int, group_ptr: np.ndarray, group_dst: np.ndarray, accepting: np.ndarray
) -> tuple[torch.Tensor, bool]:
    """Token distance to acceptance (reverse BFS) and whether the state graph is acyclic."""
    preds: list[list[int]] = [[] for _ in range(n)]
    outdeg = np.zeros(n, dtype=np.int64)
    for s in range(n):
        dsts = group_dst[group_ptr[s] : group_ptr[s + 1]]
        outdeg[s] = len(dsts)
        for d in dsts:
            preds[int(d)].append(s)
    dist = np.full(n, -1, dtype=np.int64)
    queue = deque(int(s) for s in np.flatnonzero(accepting))
    dist[list(queue)] = 0
    while queue:
        d = queue.popleft()
        for p in preds[d]:
            if dist[p] < 0:
                dist[p] = dist[d] + 1
                queue.append(p)
    if (dist < 0).any():
        raise GrammarError("internal: a state cannot reach acceptance after trimming")
    # Kahn's algorithm on the reversed graph: acyclic iff every state gets peeled.
    remaining = outdeg.copy()
    queue = deque(int(s) for s in np.flatnonzero(remaining == 0))
    peeled = 0
    while queue:
        d = queue.popleft()
        peeled += 1
        for p in preds[d]:
            remaining[p] -= 1
            if remaining[p] == 0:
                queue.append(p)
    return torch.from_numpy(dist.astype(np.int32)), peeled == n
