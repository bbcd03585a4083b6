"""Grammars given directly as automata over token ids, with no tokenizer and no regex.

Toy models with a handful of tokens (the Markov LMs of the exact oracles) and languages whose
regex would be enormous (the budget language L_{n,K}, whose compact automaton has O(nK) states)
are easiest to state as a transition table. The result is an ordinary :class:`TokenAutomaton`: dead
states trimmed, EOS implied at accepting states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from hf_fvo.errors import InvalidArgumentError, check_int
from hf_fvo.grammar.automaton.build import assemble
from hf_fvo.grammar.automaton.tables import TokenAutomaton

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
        InvalidArgumentError: a token id outside ``[0, vocab_size)``, an EOS transition, or a
            label that is not a non-negative int.
        EmptyLanguageError: no accepting state is reachable.

    Example:
        >>> from hf_fvo import Grammar
        >>> g = Grammar.from_transitions({0: {0: 1, 1: 1}, 1: {}}, [1], vocab_size=3,
        ...                              eos_token_id=2)
        >>> g.next_state(g.initial_state, 1) is not None, g.is_finite
        (True, True)
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=1)
    ids = [eos_token_id] if not isinstance(eos_token_id, (list, tuple)) else list(eos_token_id)
    eos = tuple(check_int("eos_token_id", e) for e in ids)
    if not eos or any(e >= vocab_size for e in eos):
        raise InvalidArgumentError(f"eos_token_id {eos_token_id!r} must lie in [0, {vocab_size})")
    if not isinstance(transitions, Mapping):
        raise InvalidArgumentError(
            "transitions must be a dict {state: {token_id: next_state}}, got "
            f"{type(transitions).__name__}"
        )
    if isinstance(accepting, (str, bytes)) or not isinstance(accepting, Iterable):
        raise InvalidArgumentError(
            f"accepting must be a collection of state labels, got {type(accepting).__name__}"
        )
    if not isinstance(source, str):
        raise InvalidArgumentError(f"source must be a str, got {type(source).__name__}")
    edges: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for state, row in transitions.items():
        state = check_int("a state label", state)
        if not isinstance(row, Mapping):
            raise InvalidArgumentError(
                f"state {state}: transitions must map token ids to next states, got "
                f"{type(row).__name__}"
            )
        toks = np.array([check_int("a token id", t) for t in row], dtype=np.int64)
        dsts = np.array([check_int("a state label", d) for d in row.values()], dtype=np.int64)
        bad = [int(t) for t in toks if t >= vocab_size or t in eos]
        if bad:
            raise InvalidArgumentError(
                f"state {state}: token {bad[0]} is EOS or outside [0, {vocab_size}); EOS is "
                "implied at accepting states"
            )
        edges[state] = (toks, dsts)
    accept = {check_int("an accepting state label", s) for s in accepting}
    return assemble(
        edges, check_int("initial_state", initial_state), accept, eos, vocab_size, source,
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
    n, k = check_int("n", n), check_int("k", k)
    for name, value in (("zero", zero), ("one", one), ("eos_token_id", eos_token_id)):
        check_int(name, value)
    if len({zero, one, eos_token_id}) != 3:
        raise InvalidArgumentError("zero, one and eos_token_id must be three different token ids")
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
