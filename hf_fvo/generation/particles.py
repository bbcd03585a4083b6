"""Φ̂-twisted sequential Monte Carlo: N particles whose weighted set targets μ*_B exactly.

Each particle proposes from the Φ̂-reweighted masked law on the budget-exact admissible set,
q_t(y) = p_t(y)·Φ̂_t(y) / Z_t with Z_t = Σ_{y∈A_t} p_t(y)·Φ̂_t(y), and carries the incremental
weight w_t = Z_t / Φ̂_{t−1}(x_{t−1}) (Φ̂_0 = 1), the same Φ̂ values its proposal used, so random
estimators stay properly weighted. At EOS the particle divides once more by Φ̂_T(EOS), so its
final weight is p(x)·1[x ∈ L_B] / q(x) exactly, whatever Φ̂ was: the weighted particle set
targets μ*_B = p(x)·1[x ∈ L_B]/Z_B for every estimator, and Φ̂ decides only how many particles
suffice (exact Φ: every weight after the first is 1 and the effective sample size stays N).
When the effective sample size falls below ``ess_threshold``·N the particles are resampled
(systematic), their caches reordered by index. The mean weight telescopes to log Ẑ, an
unbiased estimate of Z_B = Pr_p[a valid output within the budget].

All N particles of a prompt advance in one batched forward per step. With the masked proposal
(``phi="uniform"``) and a grammar that decides A_t token by token far from the end of the
budget (:meth:`~hf_fvo.grammar.Grammar.lazy_admissible`: pushdown grammars), a particle checks
its draws instead of building A_t, and carries an unbiased estimate of p_t(A_t) as its weight
(:func:`_lazy_draw`): the same target, at a fraction of the grammar's work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hf_fvo.errors import (
    CheckFailedError,
    ConstraintConflictError,
    InvalidArgumentError,
    check_int,
)
from hf_fvo.generation.tracker import RowTracker
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import LazyAdmissible, require_grammar
from hf_fvo.phi import PhiContext, PhiEstimator, make_estimator

__all__ = ["ParticleReport", "ParticleSet", "effective_sample_size", "sample_particles"]

Scores = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_TRIALS = 8  # draws checked token by token before a lazily decided A_t is resolved whole


@dataclass(frozen=True)
class ParticleReport:
    """What one particle run says about its prompt and grammar.

    Attributes:
        particles: N.
        log_z: log Ẑ, the log of an unbiased estimate of Z_B = Pr_p[a valid output within the
            budget] (how hard the constraint fights the model; −inf if no particle finished).
        ess: The effective sample size before each step's resampling decision.
        resamplings: How many steps resampled.
    """

    particles: int
    log_z: float
    ess: tuple[float, ...]
    resamplings: int

    @property
    def min_ess(self) -> float:
        """The smallest effective sample size over the steps (N when none was taken)."""
        return min(self.ess, default=float(self.particles))


@dataclass(frozen=True)
class ParticleSet:
    """The final weighted particles of one prompt.

    Attributes:
        sequences: (N, prompt + new) token ids, each ending in EOS, padded with EOS after it.
        log_weights: (N,) float64, normalised (their exps sum to 1).
        report: log Ẑ, ESS per step, resamplings.
    """

    sequences: torch.Tensor
    log_weights: torch.Tensor
    report: ParticleReport

    def draw(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Indices of ``count`` particles drawn with replacement by weight."""
        probs = self.log_weights.exp()
        return torch.multinomial(probs, count, replacement=True, generator=generator)


def effective_sample_size(log_weights: torch.Tensor) -> float:
    """(Σw)² / Σw² of unnormalised log weights (0 when every weight is 0).

    Example:
        >>> import torch
        >>> from hf_fvo.generation.particles import effective_sample_size
        >>> round(effective_sample_size(torch.zeros(8)), 9)
        8.0
        >>> round(effective_sample_size(torch.tensor([0.0, -1e9])), 9)
        1.0
    """
    if not bool(torch.isfinite(log_weights).any()):
        return 0.0
    lw = log_weights.double()
    return math.exp(2 * torch.logsumexp(lw, 0).item() - torch.logsumexp(2 * lw, 0).item())


def systematic_resample(log_weights: torch.Tensor, generator: torch.Generator | None = None):
    """N indices by systematic resampling of the normalised weights (one uniform draw)."""
    n = len(log_weights)
    probs = torch.softmax(log_weights.double(), 0)
    u = (torch.rand((), generator=generator, dtype=torch.float64) + torch.arange(n)) / n
    cum = torch.cumsum(probs, 0)
    cum[-1] = 1.0  # rounding must not push the last point past the end
    return torch.searchsorted(cum, u).clamp_(max=n - 1)


def sample_particles(
    model: Any,
    input_ids: torch.Tensor,
    *,
    grammar: Grammar,
    particles: int,
    max_new_tokens: int,
    phi: str | PhiEstimator = "uniform",
    scores: Scores | None = None,
    ess_threshold: float = 0.5,
    prompt_length: int | None = None,
) -> ParticleSet:
    """Run N Φ̂-twisted particles from one prompt to EOS within ``max_new_tokens``.

    Args:
        model: A Transformers causal LM (a ``DynamicCache`` model; Markov LMs included).
        input_ids: The prompt, shape (1, L): one row, no padding.
        grammar: The compiled grammar.
        particles: N ≥ 1.
        max_new_tokens: The budget B (EOS counted): every particle ends inside L_B.
        phi: The twist Φ̂: an estimator name or instance (``"uniform"``: the masked proposal).
        scores: ``scores(input_ids, logits) -> logits`` applied before p_t is taken (the
            call's other logits processors: temperature, penalties); default: none (p_t is the
            model's softmax).
        ess_threshold: Resample when the effective sample size falls below this share of N
            (0 never resamples, 1 always).
        prompt_length: Columns of ``input_ids`` before the grammar's text (default: all; the
            rest is a continuation the grammar resumes from).

    Returns:
        The :class:`ParticleSet`: sequences, normalised log weights, and the report.

    Raises:
        InvalidArgumentError: a malformed argument.
        BudgetTooSmallError: no member fits ``max_new_tokens`` (``BudgetUndecidedError``
            where hf_fvo can show neither that one fits nor that none does).
        ConstraintConflictError: every particle reached a position where nothing admissible
            has positive probability under p_t (another processor removed it).

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.particles import sample_particles
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> model = tiny_random_llama(len(tok))
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> out = sample_particles(model, torch.tensor([[1]]), grammar=g, particles=4,
        ...                        max_new_tokens=4)
        >>> sorted({tok.decode(s[1:].tolist(), skip_special_tokens=True) for s in out.sequences})
        ['no', 'yes']
        >>> round(float(out.log_weights.exp().sum()), 9)
        1.0
    """
    require_grammar(grammar)
    n = check_int("particles", particles, minimum=1)
    budget = check_int("max_new_tokens", max_new_tokens, minimum=1)
    if not isinstance(ess_threshold, (int, float)) or not 0.0 <= ess_threshold <= 1.0:
        raise InvalidArgumentError(f"ess_threshold must lie in [0, 1], got {ess_threshold!r}")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise InvalidArgumentError("input_ids must be one prompt of shape (1, length)")
    width = input_ids.shape[1]
    start = width if prompt_length is None else check_int("prompt_length", prompt_length)
    if start > width:
        raise InvalidArgumentError(f"prompt_length={start} exceeds the input's width {width}")
    estimator = make_estimator(phi, grammar, model)
    rows = RowTracker(grammar, prompt_length=start, max_new_tokens=budget)
    rows.begin(input_ids.expand(n, -1))
    prompt = tuple(input_ids[0, :start].tolist())
    given = tuple(input_ids[0, start:].tolist())
    eos = grammar.eos_token_ids
    device = input_ids.device

    from transformers import DynamicCache

    cache = DynamicCache()
    forward = _forward(model, cache)
    logits = forward(input_ids)
    cache.batch_repeat_interleave(n)
    logits = logits.expand(n, -1)
    sequences = input_ids.expand(n, -1).clone()
    generated: list[tuple[int, ...]] = [given] * n
    done = [rows.is_finished(given)] * n
    log_w = torch.zeros(n, dtype=torch.float64)  # since the last resampling
    prev = torch.zeros(n, dtype=torch.float64)  # log Φ̂_{t−1}(x_{t−1})
    log_z, ess_trace, resamplings = 0.0, [], 0
    failed: list[str] = []  # what the final check said of particles it gave weight 0
    for step in range(budget):
        if all(done):
            break
        if scores is not None:
            logits = scores(sequences, logits)
        logits = logits.cpu()
        lse = torch.logsumexp(logits.double(), dim=-1)  # log p_t = logits − lse
        nxt = torch.full((n,), eos[0], dtype=torch.long)
        support: dict[tuple[int, int | None], torch.Tensor] = {}  # A_t per state, this step
        for i in range(n):
            if done[i]:
                continue
            state, remaining = rows.state(generated[i]), rows.remaining(len(generated[i]))
            lazy = grammar.lazy_admissible(state, remaining) if estimator.is_masking else None
            if lazy is not None:
                y, z = _lazy_draw(lazy, logits[i], lse[i])
                log_phi_y = 0.0
            else:
                ids, log_phi, twisted = _proposal(estimator, grammar, state, remaining,
                                                  generated[i], logits[i], lse[i], prompt,
                                                  support)  # fmt: skip
                z = _log_mass(twisted)
                if z > -math.inf:
                    k = int(torch.multinomial(torch.softmax(twisted, 0), 1))
                    y, log_phi_y = int(ids[k]), float(log_phi[k])
            if z == -math.inf:
                log_w[i] = -math.inf  # nothing admissible has positive probability: dies
                done[i] = True
                continue
            log_w[i] += z - prev[i]
            prev[i] = log_phi_y
            nxt[i] = y
            generated[i] = (*generated[i], y)
            if y in eos:
                log_w[i] -= prev[i]  # Φ̂_T(EOS): the final weight is p(x)/q(x)
                done[i] = True
                failure = grammar.check(generated[i][:-1]) if grammar.checked else None
                if failure is not None:  # outside L: weight 0 (exact μ*, the check decides)
                    log_w[i] = -math.inf
                    failed.append(failure)
        if failed and not bool(torch.isfinite(log_w).any()):
            raise CheckFailedError(
                f"all {n} particles failed the final check of {grammar.source}; the last: "
                f"{failed[-1]}"
            )
        if not bool(torch.isfinite(log_w).any()):
            if step == 0:  # at the first step: a budget no member
                refusal = grammar.budget_refusal(  # fits is named as generate() names it
                    rows.state(given), rows.remaining(len(given)), f"max_new_tokens={budget}"
                )
                if refusal is not None:
                    raise refusal
            raise ConstraintConflictError(
                f"every particle reached a position where no token {grammar.source} admits "
                "has positive probability under the model's (processed) scores: a logits "
                "processor or warper removed them (top_k, top_p, a penalty…)"
            )
        sequences = torch.cat([sequences, nxt.to(device)[:, None]], dim=1)
        ess = effective_sample_size(log_w)
        ess_trace.append(ess)
        if ess < ess_threshold * n and not all(done):
            idx = systematic_resample(log_w)
            log_z += torch.logsumexp(log_w, 0).item() - math.log(n)
            log_w = torch.zeros(n, dtype=torch.float64)
            prev = prev[idx]
            sequences = sequences[idx.to(device)]
            generated = [generated[j] for j in idx.tolist()]
            done = [done[j] for j in idx.tolist()]
            cache.reorder_cache(idx.to(device))
            resamplings += 1
        if all(done):
            break
        logits = forward(sequences[:, -1:])
    unfinished = [i for i in range(n) if not done[i]]
    if unfinished:  # budget-exact admissible sets end every particle within B
        raise ConstraintConflictError(
            f"internal: {len(unfinished)} particle(s) did not end within {budget} tokens"
        )
    log_z += torch.logsumexp(log_w, 0).item() - math.log(n)
    norm = log_w - torch.logsumexp(log_w, 0)
    report = ParticleReport(n, log_z, tuple(ess_trace), resamplings)
    return ParticleSet(sequences, norm, report)


def _lazy_draw(
    lazy: LazyAdmissible, logits: torch.Tensor, lse: torch.Tensor, trials: int = _TRIALS
) -> tuple[int, float]:
    """One masked proposal (uniform twist) where the grammar decides A_t token by token:
    a token y ~ p_t restricted to A_t and the log of a weight whose expectation is
    Z_t = p_t(A_t).

    Draws from p_t on the superset are checked in turn until two are members; with N draws
    then, the first member is distributed as p_t restricted to A_t and Z/(N − 1) estimates
    Z_t = Z·r without bias (Z: the superset's mass; r = Z_t/Z; N − 1 given N ~ negative
    binomial, E[1/(N − 1)] = r), independently of which member was drawn, so the particle
    stays properly weighted. After ``trials`` draws with fewer than two members the set is
    resolved (r known) and the weight is Z·E[1/(N − 1) | N > trials] = Z·r/(1 − r + trials·r),
    keeping the expectation Z_t. Returns (y, log weight); the weight is −inf when A_t has no
    mass."""
    ids = lazy.superset.nonzero()[:, 0]
    log_p = logits[ids].double() - lse
    z = _log_mass(log_p)
    if z == -math.inf:
        return -1, -math.inf
    drawn = ids[torch.multinomial(torch.softmax(log_p, 0), trials, replacement=True)].tolist()
    members = []
    for k, y in enumerate(drawn):
        if lazy.admits(y):
            members.append(y)
            if len(members) == 2:
                return members[0], z - math.log(k)  # N − 1 = k draws before the second
    full = lazy.resolve().nonzero()[:, 0]
    log_pa = logits[full].double() - lse
    za = _log_mass(log_pa)
    if za == -math.inf:
        return -1, -math.inf
    r = min(1.0, math.exp(za - z))
    y = members[0] if members else int(full[torch.multinomial(torch.softmax(log_pa, 0), 1)])
    return y, z + math.log(r / (1.0 - r + trials * r))


def _log_mass(log_p: torch.Tensor) -> float:
    """log Σ exp(log_p) (−inf for none)."""
    return torch.logsumexp(log_p, 0).item() if len(log_p) else -math.inf


def _proposal(
    estimator: PhiEstimator,
    grammar: Grammar,
    state: Any,
    remaining: int,
    generated: tuple[int, ...],
    logits: torch.Tensor,
    lse: torch.Tensor,
    prompt: tuple[int, ...],
    support: dict[tuple[int, int | None], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One particle's proposal on A_t (within its remaining budget): the candidate ids, their
    log Φ̂_t, and log p_t + log Φ̂_t (p_t = softmax of ``logits``, whose log-normaliser is
    ``lse``). A_t is kept in ``support`` per state for the step.

    The candidates are all of A_t whatever the twist says: a twist that vanishes on an
    admissible token (a rollout estimate with no success) would keep the proposal off a part
    of μ*'s support and bias the particle set, so such tokens take the smallest positive Φ̂ on
    A_t (1 if there is none); every weight uses the values proposed with."""
    key = (id(state), remaining)
    if key not in support:
        support[key] = grammar.admissible(state, remaining).nonzero()[:, 0]
    ids = support[key]
    if estimator.is_masking:  # Φ̂ ≡ 1 on A_t
        log_phi = torch.zeros(len(ids), dtype=torch.float64)
    else:
        full = estimator.log_phi(PhiContext(state, generated, logits, remaining, prompt))
        log_phi = full[ids].double()
        dead = ~torch.isfinite(log_phi)
        if bool(dead.any()):
            alive = log_phi[~dead]
            log_phi[dead] = alive.min() if len(alive) else 0.0
    return ids, log_phi, logits[ids].double() - lse + log_phi


def _forward(model: Any, cache: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The next-token logits of new tokens, through ``cache`` (Transformers ≥ 5.24 names the
    argument ``cache``; earlier versions and Markov LMs ``past_key_values``)."""
    import inspect

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def forward(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(ids, use_cache=True, **{name: cache}).logits[:, -1]

    return forward
