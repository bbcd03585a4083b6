"""Sampled-vs-exact statistics: empirical TV, its bootstrap CI, and the null distribution.

Thresholds for statistical tests come from the null: the TV between N draws from the exact law
and the law itself, whose percentiles say how large a TV sampling noise alone produces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from hf_fvo.eval.laws import TerminalLaw

__all__ = [
    "bootstrap_tv_ci",
    "empirical_law",
    "empirical_tv",
    "null_tv_percentiles",
    "two_sample_null_tv",
    "two_sample_tv",
]


def empirical_law(samples: Sequence[tuple[int, ...]]) -> TerminalLaw:
    """Relative frequencies of the sampled sequences."""
    counts = Counter(samples)
    return TerminalLaw({k: c / len(samples) for k, c in counts.items()})


def empirical_tv(samples: Sequence[tuple[int, ...]], law: TerminalLaw) -> float:
    """TV between the samples' empirical law and ``law``.

    Example:
        >>> from hf_fvo.eval import TerminalLaw, empirical_tv
        >>> empirical_tv([(1,), (1,), (2,), (2,)], TerminalLaw({(1,): 0.5, (2,): 0.5}))
        0.0
    """
    return empirical_law(samples).tv(law)


def null_tv_percentiles(
    law: TerminalLaw, n: int, q: Sequence[float] = (0.95, 0.99), reps: int = 500, seed: int = 0
) -> list[float]:
    """Percentiles of TV(empirical law of ``n`` draws from ``law``, ``law``).

    Example:
        >>> from hf_fvo.eval import TerminalLaw, null_tv_percentiles
        >>> p95, p99 = null_tv_percentiles(TerminalLaw({(1,): 0.5, (2,): 0.5}), n=10_000)
        >>> 0.0 < p95 < p99 < 0.05
        True
    """
    rng = np.random.default_rng(seed)
    keys = list(law.probs)
    p = np.array([law.probs[k] for k in keys])
    p = p / p.sum()
    tvs = [0.5 * np.abs(rng.multinomial(n, p) / n - p).sum() for _ in range(reps)]
    return [float(np.quantile(tvs, x)) for x in q]


def bootstrap_tv_ci(
    samples: Sequence[tuple[int, ...]],
    law: TerminalLaw,
    alpha: float = 0.05,
    reps: int = 500,
    seed: int = 0,
) -> tuple[float, float]:
    """Bootstrap (1 − alpha) interval for the TV between the samples and ``law``."""
    rng = np.random.default_rng(seed)
    samples = list(samples)
    tvs = []
    for _ in range(reps):
        idx = rng.integers(0, len(samples), len(samples))
        tvs.append(empirical_tv([samples[i] for i in idx], law))
    return float(np.quantile(tvs, alpha / 2)), float(np.quantile(tvs, 1 - alpha / 2))


def two_sample_tv(a: Sequence[tuple[int, ...]], b: Sequence[tuple[int, ...]]) -> float:
    """TV between the empirical laws of two samples.

    Example:
        >>> from hf_fvo.eval.stats import two_sample_tv
        >>> two_sample_tv([(1,), (2,)], [(1,), (1,)])
        0.5
    """
    return empirical_law(a).tv(empirical_law(b))


def two_sample_null_tv(
    a: Sequence[tuple[int, ...]],
    b: Sequence[tuple[int, ...]],
    q: Sequence[float] = (0.95, 0.99),
    reps: int = 1000,
    seed: int = 0,
) -> list[float]:
    """Percentiles of :func:`two_sample_tv` when both samples come from one law (a permutation
    null: the pooled draws split at random into samples of the two sizes), for comparing two
    samplers where neither law is known in closed form.

    Example:
        >>> from hf_fvo.eval.stats import two_sample_null_tv
        >>> p95, p99 = two_sample_null_tv([(1,)] * 50 + [(2,)] * 50, [(1,)] * 60 + [(2,)] * 40)
        >>> 0.0 < p95 <= p99 < 0.3
        True
    """
    rng = np.random.default_rng(seed)
    pooled = list(a) + list(b)
    keys = {k: i for i, k in enumerate(dict.fromkeys(pooled))}
    codes = np.array([keys[k] for k in pooled])
    size, width = len(a), len(keys)
    tvs = []
    for _ in range(reps):
        order = rng.permutation(len(codes))
        left = np.bincount(codes[order[:size]], minlength=width) / size
        right = np.bincount(codes[order[size:]], minlength=width) / (len(codes) - size)
        tvs.append(0.5 * np.abs(left - right).sum())
    return [float(np.quantile(tvs, x)) for x in q]
