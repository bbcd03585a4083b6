"""Exact terminal laws over token sequences for finite (or budget-bounded) languages.

μ* (the sequence likelihood restricted to the language and renormalised) and μ_Φ̂ (the law of
sampling step by step from p_t·Φ̂_t, which is μ_proj for Φ̂ ≡ 1) are computed by exploring the
token trie best-first by each law's own path probability, until the unexplored mass is at most
``tol``. Each law carries that residual, so every TV it yields has a certified error bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import GrammarTooLargeError, InfiniteLanguageError, InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.phi import (
    ExactPhi,
    PhiContext,
    PhiEstimator,
    PrefixLM,
    TrieExploration,
    make_estimator,
)
from hf_fvo.phi.frontier import BestFirstFrontier

__all__ = [
    "TerminalLaw",
    "grammar_conditional_law",
    "sampling_law",
    "sampling_law_on",
    "sequence_law",
]


@dataclass(frozen=True)
class TerminalLaw:
    """Probabilities of complete token sequences (each ending with EOS).

    ``residual`` bounds the mass on sequences not listed (0 when the support was exhausted).

    Example:
        >>> from hf_fvo.eval import TerminalLaw
        >>> law = TerminalLaw({(5, 2): 0.75, (6, 2): 0.25})
        >>> law.tv(TerminalLaw({(5, 2): 0.5, (6, 2): 0.5}))
        0.25
    """

    probs: dict[Any, float]
    residual: float = 0.0
    forwards: int = 0

    @classmethod
    def from_log_weights(
        cls, logs: dict[Any, float], residual: float = 0.0, forwards: int = 0
    ) -> TerminalLaw:
        """The law proportional to ``exp(logs)`` (normalised in log space), e.g. μ* on an
        exploration's support from ``ExactPhi.root_exploration(prompt).completions()``.

        Example:
            >>> import math
            >>> from hf_fvo.eval import TerminalLaw
            >>> law = TerminalLaw.from_log_weights({(1,): math.log(3.0), (2,): 0.0})
            >>> {k: round(p, 12) for k, p in law.probs.items()}
            {(1,): 0.75, (2,): 0.25}
        """
        if not logs:
            raise InvalidArgumentError("a terminal law needs at least one sequence")
        z = np.logaddexp.reduce(np.array(list(logs.values()), dtype=np.float64))
        if not np.isfinite(z):
            raise InvalidArgumentError("every sequence has zero weight")
        return cls({k: math.exp(v - z) for k, v in logs.items()}, residual, forwards)

    def tv(self, other: TerminalLaw) -> float:
        """Total variation over the union of listed sequences (error ≤ (r₁ + r₂)/2)."""
        keys = self.probs.keys() | other.probs.keys()
        return 0.5 * sum(abs(self.probs.get(k, 0.0) - other.probs.get(k, 0.0)) for k in keys)

    def kl(self, other: TerminalLaw) -> float:
        """KL(self ‖ other) over listed sequences; ``inf`` where other lacks self's support."""
        total = 0.0
        for k, p in self.probs.items():
            if p > 0:
                q = other.probs.get(k, 0.0)
                if q <= 0:
                    return math.inf
                total += p * math.log(p / q)
        return total

    def pushforward(self, f) -> TerminalLaw:
        """The law of ``f(sequence)``, e.g. the decoded string (many token sequences, one text).

        Example:
            >>> from hf_fvo.eval import TerminalLaw
            >>> TerminalLaw({(1, 2): 0.5, (3, 2): 0.5}).pushforward(lambda s: len(s)).probs
            {2: 1.0}
        """
        out: dict = {}
        for k, p in self.probs.items():
            key = f(k)
            out[key] = out.get(key, 0.0) + p
        return TerminalLaw(out, self.residual, self.forwards)

    def expectation(self, f) -> float:
        """E[f(sequence)] over listed sequences."""
        return sum(p * f(k) for k, p in self.probs.items())

    def sample(self, n: int, generator: np.random.Generator) -> list[tuple[int, ...]]:
        """``n`` i.i.d. draws (listed sequences, renormalised)."""
        keys = list(self.probs)
        p = np.array([self.probs[k] for k in keys], dtype=np.float64)
        idx = generator.choice(len(keys), size=n, p=p / p.sum())
        return [keys[i] for i in idx]


def grammar_conditional_law(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    *,
    max_new_tokens: int | None = None,
    tol: float = 0.0,
    max_nodes: int = 100_000,
    batch_size: int = 32,
    warpers: Sequence[Any] = (),
) -> TerminalLaw:
    """μ*(x) = p(x | prompt)·1[x ∈ L] / Z, from sequence likelihoods (no Φ involved).

    With ``warpers`` (Transformers' sampling warpers, in the order ``generate`` applies them:
    temperature, top-h, top-k, top-p, min-p, typical, ε, η), p is replaced by q, the product
    of the warped conditionals (what unconstrained sampling with those settings draws):
    q(x)·1[x ∈ L] / Z, the law ``generate(particles=N, temperature=…, top_p=…)`` targets.

    Raises:
        InvalidArgumentError: a warper that reads more than the step's scores (penalties read
            the prefix: no reference law is computed for them here).

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import grammar_conditional_law
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok))
        >>> law = grammar_conditional_law(Grammar.from_choices(["yes", "no"], tok), model, (1,))
        >>> len(law.probs), round(sum(law.probs.values()), 12)
        (6, 1.0)
    """
    lm = PrefixLM.wrap(model, batch_size=batch_size)
    if warpers:
        lm = _WarpedLM(lm, warpers)
    before = lm.forwards
    # exact Φ's best-first exploration by p; its complete sequences carry their likelihoods
    exact = ExactPhi(grammar, lm, tol=tol, max_nodes=max_nodes, max_prompts=1)
    explored = exact.root_exploration(tuple(prompt), max_new_tokens)
    found = explored.completions()
    if warpers and not found:
        raise InvalidArgumentError(
            f"no member of {grammar.source} has positive probability under the warped model "
            f"({', '.join(type(w).__name__ for w in warpers)}) within the budget"
        )
    return TerminalLaw.from_log_weights(found, explored.residual, lm.forwards - before)


def sampling_law(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    phi: str | PhiEstimator = "uniform",
    *,
    max_new_tokens: int | None = None,
    tol: float = 0.0,
    max_nodes: int = 100_000,
    batch_size: int = 32,
    max_stored: int = 20_000_000,
) -> TerminalLaw:
    """The law of sampling μ̂_t ∝ p_t·Φ̂_t step by step (``"uniform"``: μ_proj), explored best
    first until the unexplored mass is at most ``tol``.

    Raises:
        GrammarTooLargeError: more than ``max_nodes`` forwards, or more than ``max_stored``
            candidate tokens kept in memory, before the unexplored mass fell to ``tol``.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import grammar_conditional_law, sampling_law
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok))
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> star = grammar_conditional_law(g, model, (1,))
        >>> from hf_fvo.phi import ExactPhi
        >>> sampling_law(g, model, (1,), ExactPhi(g, model, tol=0.0)).tv(star) < 1e-12
        True
    """
    phi = make_estimator(phi, grammar, model)
    logs, residual, forwards = _explore(
        grammar, PrefixLM.wrap(model, batch_size=batch_size), prompt, max_new_tokens, tol,
        max_nodes, phi, max_stored,
    )  # fmt: skip
    return TerminalLaw({k: math.exp(v) for k, v in logs.items()}, residual, forwards)


def sampling_law_on(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    phi: str | PhiEstimator,
    sequences: Any,
    *,
    batch_size: int = 32,
    exploration: TrieExploration | None = None,
) -> TerminalLaw:
    """The law of sampling p_t·Φ̂_t step by step, evaluated on the given complete sequences only
    (each gets the product of its step probabilities); ``residual`` is the mass it puts
    elsewhere. With ``sequences`` = μ*'s explored support, TV to μ* needs no exploration of the
    sampler's own support.

    ``exploration`` (a :class:`~hf_fvo.phi.TrieExploration` from the root after the same
    prompt) supplies p_t wherever it explored the prefix, so the law uses the very model
    probabilities that exact Φ's DP and μ* used. Without it every p_t comes from a forward,
    which in float32 reproduces an earlier forward of the same prefix only to ~1e-5 in log
    probability when the batch or the cache path differ (measured in docs/benchmarks.md).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval import grammar_conditional_law, sampling_law_on
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> from hf_fvo.phi import ExactPhi
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok))
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> star = grammar_conditional_law(g, model, (1,))
        >>> law = sampling_law_on(g, model, (1,), ExactPhi(g, model, tol=0.0), star.probs)
        >>> law.tv(star) < 1e-12 and law.residual < 1e-12
        True
    """
    lm = PrefixLM.wrap(model, batch_size=batch_size)
    phi = make_estimator(phi, grammar, model)
    if exploration is not None and (tuple(exploration.prompt) != tuple(prompt) or exploration.root):
        raise InvalidArgumentError("the exploration must start at the root after the same prompt")
    sequences = [tuple(s) for s in sequences]
    needed: dict[tuple[int, ...], set[int]] = {}
    for seq in sequences:
        for i, tok in enumerate(seq):
            needed.setdefault(seq[:i], set()).add(tok)
    nodes = {} if exploration is None else exploration.nodes
    stored = [p for p in needed if p in nodes]
    computed = sorted((p for p in needed if p not in nodes), key=len)
    step: dict[tuple[tuple[int, ...], int], float] = {}

    def keep(prefix: tuple[int, ...], row: torch.Tensor) -> None:
        state = grammar.walk(prefix)
        if state is None:
            raise InvalidArgumentError(f"the sequence prefix {prefix} leaves {grammar.source}")
        ctx = PhiContext(state, prefix, row, None, prompt)
        logp = torch.log_softmax(row[: grammar.vocab_size] + phi.log_phi(ctx), 0)
        for tok in needed[prefix]:  # keep only the needed entries: rows are vocabulary-wide
            step[(prefix, tok)] = float(logp[tok])

    for prefix in stored:
        keep(prefix, exploration.logprob_row(prefix))
    for start in range(0, len(computed), 256):  # bounded memory
        chunk = computed[start : start + 256]
        for prefix, row in zip(chunk, lm.next_logprobs(prompt, chunk), strict=True):
            keep(prefix, row)
    probs = {s: math.exp(sum(step[(s[:i], t)] for i, t in enumerate(s))) for s in sequences}
    return TerminalLaw(probs, residual=max(0.0, 1.0 - sum(probs.values())))


def sequence_law(
    model: Any, prompt: tuple[int, ...], sequences: Any, *, batch_size: int = 32
) -> TerminalLaw:
    """μ* restricted to ``sequences``: p(x | prompt) renormalised over them, from likelihoods
    alone (no grammar, no Φ); an independent reference for a law on the same support.

    Example:
        >>> from hf_fvo.eval import sequence_law
        >>> from hf_fvo.models import tiny_random_llama
        >>> law = sequence_law(tiny_random_llama(8), (1,), [(3, 2), (4, 5, 2)])
        >>> round(sum(law.probs.values()), 12)
        1.0
    """
    lm = PrefixLM.wrap(model, batch_size=batch_size)
    sequences = [tuple(s) for s in sequences]
    needed: dict[tuple[int, ...], set[int]] = {}
    for seq in sequences:
        for i, tok in enumerate(seq):
            needed.setdefault(seq[:i], set()).add(tok)
    step: dict[tuple[tuple[int, ...], int], float] = {}
    prefixes = list(needed)
    for start in range(0, len(prefixes), 256):  # bounded memory: keep only needed entries
        chunk = prefixes[start : start + 256]
        for prefix, row in zip(chunk, lm.next_logprobs(prompt, chunk), strict=True):
            for tok in needed[prefix]:
                step[(prefix, tok)] = float(row[tok])
    return TerminalLaw.from_log_weights(
        {s: sum(step[(s[:i], t)] for i, t in enumerate(s)) for s in sequences}
    )


def _explore(
    grammar: Grammar,
    lm: PrefixLM,
    prompt: tuple[int, ...],
    budget: int | None,
    tol: float,
    max_nodes: int,
    phi: PhiEstimator,
    max_stored: int = 20_000_000,
) -> tuple[dict[tuple[int, ...], float], float, int]:
    """Best-first over prefixes by the law's own path log-weight (steps ∝ p_t·Φ̂_t).

    Returns log-weights of complete sequences (EOS included), the unexplored mass (absolute:
    the law is normalised), and the number of forwards.
    """
    if budget is None and not grammar.is_finite:
        raise InfiniteLanguageError(
            f"{grammar.source} is infinite (or, as a pushdown grammar, not known to be finite): "
            "pass max_new_tokens"
        )
    eos = np.array(sorted(grammar.eos_token_ids), dtype=np.int64)
    forwards_before = lm.forwards
    frontier = BestFirstFrontier()
    done: dict[tuple[int, ...], float] = {}
    expanded = stored = 0
    log_tol = math.log(tol) if tol > 0 else -math.inf
    batch: list[tuple[float, tuple[int, ...], Any]] = [(0.0, (), grammar.initial_state)]
    while batch:
        expanded += len(batch)
        if expanded > max_nodes:
            raise GrammarTooLargeError(
                f"the terminal law needs more than max_nodes={max_nodes} forwards (unexplored "
                f"mass {math.exp(frontier.log_mass()):.3g}); raise tol"
            )
        rows = lm.next_logprobs(prompt, [p for _, p, _ in batch])
        for (weight, prefix, state), row in zip(batch, rows, strict=True):
            remaining = None if budget is None else budget - len(prefix)
            log_phi = phi.log_phi(PhiContext(state, prefix, row, remaining, prompt))
            children = torch.nonzero(torch.isfinite(log_phi)).flatten()
            step = torch.log_softmax(row[children] + log_phi[children], 0)
            toks, lps = children.numpy(), step.numpy()
            ends = np.isin(toks, eos) & np.isfinite(lps)
            for tok, lp in zip(toks[ends].tolist(), lps[ends].tolist(), strict=True):
                done[(*prefix, tok)] = weight + lp
            rest = ~np.isin(toks, eos)
            frontier.add(prefix, state, weight, toks[rest], lps[rest])
            stored += int(rest.sum())
        if stored > max_stored:
            raise GrammarTooLargeError(
                f"the terminal law needs more than max_stored={max_stored} candidate tokens in "
                f"memory (unexplored mass {math.exp(frontier.log_mass()):.3g} after {expanded} "
                "forwards); raise tol or lower max_new_tokens"
            )
        if done and frontier.log_mass() <= log_tol:
            break
        batch = []
        while len(frontier) and len(batch) < lm.batch_size:
            weight, child, parent_state, tok = frontier.pop()
            batch.append((weight, child, grammar.next_state(parent_state, tok)))
    residual = math.exp(frontier.log_mass()) if len(frontier) else 0.0
    return done, residual, lm.forwards - forwards_before


# Transformers' warpers whose output is a function of the step's scores alone
_SCORES_ONLY = (
    "TemperatureLogitsWarper",
    "TopHLogitsWarper",
    "TopKLogitsWarper",
    "TopPLogitsWarper",
    "MinPLogitsWarper",
    "TypicalLogitsWarper",
    "EpsilonLogitsWarper",
    "EtaLogitsWarper",
)


class _WarpedLM(PrefixLM):
    """``lm``'s rows after ``warpers``, renormalised: log q(· | prompt + prefix). The warpers
    act on log-probabilities, which differ from the logits by a constant per row: each of them
    is invariant to that shift after its own softmax (temperature scales it away)."""

    def __init__(self, lm: PrefixLM, warpers: Sequence[Any]) -> None:
        others = [type(w).__name__ for w in warpers if type(w).__name__ not in _SCORES_ONLY]
        if others:
            raise InvalidArgumentError(
                f"the warped law is computed for warpers that read the scores only "
                f"({', '.join(_SCORES_ONLY)}), not {', '.join(others)}"
            )
        self.__dict__.update(lm.__dict__)  # the same model, caches and counters
        self.inner, self.warpers = lm, tuple(warpers)

    def next_logprobs(
        self, prompt: Sequence[int], prefixes: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        rows = self.inner.next_logprobs(prompt, prefixes)
        self.forwards = self.inner.forwards
        if not len(rows):
            return rows
        ids = torch.empty((len(rows), 0), dtype=torch.long)
        for warper in self.warpers:
            rows = warper(ids, rows)
        return torch.log_softmax(rows, -1)
