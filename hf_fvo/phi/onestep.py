"""OneStep-cheap (seed 000, Def. 9): Φ̂(y) = Σ_{u ∈ A_{t+1}(x y)} p_t(u), from the logits at hand.

No forward pass: the current distribution p_t stands in for p(· | x, y).

- On a token automaton the sum is taken once per distinct next state (a state has few; the
  grouped transition table gives them): one gather-sum per next state, never a loop over the
  vocabulary. Every candidate is scored.
- On a pushdown grammar next states are not shared, so each candidate costs a parser step and a
  mask. The candidates that carry the mass are scored (the most likely ones until their p_t mass
  covers ``coverage`` of A_t, at most ``max_candidates``); the others get the p_t-weighted mean of
  the scored values, and their mass is reported as ``unscored`` in the diagnostics and in the
  certificate.
"""

from __future__ import annotations

import math

import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar import Grammar, TokenAutomaton
from hf_fvo.phi.base import PhiContext, PhiEstimator, no_dead_row

__all__ = ["OneStepPhi"]


class OneStepPhi(PhiEstimator):
    """Allowed probability mass at each candidate's next state, under the current logits.

    Args:
        grammar: The compiled grammar (either backend).
        model: Unused (OneStep runs no forwards).
        coverage: Pushdown grammars: score candidates until they hold this share of A_t's mass.
        max_candidates: Pushdown grammars: score at most this many candidates per position.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import OneStepPhi, PhiContext
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> logits = torch.zeros(g.vocab_size)
        >>> logits[tok.convert_tokens_to_ids("o")] = 20.0  # the model loves "o"
        >>> phi = OneStepPhi(g).log_phi(PhiContext(g.initial_state, (), logits)).exp()
        >>> phi[tok.convert_tokens_to_ids("n")] > 0.99 > phi[tok.convert_tokens_to_ids("y")]
        tensor(True)
    """

    name = "onestep"

    def __init__(
        self,
        grammar: Grammar,
        model: object = None,
        *,
        coverage: float = 0.99,
        max_candidates: int = 32,
    ) -> None:
        super().__init__(grammar, model)
        if not 0.0 < coverage <= 1.0:
            raise InvalidArgumentError(f"coverage must lie in (0, 1], got {coverage!r}")
        if (
            isinstance(max_candidates, bool)
            or not isinstance(max_candidates, int)
            or (max_candidates < 1)
        ):
            raise InvalidArgumentError(
                f"max_candidates must be a positive int, got {max_candidates!r}"
            )
        self.coverage = float(coverage)
        self.max_candidates = max_candidates
        self._unscored = 0.0

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        out, self._unscored = self._onestep(ctx)
        return out

    def estimate(self, ctx: PhiContext) -> tuple[torch.Tensor, float]:
        # subclasses refine log_phi on top of OneStep's vector, which records the unscored mass
        self._unscored = 0.0
        out = self.log_phi(ctx)
        return out, self._unscored

    def _onestep(self, ctx: PhiContext) -> tuple[torch.Tensor, float]:
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)
        mask = self.grammar.admissible(ctx.state, ctx.remaining)
        out = torch.full(mask.shape, -torch.inf, dtype=torch.float64)
        if self.grammar.is_accepting(ctx.state):
            out[list(self.grammar.eos_token_ids)] = 0.0  # Φ(EOS) = 1: the text is complete
        if isinstance(self.grammar, TokenAutomaton):
            self._grouped(ctx, logp, mask, out)
            return no_dead_row(out, mask), 0.0
        unscored = self._scored(ctx, logp, mask, out)
        return no_dead_row(out, mask), unscored

    def _grouped(
        self, ctx: PhiContext, logp: torch.Tensor, mask: torch.Tensor, out: torch.Tensor
    ) -> None:
        g = self.grammar
        after = None if ctx.remaining is None else ctx.remaining - 1
        groups = g.transitions(ctx.state)
        mass = _Mass(logp)
        for k, nxt in enumerate(groups.next_states.tolist()):
            a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
            tokens = groups.token_ids[a:b]
            tokens = tokens[mask[tokens]]
            if len(tokens) == 0:
                continue
            out[tokens] = mass.log(g.admissible(nxt, after))

    def _scored(
        self, ctx: PhiContext, logp: torch.Tensor, mask: torch.Tensor, out: torch.Tensor
    ) -> float:
        """Score the most likely candidates; the rest get the mass-weighted mean. Returns the
        share of A_t's mass that was not scored."""
        g = self.grammar
        width = mask.shape[0]
        candidates = mask.clone()
        candidates[list(g.eos_token_ids)] = False
        ids = torch.nonzero(candidates).flatten()
        if len(ids) == 0:
            return 0.0
        mass = _Mass(logp[:width])
        total = mass.log(mask)
        top_lp, top = torch.topk(logp[:width][ids], min(self.max_candidates, len(ids)))
        share = torch.exp(torch.logcumsumexp(top_lp, 0) - total)
        take = int(torch.searchsorted(share, torch.tensor(self.coverage, dtype=share.dtype))) + 1
        chosen = ids[top[: min(take, len(top))]]
        after = None if ctx.remaining is None else ctx.remaining - 1
        for y in chosen.tolist():
            out[y] = mass.log(g.admissible(g.next_state(ctx.state, y), after))
        if len(chosen) == len(ids):
            return 0.0
        rest = candidates
        rest[chosen] = False
        weights = logp[:width][chosen]
        out[rest] = torch.logsumexp(weights + out[chosen], 0) - torch.logsumexp(weights, 0)
        return math.exp(mass.log(rest) - total)


class _Mass:
    """log Σ_{u ∈ mask} p_t(u) for many masks over one row of log-probabilities: p_t / max p_t
    summed where the mask holds, in float64 (no gather of the masked entries, no logsumexp); a
    sum below 1e-280 of the row's largest probability, whose small terms may have underflowed,
    takes the logsumexp instead."""

    _TINY = 1e-280

    def __init__(self, logp: torch.Tensor) -> None:
        self.logp = logp
        self.shift = float(logp.max())
        self.p = (logp - self.shift).exp() if math.isfinite(self.shift) else None
        self.zero = torch.zeros((), dtype=logp.dtype, device=logp.device)

    def log(self, mask: torch.Tensor) -> float:
        n = min(mask.shape[0], self.logp.shape[0])
        mask = mask[:n].to(self.logp.device)
        if self.p is not None:
            total = float(torch.where(mask, self.p[:n], self.zero).sum())
            if total > self._TINY:
                return math.log(total) + self.shift
        return float(torch.logsumexp(self.logp[:n][mask], 0))
