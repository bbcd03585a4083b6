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

The live particles of a prompt advance in one batched forward per step: the prompt's keys and
values are held once for all of them where the model allows
(:class:`~hf_fvo.models.shared_prefix.SharedPrefixCache`), and a particle that has ended
leaves the batch. This module is the controller (weights, resampling, the cache, the report);
how a step draws the particles' tokens is a proposal (:mod:`hf_fvo.generation.proposals`): the
masked one for ``phi="uniform"`` (the grammar asked once per distinct state and budget, every
row masked and drawn at once, lazily decided sets checked draw by draw with an unbiased
weight, spelled-out text fed ahead), the Φ̂-twisted one otherwise.
:attr:`ParticleReport.seconds` says where the time went.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from hf_fvo.errors import (
    CheckFailedError,
    ConstraintConflictError,
    InvalidArgumentError,
    check_int,
)
from hf_fvo.generation.proposals import proposal_for
from hf_fvo.generation.tracker import RowTracker
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.interface import require_grammar
from hf_fvo.models.cache import cache_argument
from hf_fvo.models.shared_prefix import SharedPrefixCache, shared_prefix, shared_prefix_supported
from hf_fvo.phi import PhiEstimator, make_estimator

__all__ = [
    "AutoParticles",
    "ParticleReport",
    "ParticleSet",
    "effective_sample_size",
    "sample_particles",
]

Scores = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_MAX_RUN = 8  # most spelled-out tokens a particle feeds after its last one in a forward


@dataclass(frozen=True)
class ParticleReport:
    """What one particle run says about its prompt and grammar.

    Attributes:
        particles: N.
        log_z: log Ẑ, the log of an unbiased estimate of Z_B = Pr_p[a valid output within the
            budget] (how hard the constraint fights the model; −inf if no particle finished).
        ess: The effective sample size before each step's resampling decision.
        resamplings: How many steps resampled.
        seconds: Wall seconds per phase: ``forward`` (the model), ``grammar`` (masks, draws,
            weights), ``resampling`` (indices, copies, the cache's rows).
        tokens_per_forward: Tokens a particle took per forward it was in (above 1 where
            the runs the grammar spells out were scored in the forward before them).
        positions: The most new tokens any particle held (EOS included; a particle
            dropped by a resampling counts): the run lasted that many positions.
        runs: With ``particles="auto"``, each run's own report (the N it chose: their sum);
            the pooled report's ``ess`` is the runs' traces one after another.
    """

    particles: int
    log_z: float
    ess: tuple[float, ...]
    resamplings: int
    seconds: tuple[tuple[str, float], ...] = ()
    tokens_per_forward: float = 1.0
    positions: int = 0
    runs: tuple[ParticleReport, ...] = ()

    @property
    def min_ess(self) -> float:
        """The smallest effective sample size over the steps (N when none was taken); for
        pooled runs (``particles="auto"``) the sum of the runs' smallest."""
        if self.runs:
            return sum(run.min_ess for run in self.runs)
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


@dataclass(frozen=True)
class AutoParticles:
    """How ``particles="auto"`` chooses N: independent runs of ``start``, 2·``start``, …
    particles are pooled (each run's particles weighted by its N·Ẑ, so the pool targets μ*_B
    as each run does) until the runs' smallest effective sample sizes add up to
    ``min_ess``, the next run would pass ``largest`` particles, or (with ``seconds``) the
    next run, guessed at twice the last, would end after that many seconds.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.particles import AutoParticles, sample_particles
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> model = tiny_random_llama(len(tok))
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> out = sample_particles(model, torch.tensor([[1]]), grammar=g, max_new_tokens=4,
        ...                        particles=AutoParticles(min_ess=4, start=2))
        >>> sizes = [run.particles for run in out.report.runs]  # 2, 4, 8… until enough
        >>> sizes[:2], out.report.particles == sum(sizes), out.report.min_ess >= 4
        ([2, 4], True, True)
    """

    min_ess: float = 8.0
    start: int = 8
    largest: int = 128
    seconds: float | None = None

    def __post_init__(self) -> None:
        check_int("start", self.start, minimum=1)
        check_int("largest", self.largest, minimum=self.start)
        if not isinstance(self.min_ess, (int, float)) or not self.min_ess > 0:
            raise InvalidArgumentError(f"min_ess must be positive, got {self.min_ess!r}")
        if self.seconds is not None and not (
            isinstance(self.seconds, (int, float)) and self.seconds > 0
        ):
            raise InvalidArgumentError(f"seconds must be positive, got {self.seconds!r}")


def auto_particles(particles: Any) -> int | AutoParticles:
    """``particles`` checked: N ≥ 1, ``"auto"`` (the default :class:`AutoParticles`) or an
    :class:`AutoParticles`."""
    if particles == "auto":
        return AutoParticles()
    if isinstance(particles, AutoParticles):
        return particles
    if isinstance(particles, str):
        raise InvalidArgumentError(f'particles must be an int ≥ 1 or "auto", got {particles!r}')
    return check_int("particles", particles, minimum=1)


def _pooled(runs: list[ParticleSet]) -> ParticleSet:
    """Independent runs' particles in one set: particle i of run r weighs N_r·Ẑ_r·W_r^i."""
    log_w = torch.cat([
        run.log_weights + run.report.log_z + math.log(run.report.particles) for run in runs
    ])  # fmt: skip
    log_z = torch.logsumexp(log_w, 0).item() - math.log(sum(r.report.particles for r in runs))
    width = max(run.sequences.shape[1] for run in runs)
    sequences = torch.cat([
        torch.nn.functional.pad(run.sequences, (0, width - run.sequences.shape[1]),
                                value=int(run.sequences[0, -1]))
        for run in runs
    ])  # fmt: skip
    reports = tuple(run.report for run in runs)
    total = sum(r.particles for r in reports)
    phases = {name: sum(dict(r.seconds).get(name, 0.0) for r in reports)
              for name, _ in reports[0].seconds}  # fmt: skip
    report = ParticleReport(
        particles=total, log_z=log_z, ess=tuple(e for r in reports for e in r.ess),
        resamplings=sum(r.resamplings for r in reports), seconds=tuple(phases.items()),
        tokens_per_forward=sum(r.tokens_per_forward * r.particles for r in reports) / total,
        positions=max(r.positions for r in reports), runs=reports,
    )  # fmt: skip
    return ParticleSet(sequences, log_w - torch.logsumexp(log_w, 0), report)


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
    particles: int | str | AutoParticles,
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
        particles: N ≥ 1, or ``"auto"`` / an :class:`AutoParticles`: runs of growing N
            pooled until their particles suffice (what was run: ``report.runs``).
        max_new_tokens: The budget B (EOS counted): every particle ends inside L_B.
        phi: The twist Φ̂: an estimator name or instance (``"uniform"``: the masked proposal).
        scores: ``scores(input_ids, logits) -> logits`` applied before p_t is taken (the
            call's other logits processors and warpers: temperature, top-k/top-p, penalties),
            so the particles target q(x)·1[x ∈ L_B]/Z with q the product of the processed
            conditionals; default: none (p_t is the model's softmax, the target μ*_B).
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
    n = auto_particles(particles)
    if isinstance(n, AutoParticles):
        t0, runs, size = time.perf_counter(), [], n.start
        while True:
            t1 = time.perf_counter()
            runs.append(sample_particles(model, input_ids, grammar=grammar, particles=size,
                                         max_new_tokens=max_new_tokens, phi=phi, scores=scores,
                                         ess_threshold=ess_threshold,
                                         prompt_length=prompt_length))  # fmt: skip
            last = time.perf_counter() - t1
            size *= 2
            if sum(run.report.min_ess for run in runs) >= n.min_ess or size > n.largest:
                break
            if n.seconds is not None and time.perf_counter() - t0 + 2 * last > n.seconds:
                break
        return _pooled(runs)
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
    device = input_ids.device
    clock = _Clock()

    with clock("forward"):
        forward = _Forward(model, n)
        first = forward.prompt(input_ids)
    # spelled-out runs ride along with the next forward (masked proposal, packed cache only)
    runs = _MAX_RUN if scores is None and forward.shared else 0
    proposal = proposal_for(estimator, grammar, rows, prompt, runs)
    pop = _Population(n, given, rows.is_finished(given))
    live = pop.live()  # the particles the cache holds, in its order
    if len(live) < n:
        forward.keep(torch.tensor(live, dtype=torch.long, device=device))
    logits = first.expand(len(live), -1)  # the live rows' positions, row after row
    ess_trace: list[float] = []
    row_forwards = 0
    for step in range(budget):
        if not live:
            break
        with clock("grammar"):
            if scores is not None:  # (no runs: one position per live row)
                ids = torch.tensor([[*prompt, *pop.generated[i]] for i in live], device=device)
                logits = scores(ids, logits)
            logits = logits.cpu()
            if logits.dtype != torch.float64:  # (half-precision models: float32)
                logits = logits.float()  # log p_t = logits − lse (a twist's weights: float64)
            lse = torch.logsumexp(logits if estimator.is_masking else logits.double(), -1).double()
            emitted = proposal.draw([pop.generated[i] for i in live], logits, lse)
            row_forwards += len(live)
            pop.absorb(live, emitted, grammar)
        if not bool(torch.isfinite(pop.log_w).any()):
            _refuse_dead(pop, grammar, rows, given, budget, first_step=step == 0)
        with clock("resampling"):
            ess = effective_sample_size(pop.log_w)
            ess_trace.append(ess)
            slot = {i: k for k, i in enumerate(live)}  # particle → its row in the cache
            origin = pop.resample() if ess < ess_threshold * n and not all(pop.done) else None
            live = pop.live()
            rows_kept = [slot[i if origin is None else origin[i]] for i in live]
            if rows_kept != list(range(len(slot))):  # copies and finished particles
                forward.keep(torch.tensor(rows_kept, dtype=torch.long, device=device))
        if not live:
            break
        with clock("grammar"):  # (the masked proposal: the text spelled out after each)
            extra = proposal.ahead([pop.generated[i] for i in live])
            feed = [(pop.generated[i][-1], *more) for i, more in zip(live, extra, strict=True)]
        with clock("forward"):
            logits = forward.step(feed)
    if not all(pop.done):  # budget-exact admissible sets end every particle within B
        raise ConstraintConflictError(
            f"internal: {n - sum(pop.done)} particle(s) did not end within {budget} tokens"
        )
    log_z = pop.log_z + torch.logsumexp(pop.log_w, 0).item() - math.log(n)
    norm = pop.log_w - torch.logsumexp(pop.log_w, 0)
    report = ParticleReport(n, log_z, tuple(ess_trace), pop.resamplings, clock.seconds(),
                            pop.tokens_out / max(row_forwards, 1),
                            pop.furthest - len(given))  # fmt: skip
    eos = grammar.eos_token_ids
    width = max(len(g) + (not g or g[-1] not in eos) for g in pop.generated)  # each ends in EOS
    sequences = torch.tensor(
        [[*prompt, *g] + [eos[0]] * (width - len(g)) for g in pop.generated], device=device
    )
    return ParticleSet(sequences, norm, report)


class _Population:
    """N particles' histories and weights: what a step's emitted tokens add (:meth:`absorb`)
    and what a resampling copies (:meth:`resample`)."""

    def __init__(self, n: int, given: tuple[int, ...], finished: bool) -> None:
        self.n = n
        self.generated: list[tuple[int, ...]] = [given] * n
        self.done = [finished] * n
        self.log_w = torch.zeros(n, dtype=torch.float64)  # since the last resampling
        self.prev = torch.zeros(n, dtype=torch.float64)  # log Φ̂_{t−1}(x_{t−1})
        self.log_z = 0.0  # log Ẑ of the resamplings so far
        self.resamplings = 0
        self.tokens_out = 0
        self.furthest = len(given)  # the most tokens any particle has held
        self.failed: list[str] = []  # what the final check said of particles it gave weight 0

    def live(self) -> list[int]:
        return [i for i in range(self.n) if not self.done[i]]

    def absorb(self, live: list[int], emitted: list[list[Any]], grammar: Grammar) -> None:
        """Append each live particle's emitted tokens and multiply in their incremental weights
        (z − log Φ̂_{t−1}); at EOS divide by Φ̂_T(EOS), so the final weight is p(x)/q(x), and
        give weight 0 to an output the grammar's final check refuses."""
        eos = grammar.eos_token_ids
        log_w, prev = self.log_w, self.prev
        for k, i in enumerate(live):
            for y, z, log_phi_y in emitted[k]:
                if z == -math.inf:
                    log_w[i] = -math.inf  # nothing admissible has positive probability: dies
                    self.done[i] = True
                    break
                self.tokens_out += 1
                self.generated[i] += (y,)
                self.furthest = max(self.furthest, len(self.generated[i]))
                log_w[i] += z - prev[i]
                prev[i] = log_phi_y
                if y in eos:
                    log_w[i] -= prev[i]  # Φ̂_T(EOS): the final weight is p(x)/q(x)
                    self.done[i] = True
                    failure = grammar.check(self.generated[i][:-1]) if grammar.checked else None
                    if failure is not None:  # outside L: weight 0 (exact μ*, the check
                        log_w[i] = -math.inf  # decides)
                        self.failed.append(failure)

    def resample(self) -> list[int]:
        """Systematic resampling: the particles replaced by copies, their weights reset (log Ẑ
        keeps their mean). Returns each new particle's origin."""
        idx = systematic_resample(self.log_w)
        self.log_z += torch.logsumexp(self.log_w, 0).item() - math.log(self.n)
        self.log_w = torch.zeros(self.n, dtype=torch.float64)
        self.prev = self.prev[idx]
        origin = idx.tolist()
        self.generated = [self.generated[j] for j in origin]
        self.done = [self.done[j] for j in origin]
        self.resamplings += 1
        return origin


def _refuse_dead(
    pop: _Population, grammar: Grammar, rows: RowTracker, given: tuple[int, ...], budget: int,
    *, first_step: bool,
) -> None:  # fmt: skip
    """Every particle has weight 0: the typed error that says why.

    Raises:
        CheckFailedError: the final check refused every finished particle.
        BudgetTooSmallError: at the first step, a budget no member fits.
        ConstraintConflictError: a processor or warper removed every admissible token.
    """
    if pop.failed:
        raise CheckFailedError(
            f"all {pop.n} particles failed the final check of {grammar.source}; the last: "
            f"{pop.failed[-1]}"
        )
    if first_step:  # a budget no member fits is named as generate() names it
        refusal = grammar.budget_refusal(
            rows.state(given), rows.remaining(len(given)), f"max_new_tokens={budget}"
        )
        if refusal is not None:
            raise refusal
    raise ConstraintConflictError(
        f"every particle reached a position where no token {grammar.source} admits "
        "has positive probability under the model's (processed) scores: a logits "
        "processor or warper removed them (top_k, top_p, a penalty…)"
    )


class _Clock:
    """Wall seconds per phase of a particle run (forward, grammar, resampling)."""

    def __init__(self) -> None:
        self.spent = {"forward": 0.0, "grammar": 0.0, "resampling": 0.0}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spent[phase] += time.perf_counter() - t0

    def seconds(self) -> tuple[tuple[str, float], ...]:
        return tuple(self.spent.items())


class _Forward:
    """The next-token logits of N particles continuing one prompt, through their cache.

    :meth:`prompt` runs the prompt (one row); :meth:`step` then the live particles' tokens,
    in the order :meth:`keep` last set. Where the model allows
    (:func:`~hf_fvo.models.shared_prefix.shared_prefix_supported`), the prompt's keys and
    values are kept once for all rows (:class:`SharedPrefixCache`) and a step may feed a row
    several tokens; otherwise a ``DynamicCache`` is repeated N times, one token per row."""

    def __init__(self, model: Any, rows: int) -> None:
        from transformers import DynamicCache

        self.model, self.rows = model, rows
        self.cache: Any = DynamicCache()
        self.name = next(iter(cache_argument(model, None)))
        self.shared = shared_prefix_supported(model)

    def prompt(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits after the prompt ``ids`` (1, L), shape (1, V); the cache then holds N
        rows continuing it."""
        with torch.no_grad():
            logits = self.model(ids, use_cache=True, **{self.name: self.cache}).logits[:, -1]
        if self.shared:
            self.cache = SharedPrefixCache.from_prompt(self.cache, self.rows)
        else:
            self.cache.batch_repeat_interleave(self.rows)
        return logits

    def step(self, feed: list[tuple[int, ...]]) -> torch.Tensor:
        """The logits at every fed position: row k's tokens ``feed[k]`` (its last token and
        the run after it) in one packed forward, rows one after another, shape
        (Σ len(feed[k]), V)."""
        device = self.model.device
        with torch.no_grad():
            if not self.shared:  # (one token per row: runs need the shared cache's rows)
                ids = torch.tensor(feed, dtype=torch.long, device=device)
                return self.model(ids, use_cache=True, **{self.name: self.cache}).logits[:, -1]
            positions = self.cache.pack([len(f) for f in feed])
            ids = torch.tensor([[t for f in feed for t in f]], dtype=torch.long, device=device)
            with shared_prefix(self.model, self.cache):
                return self.model(ids, position_ids=positions, use_cache=True,
                                  **{self.name: self.cache}).logits[0]  # fmt: skip

    def keep(self, index: torch.Tensor) -> None:
        """Keep the cache's rows ``index``, in that order (copies and finished particles)."""
        self.cache.reorder_cache(index)
