"""The one interface every future-validity estimator implements.

Φ_t(y) = Pr_p[valid completion | prefix, y]. An estimator returns log Φ̂_t(y) for every token of
the vocabulary (−inf off the admissible set A_t) and the processor samples
μ̂_t(y) ∝ p_t(y) · Φ̂_t(y). Completions must fit the token budget: with ``remaining`` tokens left
(HF ``max_new_tokens`` minus tokens generated, EOS counted), a candidate y is admissible only if
its next state can still reach EOS within ``remaining - 1`` further tokens.

Φ(EOS) = 1 at accepting states: the text is already complete.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from hf_fvo.grammar import Grammar

__all__ = [
    "PhiContext",
    "PhiDiagnostics",
    "PhiEstimator",
    "PhiStep",
    "admissible_mask",
    "no_dead_row",
]


@dataclass(frozen=True)
class PhiContext:
    """Everything an estimator may look at for one position.

    Args:
        state: Grammar state after the generated tokens.
        generated: Token ids generated so far (after the prompt).
        logits: The model's next-token scores at this position, shape (V,).
        remaining: Tokens still allowed, this one included (``None``: unbounded).
        prompt: The prompt's token ids (estimators that run the model need it).
    """

    state: int
    generated: tuple[int, ...]
    logits: torch.Tensor
    remaining: int | None = None
    prompt: tuple[int, ...] = ()


@dataclass(frozen=True)
class PhiDiagnostics:
    """Per-position diagnostics: ``mean_phi`` is Φ̄_t = E_{μ_proj,t}[Φ̂]; ``dispersion`` is
    log(Φ̂max/Φ̂min) over candidates with Φ̂ > 0; ``delta`` an additive bound sup|Φ̂ − Φ| where
    the estimator knows one (``None`` otherwise)."""

    mean_phi: float
    dispersion: float
    delta: float | None

    @property
    def tv_bound(self) -> float:
        """Seed 000 Thm 7: TV(μ̂_t, μ*_t) ≤ δ/(Φ̄ − δ) when δ < Φ̄, else ``inf``."""
        if self.delta is None or self.delta >= self.mean_phi:
            return math.inf
        return self.delta / (self.mean_phi - self.delta)


@dataclass(frozen=True)
class PhiStep:
    """One position's estimate (log Φ̂ over the vocabulary) and its diagnostics."""

    log_phi: torch.Tensor
    diagnostics: PhiDiagnostics


def admissible_mask(grammar: Grammar, state: int, remaining: int | None) -> torch.Tensor:
    """A_t restricted to candidates whose completion fits in ``remaining`` tokens (EOS counted).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import admissible_mask
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["a", "abcdefgh"], tok)
        >>> s = g.walk(tok.encode("a"))
        >>> int(admissible_mask(g, s, 1).sum())  # only EOS fits in one token
        1
    """
    mask = grammar.allowed(state)
    if remaining is None:
        return mask
    if remaining < 1:
        return torch.zeros_like(mask)
    groups = grammar.transitions(state)
    for k, nxt in enumerate(groups.next_states.tolist()):
        # after y, the next state needs its distance in content tokens plus EOS
        if grammar.min_tokens_to_accept(nxt) + 1 > remaining - 1:
            a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
            mask[groups.token_ids[a:b]] = False
    return mask


def no_dead_row(log_phi: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The documented fallback: if every admissible candidate has Φ̂ = 0 (or underflowed), use
    Φ̂ ≡ 1 on the admissible set (plain masking) rather than return a row of −inf.

    This happens only when the model puts zero probability on every completion (−inf logits);
    the estimate then carries no information, and a row of −inf would crash sampling.
    """
    if mask.any() and not torch.isfinite(log_phi[mask]).any():
        log_phi = log_phi.clone()
        log_phi[mask] = 0.0
    return log_phi


class PhiEstimator(ABC):
    """Base class: implement :meth:`log_phi`; :meth:`step` adds the diagnostics.

    Subclasses set ``name`` (the string ``FVOLogitsProcessor(phi=...)`` accepts) and
    ``needs_model`` (whether they run forwards of their own).
    """

    name: ClassVar[str]
    needs_model: ClassVar[bool] = False

    def __init__(self, grammar: Grammar, model: Any = None) -> None:
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be an hf_fvo.Grammar, got {type(grammar).__name__}")
        if self.needs_model and model is None:
            raise ValueError(f"the {self.name!r} estimator runs the model: pass model=")
        self.grammar = grammar
        self.model = model

    @abstractmethod
    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        """log Φ̂_t over the vocabulary (float64, −inf off the admissible set)."""

    def additive_error(self, ctx: PhiContext) -> float | None:
        """sup |Φ̂ − Φ| over A_t where known (``None`` when the estimator has no bound)."""
        return None

    def step(self, ctx: PhiContext) -> PhiStep:
        """log Φ̂ plus Φ̄_t, the dispersion and δ_t for one position."""
        log_phi = self.log_phi(ctx)
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)
        width = log_phi.shape[0]
        admissible = torch.isfinite(log_phi)
        lp = logp[:width][admissible]
        lf = log_phi[admissible]
        delta = self.additive_error(ctx)
        if len(lf) == 0:
            return PhiStep(log_phi, PhiDiagnostics(0.0, 0.0, delta))
        mean = torch.exp(torch.logsumexp(lp + lf, 0) - torch.logsumexp(lp, 0)).item()
        return PhiStep(log_phi, PhiDiagnostics(mean, (lf.max() - lf.min()).item(), delta))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.grammar.source})"
