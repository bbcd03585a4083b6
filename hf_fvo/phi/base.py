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

from hf_fvo.errors import GrammarError, InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import require_grammar

__all__ = [
    "Certificate",
    "PhiContext",
    "PhiDiagnostics",
    "PhiEstimator",
    "PhiStep",
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
    the estimator knows one, ``relative`` a relative bound ε with (1−ε)Φ ≤ Φ̂ ≤ (1+ε)Φ
    (``None`` where unknown); ``unscored`` the share of A_t's mass whose Φ̂ was not computed but
    filled in (OneStep on pushdown grammars scores the candidates that carry the mass)."""

    mean_phi: float
    dispersion: float
    delta: float | None
    relative: float | None = None
    unscored: float = 0.0

    @property
    def tv_bound(self) -> float:
        """Seed 000 Thm 7: TV(μ̂_t, μ*_t) ≤ δ/(Φ̄ − δ) when δ < Φ̄, else ``inf``. (Φ̄ is taken
        from Φ̂; the proof's Ẑ/Z_p is exactly that, so the bound holds as stated.)"""
        if self.delta is None or self.delta >= self.mean_phi:
            return math.inf
        return self.delta / (self.mean_phi - self.delta)

    @property
    def relative_tv_bound(self) -> float:
        """Seed 000 Cor. (relative Φ error): TV(μ̂_t, μ*_t) ≤ ε/(1 − ε), else ``inf``."""
        if self.relative is None or self.relative >= 1:
            return math.inf
        return self.relative / (1 - self.relative)


@dataclass(frozen=True)
class Certificate:
    """Fidelity certificate of one generated sequence: the diagnostics at each position (``None``
    where they were not kept) and the telescoped sequence bounds
    TV(μ̂^{1:T}, μ*^{1:T}) ≤ Σ_t δ_t/(Φ̄_t − δ_t) and ≤ Σ_t ε_t/(1 − ε_t) (seed 000 Thm 7 and its
    relative-error corollary; ``inf`` where a step has no bound, capped by nothing: a sum ≥ 1
    certifies nothing).

    Example:
        >>> from hf_fvo.phi import Certificate, PhiDiagnostics
        >>> cert = Certificate((PhiDiagnostics(0.5, 0.1, 0.05), PhiDiagnostics(0.8, 0.0, 0.0)))
        >>> round(cert.tv_bound, 4), cert.max_delta
        (0.1111, 0.05)
    """

    steps: tuple[PhiDiagnostics | None, ...]

    @property
    def tv_bound(self) -> float:
        return sum((math.inf if d is None else d.tv_bound) for d in self.steps)

    @property
    def relative_tv_bound(self) -> float:
        return sum((math.inf if d is None else d.relative_tv_bound) for d in self.steps)

    @property
    def unscored_mass(self) -> float:
        """The largest share of a position's admissible mass whose Φ̂ was filled in, not
        computed (0 where every candidate was scored)."""
        return max((d.unscored for d in self.steps if d is not None), default=0.0)

    @property
    def max_delta(self) -> float | None:
        """The largest δ_t, or ``None`` if some step has none."""
        deltas = [None if d is None else d.delta for d in self.steps]
        return None if any(x is None for x in deltas) else max(deltas, default=0.0)


@dataclass(frozen=True)
class PhiStep:
    """One position's estimate (log Φ̂ over the vocabulary) and its diagnostics."""

    log_phi: torch.Tensor
    diagnostics: PhiDiagnostics


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

    Subclasses set ``name`` (the string ``FVOLogitsProcessor(phi=...)`` accepts),
    ``needs_model`` (whether they run forwards of their own) and ``needs_automaton`` (whether
    they read a token automaton's state tables; the others work on every grammar backend).
    """

    name: ClassVar[str]
    needs_model: ClassVar[bool] = False
    needs_automaton: ClassVar[bool] = False

    def __init__(self, grammar: Grammar, model: Any = None) -> None:
        require_grammar(grammar)
        if self.needs_automaton and grammar.backend != "automaton":
            raise GrammarError(
                f"the {self.name!r} estimator needs a token automaton, but {grammar.source} is a "
                f"{grammar.backend} grammar; compile it with backend='automaton' (regular "
                "languages) or choose another estimator"
            )
        if self.needs_model and model is None:
            raise InvalidArgumentError(f"the {self.name!r} estimator runs the model: pass model=")
        self.grammar = grammar
        self.model = model

    @abstractmethod
    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        """log Φ̂_t over the vocabulary (float64, −inf off the admissible set)."""

    @property
    def is_masking(self) -> bool:
        """Whether Φ̂ ≡ 1 on A_t at every position (plain masking, μ_proj): the processor then
        takes masking's fast path, whose draws equal :class:`UniformPhi`'s bit for bit."""
        return False

    def additive_error(self, ctx: PhiContext) -> float | None:
        """sup |Φ̂ − Φ| over A_t where known (``None`` when the estimator has no bound)."""
        return None

    def relative_error(self, ctx: PhiContext) -> float | None:
        """ε with (1 − ε)Φ ≤ Φ̂ ≤ (1 + ε)Φ on A_t where known (``None`` otherwise)."""
        return 0.0 if self.additive_error(ctx) == 0.0 else None

    def known_law(
        self, prompt: tuple[int, ...], generated: tuple[int, ...], remaining: int | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The sampling law μ̂_t at ``generated`` where this estimator knows it without a
        forward — (candidate ids, normalised log-probabilities) — else ``None`` (the default:
        μ̂_t needs the model's p_t). Exact Φ's explored table knows it; grammar drafts propose
        from it (a draft equal to the target is accepted with probability 1)."""
        return None

    def estimate(self, ctx: PhiContext) -> tuple[torch.Tensor, float]:
        """(log Φ̂, the share of A_t's mass whose Φ̂ was filled in rather than computed)."""
        return self.log_phi(ctx), 0.0

    def step(self, ctx: PhiContext) -> PhiStep:
        """log Φ̂ plus Φ̄_t, the dispersion and δ_t for one position."""
        log_phi, unscored = self.estimate(ctx)
        width = log_phi.shape[0]
        admissible = torch.isfinite(log_phi)
        # unnormalised log p_t on A_t: Φ̄_t is a ratio of sums over A_t, the normaliser cancels
        lp = ctx.logits[:width].to(log_phi.device)[admissible].double()
        lf = log_phi[admissible]
        delta, relative = self.additive_error(ctx), self.relative_error(ctx)
        if len(lf) == 0:
            return PhiStep(log_phi, PhiDiagnostics(0.0, 0.0, delta, relative, unscored))
        mean = torch.exp(torch.logsumexp(lp + lf, 0) - torch.logsumexp(lp, 0)).item()
        spread = (lf.max() - lf.min()).item()
        return PhiStep(log_phi, PhiDiagnostics(mean, spread, delta, relative, unscored))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.grammar.source})"
