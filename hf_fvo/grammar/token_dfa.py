"""Grammars given directly as automata over token ids, with no tokenizer and no regex.

Toy models with a handful of tokens (the Markov LMs of the exact oracles) and languages whose
regex would be enormous (the budget language L_{n,K}, whose compact automaton has O(nK) states)
are easiest to state as a transition table. The result is an ordinary :class:`TokenAutomaton`: dead
states trimmed, EOS implied at accepting states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from hf_fvo.grammar.automaton import TokenAutomaton
from hf_fvo.grammar.errors import GrammarError

__all__ = ["budget_language", "from_transitions"]


def from_transitions(
    transitions: Mapping[int, Mapping[int, int]],
    accepting: Iterable[int],
    *,
    vocab_size: int,
    eos_token_id: int | Sequence[int],
    initial_state: int = 0,
    source: str = "token automaton",
) -> TokenAutomaton:
    """A grammar from ``{state: {token_id: next_state}}`` and the accepting states.

    State labels are any ints; they are renumbered (initial state 0). EOS is allowed exactly at
    accepting states and must not appear in ``transitions``.

    Raises:
        GrammarError: a token id outside ``[0, vocab_size)``, an EOS transition, or a bad label.
        EmptyLanguageError: no accepting state is reachable.

    Example:
        >>> from hf_fvo import Grammar
        >>> g = Grammar.from_transitions({0: {0: 1, 1: 1}, 1: {}}, [1], vocab_size=3,
        ...                              eos_token_id=2)
        >>> g.next_state(g.initial_state, 1) is not None, g.is_finite
        (True, True)
    """
    from hf_fvo.grammar.compile import assemble

    eos = (eos_token_id,) if isinstance(eos_token_id, int) else tuple(eos_token_id)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise GrammarError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if not eos or any(not 0 <= int(e) < vocab_size for e in eos):
        raise GrammarError(f"eos_token_id {eos_token_id!r} must lie in [0, {vocab_size})")
    edges: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for state, row in transitions.items():
        toks = np.fromiter((int(t) for t in row), dtype=np.int64, count=len(row))
        dsts = np.fromiter((int(d) for d in row.values()), dtype=np.int64, count=len(row))
        bad = [int(t) for t in toks if not 0 <= t < vocab_size or t in eos]
        if bad:
            raise GrammarError(
                f"state {state}: token {bad[0]} is EOS or outside [0, {vocab_size}); EOS is "
                "implied at accepting states"
            )
        if (len(dsts) and dsts.min() < 0) or int(state) < 0:
            raise GrammarError("state labels must be non-negative ints")
        edges[int(state)] = (toks, dsts)
    accept = {int(s) for s in accepting}
    return assemble(
        edges, int(initial_state), accept, eos, vocab_size, source,
        empty_reason="no accepting state is reachable",
    )  # fmt: skip


def budget_language(
    n: int, k: int, *, zero: int, one: int, eos_token_id: int, vocab_size: int
) -> TokenAutomaton:
    """L_{n,K} = {x ∈ {0,1}^n : Σ x ≤ K} (seed 000 §H.4): exactly ``n`` tokens, each ``zero``
    or ``one``, at most ``k`` of them ``one``, then EOS. The automaton's state is (position,
    ones used); it has (n + 1)(K + 1) − K(K + 1)/2 live states at most.

    Example:
        >>> from hf_fvo import Grammar
        >>> g = Grammar.budget(4, 1, zero=0, one=1, eos_token_id=2, vocab_size=3)
        >>> g.is_accepting(g.walk([0, 1, 0, 0])), g.walk([1, 1])
        (True, None)
    """
    for name, value in (("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise GrammarError(f"{name} must be a non-negative int, got {value!r}")
    if len({zero, one, eos_token_id}) != 3:
        raise GrammarError("zero, one and eos_token_id must be three different token ids")
    label = {(t, c): t * (k + 1) + c for t in range(n + 1) for c in range(k + 1)}
    transitions: dict[int, dict[int, int]] = {}
    for (t, c), s in label.items():
        row: dict[int, int] = {}
        if t < n:
            row[zero] = label[(t + 1, c)]
            if c < k:
                row[one] = label[(t + 1, c + 1)]
        transitions[s] = row
    accepting = [label[(n, c)] for c in range(k + 1)]
    return from_transitions(
        transitions, accepting, vocab_size=vocab_size, eos_token_id=eos_token_id,
        source=f"budget n={n} K={k}",
    )  # fmt: skip
