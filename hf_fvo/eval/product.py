"""Exact TV between two step-wise sampling laws under a Markov LM, without enumerating strings.

Under a Markov LM both laws move on product states (context, grammar state, tokens left), and
what separates them on a string x is the log-ratio L(x) = log μ_a(x) − log μ_b(x), accumulated
token by token. Strings that reach the same product state with the same L are interchangeable
for TV, so a forward pass over layers that keeps one group per (context, state, L) — with both
laws' masses — gives

    TV(μ_a, μ_b) = ½ Σ_{terminal groups} |mass_a − mass_b|

exactly (within a group the ratio is constant, so Σ|a − b| = |Σa − Σb|). For μ_proj against μ*
on the budget language L_{n,K} there are O(n) distinct ratios, so 6·10^8 strings take
milliseconds; when the ratios are all distinct the groups are the prefixes themselves and
``max_groups`` bounds the work.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from hf_fvo.errors import GrammarTooLargeError, InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.phi import PhiContext, PhiEstimator, make_estimator

__all__ = ["ProductComparison", "product_tv", "sampled_product_tv"]

_DIGITS = 11  # log-ratios equal to 1e-11 share a group: TV error ≤ 1e-11 × mass


@dataclass(frozen=True)
class ProductComparison:
    """TV(μ_a, μ_b) over complete sequences, and what it took."""

    tv: float
    groups: int  # largest number of groups held in one layer
    steps: int  # distinct (context, state, tokens left) at which both laws were evaluated
    seconds: float
    mass_a: float  # total terminal mass of each law (1 up to rounding)
    mass_b: float


def product_tv(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    phi_a: str | PhiEstimator = "uniform",
    phi_b: str | PhiEstimator = "exact",
    *,
    max_new_tokens: int | None = None,
    max_groups: int = 1_000_000,
) -> ProductComparison:
    """Exact TV between the laws of sampling p·Φ̂_a and p·Φ̂_b step by step under a Markov LM
    (``phi_b="exact"`` is μ*; ``phi_a="uniform"`` is μ_proj).

    Both estimators must depend on the prefix only through the product state, which holds for
    every estimator here when the model is a :class:`~hf_fvo.models.MarkovLM`.

    Raises:
        TypeError: the model is not a Markov LM.
        ValueError: an infinite language with no ``max_new_tokens``.
        GrammarTooLargeError: a layer would hold more than ``max_groups`` groups.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import product_tv
        >>> from hf_fvo.models import MarkovLM
        >>> p1, e = 0.62, 0.05  # i.i.d. Bernoulli(p1) digits; EOS (any e > 0) ends the string
        >>> lm = MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3)
        >>> g = Grammar.budget(20, 10, zero=0, one=1, eos_token_id=2, vocab_size=3)
        >>> round(product_tv(g, lm, (0,), "uniform", "exact").tv, 3)  # seed 000 Table 8
        0.67
        >>> product_tv(g, lm, (0,), "exact", "exact").tv < 1e-12
        True
    """
    max_new_tokens = _check(grammar, model, max_new_tokens, "product_tv")
    t0 = time.perf_counter()
    step = _StepLaws(grammar, model, prompt, phi_a, phi_b)
    eos = set(grammar.eos_token_ids)

    # group: (context, state, rounded log-ratio) → [mass_a, mass_b, a representative prefix]
    layer: dict[tuple[int, int, float], list[Any]] = {
        (model.context_of(prompt), grammar.initial_state, 0.0): [1.0, 1.0, ()]
    }
    terminal: dict[float, list[float]] = {}
    widest = 1
    vocab = model.config.vocab_size
    tail_mod = vocab ** (model.config.order - 1)
    for t in range(max_new_tokens):
        nxt: dict[tuple[int, int, float], list[Any]] = {}
        for (c, s, key), (ma, mb, prefix) in layer.items():
            tokens, la, lb = step(c, s, max_new_tokens - t, prefix)
            for tok, a, b in zip(tokens, la, lb, strict=True):
                child_key = _ratio_key(key, a, b)
                pa, pb = ma * math.exp(a), mb * math.exp(b)
                if tok in eos:
                    acc = terminal.setdefault(child_key, [0.0, 0.0])
                    acc[0] += pa
                    acc[1] += pb
                    continue
                group = (
                    (c % tail_mod) * vocab + tok,
                    grammar.next_state(s, tok),
                    child_key,
                )
                acc = nxt.get(group)
                if acc is None:
                    nxt[group] = [pa, pb, (*prefix, tok)]
                else:
                    acc[0] += pa
                    acc[1] += pb
        if len(nxt) > max_groups:
            raise GrammarTooLargeError(
                f"product_tv: layer {t + 1} holds {len(nxt)} groups (max_groups={max_groups}); "
                "the two laws' ratios do not collapse on this grammar"
            )
        widest = max(widest, len(nxt))
        layer = nxt
        if not layer:
            break
    tv = 0.5 * sum(abs(a - b) for a, b in terminal.values())
    return ProductComparison(
        tv=tv,
        groups=widest,
        steps=len(step.cache),
        seconds=time.perf_counter() - t0,
        mass_a=sum(a for a, _ in terminal.values()),
        mass_b=sum(b for _, b in terminal.values()),
    )


def sampled_product_tv(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    phi_a: str | PhiEstimator = "uniform",
    phi_b: str | PhiEstimator = "exact",
    *,
    samples: int = 4000,
    max_new_tokens: int | None = None,
    seed: int = 0,
) -> tuple[float, float]:
    """Monte-Carlo TV(μ_a, μ_b) = E_{x∼μ_b}[(1 − μ_a(x)/μ_b(x))₊] under a Markov LM, from
    ``samples`` draws of μ_b with both laws' exact sequence probabilities: (estimate, its
    standard error). For grammars whose laws' ratios do not collapse (a learned Φ̂ gives every
    prefix its own ratio), where :func:`product_tv` would need too many groups.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import product_tv, sampled_product_tv
        >>> from hf_fvo.models import MarkovLM
        >>> p1, e = 0.62, 0.05
        >>> lm = MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3)
        >>> g = Grammar.budget(20, 10, zero=0, one=1, eos_token_id=2, vocab_size=3)
        >>> tv, se = sampled_product_tv(g, lm, (0,), samples=2000)
        >>> abs(tv - product_tv(g, lm, (0,)).tv) < 4 * se
        True
    """
    import numpy as np

    max_new_tokens = _check(grammar, model, max_new_tokens, "sampled_product_tv")
    step = _StepLaws(grammar, model, prompt, phi_a, phi_b)
    eos = set(grammar.eos_token_ids)
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    tail_mod = vocab ** (model.config.order - 1)
    gaps = np.empty(samples)
    for i in range(samples):
        c, s, prefix, log_ratio = model.context_of(prompt), grammar.initial_state, (), 0.0
        for t in range(max_new_tokens):
            tokens, la, lb = step(c, s, max_new_tokens - t, prefix)
            pb = np.exp(np.array(lb))
            j = int(rng.choice(len(tokens), p=pb / pb.sum()))
            tok, log_ratio = tokens[j], log_ratio + la[j] - lb[j]
            if tok in eos:
                break
            c, s, prefix = (c % tail_mod) * vocab + tok, grammar.next_state(s, tok), (*prefix, tok)
        gaps[i] = max(0.0, 1.0 - math.exp(log_ratio))
    return float(gaps.mean()), float(gaps.std(ddof=1) / math.sqrt(samples))


def _check(grammar: Grammar, model: Any, max_new_tokens: int | None, who: str) -> int:
    from hf_fvo.models.markov import MarkovLM

    if not isinstance(model, MarkovLM):
        raise InvalidArgumentError(
            f"{who} needs an hf_fvo.models.MarkovLM, got {type(model).__name__}"
        )
    if max_new_tokens is None:
        longest = grammar.max_tokens_to_accept(grammar.initial_state)
        if longest is None:
            raise InvalidArgumentError(f"{grammar.source} is infinite: pass max_new_tokens")
        max_new_tokens = longest + 1
    return max_new_tokens


class _StepLaws:
    """Both laws' step distributions at a product state (context, state, tokens left), cached:
    (support, log μ_a steps, log μ_b steps)."""

    def __init__(self, grammar: Grammar, model: Any, prompt: tuple[int, ...],
                 phi_a: str | PhiEstimator, phi_b: str | PhiEstimator) -> None:  # fmt: skip
        self.estimators = (make_estimator(phi_a, grammar, model),
                           make_estimator(phi_b, grammar, model))  # fmt: skip
        self.log_p = model.log_probs.detach().double()
        self.prompt = tuple(prompt)
        self.cache: dict[tuple[int, Any, int], tuple[list[int], list[float], list[float]]] = {}

    def __call__(self, c: int, s: Any, r: int, generated: tuple[int, ...]):
        key = (c, s, r)
        if key not in self.cache:
            row = self.log_p[c]
            laws = []
            for est in self.estimators:
                log_phi = est.log_phi(PhiContext(s, generated, row, r, self.prompt))
                laws.append(torch.log_softmax(row[: log_phi.shape[0]] + log_phi, 0))
            support = torch.nonzero(torch.isfinite(laws[0]) | torch.isfinite(laws[1])).flatten()
            self.cache[key] = (support.tolist(), laws[0][support].tolist(),
                               laws[1][support].tolist())  # fmt: skip
        return self.cache[key]


def _ratio_key(key: float, a: float, b: float) -> float:
    if math.isinf(key):
        return key
    diff = a - b
    if math.isinf(diff) or math.isnan(diff):
        return math.inf if a > b else -math.inf
    return round(key + diff, _DIGITS)
