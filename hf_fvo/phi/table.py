"""Exact Φ from a table: the log-probabilities of every member of a finite language, scored once.

On a finite language, Φ_t(y) = Σ_{x ⊒ u·y} p(x) / p(u·y): the mass of the members that extend
the prefix, over the prefix's own probability. :class:`ExactPhi` finds those masses by running
the model over the language's token trie; a host that runs the model itself and only lets a
logits processor see one row at a time (vLLM) can instead score every member once — one prefill
per member, sharing prefixes — and hand the processor the table. :func:`enumerate_members` lists
the token sequences to score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from hf_fvo.errors import GrammarTooLargeError, InvalidArgumentError
from hf_fvo.grammar.interface import Grammar, State
from hf_fvo.phi.base import PhiContext, PhiEstimator, no_dead_row

__all__ = ["TablePhi", "enumerate_members"]


def enumerate_members(
    grammar: Grammar, max_new_tokens: int | None = None, *, limit: int = 10_000
) -> list[tuple[int, ...]]:
    """Every token sequence (EOS excluded) the grammar accepts within ``max_new_tokens`` tokens
    (EOS included), on either backend, in depth-first order.

    Raises:
        GrammarTooLargeError: more than ``limit`` sequences (or an infinite language without a
            budget that keeps the search finite).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi.table import enumerate_members
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> sorted(tok.decode(m) for m in enumerate_members(g))
        ['no', 'no', 'yes', 'yes', 'yes', 'yes']
    """
    eos = set(grammar.eos_token_ids)
    out: list[tuple[int, ...]] = []
    nodes = 0
    stack: list[tuple[tuple[int, ...], State]] = [((), grammar.initial_state)]
    while stack:
        prefix, state = stack.pop()
        nodes += 1
        if nodes > 50 * limit:
            raise GrammarTooLargeError(
                f"{grammar.source} has more than {50 * limit} prefixes within the budget: "
                "too many to score as a table"
            )
        remaining = None if max_new_tokens is None else max_new_tokens - len(prefix)
        if max_new_tokens is None and len(prefix) > 4096:
            raise GrammarTooLargeError(f"{grammar.source} has members over 4096 tokens")
        allowed = grammar.admissible(state, remaining).nonzero().flatten().tolist()
        if any(t in eos for t in allowed):
            out.append(prefix)
            if len(out) > limit:
                raise GrammarTooLargeError(
                    f"{grammar.source} has more than {limit} token sequences within the budget: "
                    "too many to score as a table"
                )
        for tok in reversed(allowed):
            if tok not in eos:
                nxt = grammar.next_state(state, tok)
                if nxt is not None:
                    stack.append(((*prefix, tok), nxt))
    return out


class TablePhi(PhiEstimator):
    """Exact Φ on a finite language from a table of its members' log-probabilities.

    Args:
        grammar: The compiled grammar.
        table: One ``(token_ids, logprobs)`` pair per member, as :func:`enumerate_members`
            lists them: ``logprobs`` holds log p of each token given the prompt and the tokens
            before it, then the log-probability of ending there (EOS), so it is one longer
            than ``token_ids``.

    Φ̂ is exact where the table lists every member the budget admits (``additive_error`` 0):
    log Φ_t(y) = log Σ_{x ⊒ u·y} p(x) − log p(u·y), with EOS at 1 in accepting states.

    Raises:
        InvalidArgumentError: a malformed row, or a member the grammar does not accept.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import PhiContext, TablePhi
        >>> from hf_fvo.phi.table import enumerate_members
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["ab", "b"], tok)
        >>> members = enumerate_members(g)
        >>> rows = [(m, [-1.0] * (len(m) + 1)) for m in members]  # a toy model: log p = -1
        >>> phi = TablePhi(g, rows)
        >>> row = phi.log_phi(PhiContext(g.initial_state, (), torch.zeros(g.vocab_size)))
        >>> bool(row.isfinite().any()), bool((row <= 1e-12).all())
        (True, True)
    """

    name = "table"

    def __init__(
        self, grammar: Grammar, table: Iterable[tuple[Sequence[int], Sequence[float]]]
    ) -> None:
        super().__init__(grammar)
        self._members: list[tuple[tuple[int, ...], list[float]]] = []
        self._by_prefix: dict[tuple[int, ...], list[int]] = {}
        for i, row in enumerate(table):
            ids, logprobs = _row(row, i)
            state = grammar.walk(ids)
            if state is None or not grammar.is_accepting(state):
                raise InvalidArgumentError(
                    f"table row {i} ({list(ids)[:8]}…) is not a member of {grammar.source}"
                )
            cumulative = [0.0]
            for lp in logprobs:
                cumulative.append(cumulative[-1] + lp)
            self._members.append((ids, cumulative))
            for k in range(len(ids) + 1):
                self._by_prefix.setdefault(ids[:k], []).append(len(self._members) - 1)

    def additive_error(self, ctx: PhiContext) -> float | None:
        return 0.0

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        g = self.grammar
        mask = g.admissible(ctx.state, ctx.remaining)
        out = torch.full((g.vocab_size,), -torch.inf, dtype=torch.float64)
        k = len(ctx.generated)
        groups: dict[int, list[float]] = {}
        prefix_mass: dict[int, float] = {}
        for i in self._by_prefix.get(tuple(ctx.generated), ()):
            ids, cumulative = self._members[i]
            if ctx.remaining is not None and len(ids) - k + 1 > ctx.remaining:
                continue  # does not fit the budget
            if len(ids) == k:
                continue  # ends here: EOS, whose Φ is 1
            groups.setdefault(ids[k], []).append(cumulative[-1])
            prefix_mass[ids[k]] = cumulative[k + 1]
        for tok, totals in groups.items():
            top = max(totals)
            total = top + math.log(sum(math.exp(v - top) for v in totals))
            out[tok] = min(0.0, total - prefix_mass[tok])
        if g.is_accepting(ctx.state):
            out[list(g.eos_token_ids)] = 0.0
        return no_dead_row(out.masked_fill_(~mask, -torch.inf), mask)


def _row(row: object, i: int) -> tuple[tuple[int, ...], list[float]]:
    try:
        ids, logprobs = row  # type: ignore[misc]
        ids = tuple(int(t) for t in ids)
        logprobs = [float(v) for v in logprobs]
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"table row {i} must be (token_ids, logprobs) of numbers: {e}"
        ) from None
    if len(logprobs) != len(ids) + 1:
        raise InvalidArgumentError(
            f"table row {i} has {len(ids)} tokens and {len(logprobs)} log-probabilities; it "
            "needs one per token plus the end's (EOS)"
        )
    if any(math.isnan(v) or v > 0.0 for v in logprobs):
        raise InvalidArgumentError(f"table row {i} has a log-probability that is NaN or above 0")
    return ids, logprobs
