"""Does local masking bias *this* grammar under *this* model? An audit.

For a finite language (small enough to explore) the exact laws answer it: TV(μ_proj, μ*) over the
texts a user sees, and which texts masking over- and under-produces, next to the frequencies of
FVO samples (exact Φ). Otherwise it is sampled: masked draws against Φ̂-reweighted draws (TV with
a permutation null), plus the per-step survival spread Γ_t = Φ̂max/Φ̂min along the Φ̂ draws, which
bounds the one-step distortion of masking, KL(μ*_t ‖ μ_proj,t) ≤ log Γ_t (seed 001 Prop. 4; here
with Φ̂ in place of Φ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import GrammarTooLargeError, InvalidArgumentError
from hf_fvo.eval.laws import TerminalLaw, sampling_law
from hf_fvo.generation import generate
from hf_fvo.generation.particles import ParticleReport, sample_particles
from hf_fvo.grammar import Grammar
from hf_fvo.phi import ExactPhi, PrefixLM

__all__ = ["AuditReport", "Branch", "audit"]


@dataclass(frozen=True)
class Branch:
    """One text of the language: its probability under masking (μ_proj), the intended law (μ*),
    and its frequency among FVO samples (``None`` when none were drawn)."""

    text: str
    proj: float
    star: float
    fvo: float | None = None

    @property
    def ratio(self) -> float:
        """μ_proj / μ*: > 1 where masking over-produces the text."""
        return self.proj / self.star if self.star > 0 else math.inf


@dataclass
class AuditReport:
    """What :func:`audit` found; ``exact`` says which of the two halves is filled."""

    grammar: str
    exact: bool
    tv: float  # TV(μ_proj, μ*) over texts (exact), or TV(masked draws, Φ̂ draws) (sampled)
    tv_tokens: float | None = None  # exact only: over token sequences
    residual: float = 0.0  # exact only: certified unexplored mass of the two laws
    branches: list[Branch] = field(default_factory=list)
    samples: int = 0
    null_p95: float | None = None  # sampled only: permutation null of the TV
    phi: str = "exact"
    log_gamma: list[float] = field(default_factory=list)  # sampled only: per-step log Γ̂_t
    particles: ParticleReport | None = None  # one particle run's log Ẑ and ESS, when asked

    def over_produced(self, n: int = 3) -> list[Branch]:
        """Texts masking samples most in excess of μ* (largest μ_proj − μ*)."""
        return sorted(self.branches, key=lambda b: b.star - b.proj)[:n]

    def under_produced(self, n: int = 3) -> list[Branch]:
        """Texts masking samples least relative to μ* (largest μ* − μ_proj)."""
        return sorted(self.branches, key=lambda b: b.proj - b.star)[:n]

    def summary(self) -> str:
        """A few lines for a terminal."""
        if self.exact:
            over = [b for b in self.over_produced() if b.proj > b.star]
            under = [b for b in self.under_produced() if b.proj < b.star]
            lines = [
                f"{self.grammar}: TV(μ_proj, μ*) over texts = {self.tv:.4f} "
                f"(over token sequences {self.tv_tokens:.4f}; certified to ±{self.residual:.0e})",
                "masking over-produces: " + _listing(over),
                "masking under-produces: " + _listing(under),
            ]
            return "\n".join(lines + self._particle_lines())
        gamma = np.array(self.log_gamma) if self.log_gamma else np.zeros(1)
        return "\n".join([
            f"{self.grammar}: sampled audit ({self.samples} masked vs {self.samples} Φ̂={self.phi} "
            f"draws): TV = {self.tv:.4f} (permutation null p95 {self.null_p95:.4f})",
            f"per-step survival spread along the Φ̂ draws: mean log Γ̂ = {gamma.mean():.3f}, max "
            f"{gamma.max():.3f} (one-step KL(μ*‖μ_proj) ≤ log Γ, seed 001 Prop. 4)",
            *self._particle_lines(),
        ])  # fmt: skip

    def _particle_lines(self) -> list[str]:
        r = self.particles
        if r is None:
            return []
        return [
            f"particles (N={r.particles}, the masked proposal): log Ẑ = {r.log_z:.3f}, so "
            f"Pr[a valid output within the budget] ≈ {math.exp(r.log_z):.3g}; smallest ESS "
            f"{r.min_ess:.1f} of {r.particles}, {r.resamplings} resampling(s)"
        ]


def audit(
    model: Any,
    tokenizer: Any,
    grammar: Grammar,
    prompt: tuple[int, ...],
    *,
    max_new_tokens: int = 64,
    tol: float = 1e-6,
    max_nodes: int = 20_000,
    samples: int = 200,
    phi: str = "onestep",
    seed: int = 0,
    particles: int = 0,
) -> AuditReport:
    """Audit local masking on ``grammar`` after ``prompt``: exactly when the language is finite
    and its trie explores within ``max_nodes`` forwards at ``tol``, else by sampling ``samples``
    masked and ``samples`` Φ̂-reweighted generations.

    With the exact laws, ``samples`` FVO draws (exact Φ) add each text's sampled frequency.
    ``particles`` > 0 adds one run of that many particles (masked proposal): its log Ẑ
    estimates how likely the model is to write a valid output within the budget unaided, and
    its ESS how far masking's proposal is from μ*.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import audit
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok), eos_token_id=2, sharpness=4.0)
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> report = audit(model, tok, g, (1, 5), samples=0)
        >>> report.exact, sorted(b.text for b in report.branches)
        (True, ['no', 'yes'])
    """

    text = lambda seq: tokenizer.decode(  # noqa: E731
        [t for t in seq if t not in grammar.eos_token_ids], skip_special_tokens=True
    )
    ids = torch.tensor([prompt])
    torch.manual_seed(seed)
    report = _audit(model, grammar, prompt, ids, text, max_new_tokens, tol, max_nodes, samples,
                    phi, seed)  # fmt: skip
    if particles:
        torch.manual_seed(seed)
        found = sample_particles(model, ids, grammar=grammar, particles=particles,
                                 max_new_tokens=max_new_tokens)  # fmt: skip
        report.particles = found.report
    return report


def _audit(
    model: Any,
    grammar: Grammar,
    prompt: tuple[int, ...],
    ids: torch.Tensor,
    text: Any,
    max_new_tokens: int,
    tol: float,
    max_nodes: int,
    samples: int,
    phi: str,
    seed: int,
) -> AuditReport:
    """The audit itself (exact or sampled); :func:`audit` adds the particle run."""
    if grammar.is_finite:
        lm = PrefixLM(model, batch_size=32, cache_rows=20_000)
        exact = ExactPhi(grammar, lm, tol=tol, max_nodes=max_nodes)
        try:
            explored = exact.root_exploration(prompt)  # μ* and exact Φ from one exploration
            star = TerminalLaw.from_log_weights(explored.completions(), explored.residual)
            proj = sampling_law(grammar, lm, prompt, "uniform", tol=tol, max_nodes=max_nodes)
        except GrammarTooLargeError:
            pass  # too many token sequences to explore: audit by sampling instead
        else:
            star_t, proj_t = star.pushforward(text), proj.pushforward(text)
            freq: dict[str, float] = {}
            if samples:
                for seq in _draws(model, ids, grammar, exact, samples, max_new_tokens):
                    freq[text(seq)] = freq.get(text(seq), 0.0) + 1.0 / samples
            branches = [
                Branch(k, proj_t.probs.get(k, 0.0), v, freq.get(k, 0.0) if samples else None)
                for k, v in sorted(star_t.probs.items(), key=lambda kv: -kv[1])
            ]
            return AuditReport(
                grammar=grammar.source, exact=True, tv=proj_t.tv(star_t), tv_tokens=proj.tv(star),
                residual=(star.residual + proj.residual) / 2, branches=branches, samples=samples,
            )  # fmt: skip
    if samples < 2:
        raise InvalidArgumentError("a sampled audit needs samples ≥ 2")
    masked = [text(s) for s in _draws(model, ids, grammar, "uniform", samples,
                                      max_new_tokens)]  # fmt: skip
    out = generate(model, ids.expand(samples, -1), grammar=grammar, phi=phi,
                   max_new_tokens=max_new_tokens, do_sample=True, top_k=0,
                   return_dict_in_generate=True)  # fmt: skip
    rows = out.sequences[:, len(prompt) :].tolist()
    reweighted = [text(r) for r in rows]
    log_gamma = [d.dispersion for c in out.certificates for d in c.steps if d is not None]
    tv, p95 = _two_sample_tv(masked, reweighted, np.random.default_rng(seed))
    return AuditReport(grammar=grammar.source, exact=False, tv=tv, samples=samples,
                       null_p95=p95, phi=phi, log_gamma=log_gamma)  # fmt: skip


def _listing(branches: list[Branch]) -> str:
    return ", ".join(f"{b.text!r} {b.proj:.3f} vs {b.star:.3f}" for b in branches) or "nothing"


def _draws(model, ids, grammar, phi, n: int, max_new_tokens: int) -> list[list[int]]:
    out = generate(model, ids.expand(n, -1), grammar=grammar, phi=phi,
                   max_new_tokens=max_new_tokens, do_sample=True, top_k=0)  # fmt: skip
    return out[:, ids.shape[1] :].tolist()


def _two_sample_tv(a: list[str], b: list[str], rng: np.random.Generator) -> tuple[float, float]:
    """TV between two samples' empirical laws and the 95th percentile of its permutation null."""

    def tv(x: list[str], y: list[str]) -> float:
        keys = set(x) | set(y)
        cx = {k: 0 for k in keys}
        cy = dict(cx)
        for k in x:
            cx[k] += 1
        for k in y:
            cy[k] += 1
        return 0.5 * sum(abs(cx[k] / len(x) - cy[k] / len(y)) for k in keys)

    pooled = a + b
    null = []
    for _ in range(200):
        perm = rng.permutation(len(pooled))
        null.append(tv([pooled[i] for i in perm[: len(a)]], [pooled[i] for i in perm[len(a) :]]))
    return tv(a, b), float(np.quantile(null, 0.95))
