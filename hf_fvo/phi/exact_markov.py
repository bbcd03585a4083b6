"""Exact Φ under a Markov LM, for any grammar automaton: dynamic programming on product states.

Under a Markov LM of order k the future depends on the prefix only through (the last k tokens,
the grammar state, the tokens left). So Φ is a table over (context × state) per remaining
length r, filled backwards in log space:

    T_0 = −inf,   T_r[c, s] = logsumexp( {log p(u|c) + T_{r−1}[c·u, δ(s, u)] : u ∈ A(s)}
                                          ∪ {log p(EOS|c) : s accepting} ),

where c·u is the context after u. Then Φ_t(y) = T_{r−1}[c·y, δ(s, y)] with r tokens left (EOS
counted) and Φ_t(EOS) = 1 at accepting states. Each layer is a handful of tensor ops over all
transitions at once, so the table costs O(R · V^k · transitions) and a step is a lookup.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.phi.base import PhiContext, PhiEstimator, no_dead_row

__all__ = ["MarkovExactPhi"]


class MarkovExactPhi(PhiEstimator):
    """Exact future validity for a :class:`~hf_fvo.models.MarkovLM` on any grammar.

    ``phi="exact"`` picks this estimator when the model is a Markov LM. Languages with
    unboundedly long members need a token budget (``max_new_tokens``); for finite languages the
    table runs to the longest member.

    Args:
        grammar: Any compiled automaton (regex, JSON schema, Dyck, budget, explicit).
        model: The :class:`~hf_fvo.models.MarkovLM` whose completions are counted.

    Raises:
        TypeError: the model is not a Markov LM (use ``ExactPhi`` for other models).
        ValueError: an infinite language with no token budget.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.phi import MarkovExactPhi, PhiContext
        >>> lm = MarkovLM.random(3, seed=0)  # tokens 0, 1 and EOS 2
        >>> g = Grammar.budget(6, 2, zero=0, one=1, eos_token_id=2, vocab_size=3)
        >>> phi = MarkovExactPhi(g, lm)
        >>> row = phi.log_phi(PhiContext(g.initial_state, (), torch.zeros(3), 7, prompt=(0,)))
        >>> bool(row[0] > row[1])  # a 1 spends budget: fewer completions stay valid
        True
        >>> phi.doob_residual(7) < 1e-12
        True
    """

    name = "exact_markov"
    needs_model = True
    needs_automaton = True

    def __init__(self, grammar: Grammar, model: Any) -> None:
        super().__init__(grammar, model)
        from hf_fvo.models.markov import MarkovLM

        if not isinstance(model, MarkovLM):
            raise InvalidArgumentError(
                f"MarkovExactPhi needs an hf_fvo.models.MarkovLM, got {type(model).__name__}; "
                "for other models use ExactPhi (finite languages)"
            )
        vocab = model.config.vocab_size
        if grammar.vocab_size > vocab:
            raise InvalidArgumentError(
                f"the grammar has vocab_size {grammar.vocab_size} but the model {vocab}"
            )
        self.order = model.config.order
        self.vocab = vocab
        self.log_p = model.log_probs.detach().double().cpu()  # (V^k, V)
        src, tok, dst = _transition_arrays(grammar)
        self._src, self._tok, self._dst = src, tok, dst
        # context after token u from context c: drop the oldest token, append u
        c = torch.arange(vocab**self.order)
        tail = (c % vocab ** (self.order - 1)) * vocab
        self._next_ctx = tail[:, None] + tok[None, :]  # (V^k, M)
        self._step_logp = self.log_p[:, tok]  # (V^k, M)
        eos = list(grammar.eos_token_ids)
        self._eos_logp = torch.logsumexp(self.log_p[:, eos], dim=-1)  # (V^k,)
        self._accepting = torch.tensor(
            [grammar.is_accepting(s) for s in range(grammar.num_states)], dtype=torch.bool
        )
        self._tables: list[torch.Tensor] = [
            torch.full((vocab**self.order, grammar.num_states), -math.inf, dtype=torch.float64)
        ]

    # -- the table ------------------------------------------------------------------------------

    def table(self, remaining: int) -> torch.Tensor:
        """log Pr[valid completion within ``remaining`` tokens (EOS counted) | context, state],
        shape (V^k, states); built once and extended as longer budgets are asked for."""
        if remaining < 0:
            raise InvalidArgumentError(f"remaining must be non-negative, got {remaining}")
        n_states = self.grammar.num_states
        while len(self._tables) <= remaining:
            prev = self._tables[-1].reshape(-1)
            vals = self._step_logp + prev[self._next_ctx * n_states + self._dst[None, :]]
            out = _scatter_logsumexp(vals, self._src, n_states)
            eos = torch.where(self._accepting[None, :], self._eos_logp[:, None], -math.inf)
            self._tables.append(torch.logaddexp(out, eos))
        return self._tables[remaining]

    def horizon(self, ctx: PhiContext) -> int:
        """The budget the table is read at: ``ctx.remaining``, or for a finite language with
        none, enough for its longest member plus EOS."""
        if ctx.remaining is not None:
            return ctx.remaining
        longest = self.grammar.max_tokens_to_accept(ctx.state)
        if longest is None:
            raise InvalidArgumentError(
                f"{self.grammar.source} is infinite: exact Φ needs a token budget (max_new_tokens)"
            )
        return longest + 1

    def context(self, ctx: PhiContext) -> int:
        """The model context (table row) after the prompt and the generated tokens."""
        if not ctx.prompt and not ctx.generated:
            raise InvalidArgumentError(
                "the exact estimator needs the prompt token ids (PhiContext.prompt)"
            )
        return self.model.context_of((*ctx.prompt, *ctx.generated))

    # -- interface ------------------------------------------------------------------------------

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        g = self.grammar
        r = self.horizon(ctx)
        out = torch.full((g.vocab_size,), -math.inf, dtype=torch.float64)
        if r < 1:
            return out
        c = self.context(ctx)
        if g.is_accepting(ctx.state):
            out[list(g.eos_token_ids)] = 0.0  # Φ(EOS) = 1: the text is complete
        groups = g.transitions(ctx.state)
        if len(groups.token_ids):
            tokens = groups.token_ids.long()
            sizes = torch.diff(groups.offsets)
            nxt = torch.repeat_interleave(groups.next_states, sizes)
            after = self.table(r - 1)
            tail = (c % self.vocab ** (self.order - 1)) * self.vocab
            out[tokens] = after[tail + tokens, nxt]
        mask = torch.isfinite(out)
        if not mask.any():  # nothing fits: leave the budget check to grammar.admissible
            mask = g.admissible(ctx.state, r)
        return no_dead_row(out, mask)

    def additive_error(self, ctx: PhiContext) -> float:
        return 0.0

    def doob_residual(self, remaining: int) -> float:
        """max |Φ_r(c, s) − Σ_u p(u|c) Φ_{r−1}(c·u, δ(s, u)) − p(EOS|c)·1[s accepting]| over
        every table up to ``remaining``, recomputed in linear space state by state (a check of
        the log-space tensor recursion by an independent route)."""
        g = self.grammar
        p = self.log_p.exp().numpy()
        eos = p[:, list(g.eos_token_ids)].sum(-1)
        worst = 0.0
        for r in range(1, remaining + 1):
            now, before = self.table(r).exp().numpy(), self.table(r - 1).exp().numpy()
            for s in range(g.num_states):
                expected = eos * float(g.is_accepting(s))
                groups = g.transitions(s)
                for k, nxt in enumerate(groups.next_states.tolist()):
                    a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
                    for u in groups.token_ids[a:b].tolist():
                        rows = [self.model.context_index([*self._context_tuple(c)[1:], u])
                                for c in range(len(p))]  # fmt: skip
                        expected = expected + p[:, u] * before[rows, nxt]
                worst = max(worst, float(np.abs(now[:, s] - expected).max()))
        return worst

    def _context_tuple(self, c: int) -> tuple[int, ...]:
        out = []
        for _ in range(self.order):
            out.append(c % self.vocab)
            c //= self.vocab
        return tuple(reversed(out))


def _transition_arrays(grammar: Grammar) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(source state, token, next state) of every transition, as three int64 tensors."""
    src, tok, dst = [], [], []
    for s in range(grammar.num_states):
        groups = grammar.transitions(s)
        sizes = torch.diff(groups.offsets)
        tok.append(groups.token_ids.long())
        dst.append(torch.repeat_interleave(groups.next_states, sizes))
        src.append(torch.full((len(groups.token_ids),), s, dtype=torch.long))
    return torch.cat(src), torch.cat(tok), torch.cat(dst)


def _scatter_logsumexp(vals: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """logsumexp of ``vals[:, m]`` grouped by ``index[m]`` into ``size`` columns (−inf-safe)."""
    rows = vals.shape[0]
    idx = index[None, :].expand(rows, -1)
    top = torch.full((rows, size), -math.inf, dtype=vals.dtype)
    top = top.scatter_reduce(1, idx, vals, reduce="amax", include_self=True)
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    summed = torch.zeros((rows, size), dtype=vals.dtype).scatter_add(
        1, idx, torch.exp(vals - shift.gather(1, idx))
    )
    return torch.log(summed) + shift
