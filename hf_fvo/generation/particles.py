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
leaves the batch. With the masked proposal (``phi="uniform"``) a step asks the grammar once per
distinct (state, remaining budget), masks every particle's row of the logits in one tensor
operation and draws for all of them in one multinomial call. Where the grammar decides A_t
token by token (:meth:`~hf_fvo.grammar.Grammar.lazy_admissible`: pushdown grammars, wherever a
verified completion fits the budget; A_t is :meth:`~hf_fvo.grammar.Grammar.admissible`'s, a
draw that begins the state's witness a member without building it), a particle checks its
draws and carries an unbiased estimate of p_t(A_t) as its weight (:func:`_lazy_draw`): the
same target, under the same work bound as every decoder's. :attr:`ParticleReport.seconds`
says where the time went.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import (
    CheckFailedError,
    ConstraintConflictError,
    InvalidArgumentError,
    check_int,
)
from hf_fvo.generation.tracker import RowTracker
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.bitmask import apply_bitmask, pack
from hf_fvo.grammar.interface import LazyAdmissible, require_grammar
from hf_fvo.models.cache import cache_argument
from hf_fvo.models.shared_prefix import SharedPrefixCache, shared_prefix, shared_prefix_supported
from hf_fvo.phi import PhiContext, PhiEstimator, make_estimator

__all__ = [
    "AutoParticles",
    "ParticleReport",
    "ParticleSet",
    "effective_sample_size",
    "sample_particles",
]

Scores = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Key = tuple[int, int | None]  # a grammar state's id and the remaining budget
_TRIALS = 8  # draws checked token by token before a lazily decided A_t is resolved whole
_MAX_RUN = 8  # most spelled-out tokens a particle feeds after its last one in a forward
_CHAIN_LIMIT = 32  # admissible sets larger than this are branching points


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
    eos = grammar.eos_token_ids
    device = input_ids.device
    clock = _Clock()

    with clock("forward"):
        forward = _Forward(model, n)
        first = forward.prompt(input_ids)
    # spelled-out runs ride along with the next forward (masked proposal, packed cache only)
    ahead_max = _MAX_RUN if estimator.is_masking and scores is None and forward.shared else 0
    generated: list[tuple[int, ...]] = [given] * n
    done = [rows.is_finished(given)] * n
    live = [i for i in range(n) if not done[i]]  # the particles the cache holds, in its order
    if len(live) < n:
        forward.keep(torch.tensor(live, dtype=torch.long, device=device))
    logits = first.expand(len(live), -1)  # the live rows' positions, row after row
    ahead: list[_Run] = [_NO_RUN] * n  # per particle: the run fed after its last token
    log_w = torch.zeros(n, dtype=torch.float64)  # since the last resampling
    prev = torch.zeros(n, dtype=torch.float64)  # log Φ̂_{t−1}(x_{t−1})
    log_z, ess_trace, resamplings = 0.0, [], 0
    tokens_out, row_forwards = 0, 0
    furthest = len(given)  # the most tokens any particle has held (the run lasts that long)
    failed: list[str] = []  # what the final check said of particles it gave weight 0
    sets: _Sets | None = None  # the sets asked while the runs were spelled out
    for step in range(budget):
        if not live:
            break
        with clock("grammar"):
            if scores is not None:  # (no runs: one position per live row)
                ids = torch.tensor([[*prompt, *generated[i]] for i in live], device=device)
                logits = scores(ids, logits)
            logits = logits.cpu()
            if logits.dtype != torch.float64:  # (half-precision models: float32)
                logits = logits.float()  # log p_t = logits − lse (a twist's weights: float64)
            lse = torch.logsumexp(logits if estimator.is_masking else logits.double(), -1).double()
            emitted: list[list[tuple[int, float, float]]] = [[] for _ in live]
            if estimator.is_masking:  # the runs fed after the last tokens, then the free draws
                ends = _verify_runs([ahead[i] for i in live], logits, lse, emitted)
                free = [k for k, end in enumerate(ends) if end is not None]
                masks = _prepare_masks(  # (the runs' sets: asked where the runs stopped)
                    sets if sets is not None else _Sets(grammar, rows),
                    [generated[live[k]] + tuple(y for y, _, _ in emitted[k]) for k in free],
                )
                at = torch.tensor([ends[k] for k in free], dtype=torch.long)
                drawn = _masked_step(masks, logits[at], lse[at]) if free else []
                for k, d in zip(free, drawn, strict=True):
                    emitted[k].append(d)
            else:
                drawn = _twisted_step(estimator, grammar, rows, [generated[i] for i in live],
                                      logits, lse, prompt)  # fmt: skip
                emitted = [[d] for d in drawn]
            row_forwards += len(live)
            for k, i in enumerate(live):
                for y, z, log_phi_y in emitted[k]:
                    if z == -math.inf:
                        log_w[i] = -math.inf  # nothing admissible has positive probability: dies
                        done[i] = True
                        break
                    tokens_out += 1
                    generated[i] += (y,)
                    furthest = max(furthest, len(generated[i]))
                    log_w[i] += z - prev[i]
                    prev[i] = log_phi_y
                    if y in eos:
                        log_w[i] -= prev[i]  # Φ̂_T(EOS): the final weight is p(x)/q(x)
                        done[i] = True
                        failure = grammar.check(generated[i][:-1]) if grammar.checked else None
                        if failure is not None:  # outside L: weight 0 (exact μ*, the check
                            log_w[i] = -math.inf  # decides)
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
        with clock("resampling"):
            ess = effective_sample_size(log_w)
            ess_trace.append(ess)
            slot = {i: k for k, i in enumerate(live)}  # particle → its row in the cache
            if ess < ess_threshold * n and not all(done):
                idx = systematic_resample(log_w)
                log_z += torch.logsumexp(log_w, 0).item() - math.log(n)
                log_w = torch.zeros(n, dtype=torch.float64)
                prev = prev[idx]
                generated = [generated[j] for j in idx.tolist()]
                done = [done[j] for j in idx.tolist()]
                origin = idx.tolist()
                resamplings += 1
            else:
                origin = list(range(n))
            live = [i for i in range(n) if not done[i]]
            rows_kept = [slot[origin[i]] for i in live]
            if rows_kept != list(range(len(slot))):  # copies and finished particles
                forward.keep(torch.tensor(rows_kept, dtype=torch.long, device=device))
        if not live:
            break
        with clock("grammar"):
            if ahead_max:  # the text the grammar spells out after each particle's last token
                sets, runs = _Sets(grammar, rows), {}
                for i in live:
                    ahead[i] = _spelled(sets, generated[i], ahead_max, eos, runs)
            feed = [(generated[i][-1], *ahead[i].tokens) for i in live]
        with clock("forward"):
            logits = forward.step(feed)
    unfinished = [i for i in range(n) if not done[i]]
    if unfinished:  # budget-exact admissible sets end every particle within B
        raise ConstraintConflictError(
            f"internal: {len(unfinished)} particle(s) did not end within {budget} tokens"
        )
    log_z += torch.logsumexp(log_w, 0).item() - math.log(n)
    norm = log_w - torch.logsumexp(log_w, 0)
    report = ParticleReport(n, log_z, tuple(ess_trace), resamplings, clock.seconds(),
                            tokens_out / max(row_forwards, 1), furthest - len(given))  # fmt: skip
    width = max(len(g) + (not g or g[-1] not in eos) for g in generated)  # each ends in EOS
    sequences = torch.tensor(
        [[*prompt, *g] + [eos[0]] * (width - len(g)) for g in generated], device=device
    )
    return ParticleSet(sequences, norm, report)


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


@dataclass
class _Masks:
    """Every live particle's mask for one step: A_t, or where the grammar decides it token by
    token the superset and the lazy set (computed once per distinct (state, remaining))."""

    words: np.ndarray  # (distinct, ⌈V/32⌉) int32, packed (hf_fvo.grammar.bitmask)
    which: list[int]  # particle → its row of ``words``
    lazies: list[LazyAdmissible | None]


class _Sets:
    """A_t per distinct (state, remaining budget), asked of the grammar once: the lazily
    decided set where the grammar offers one (its superset as the mask), else A_t itself."""

    def __init__(self, grammar: Grammar, rows: RowTracker) -> None:
        self.grammar, self.rows = grammar, rows
        self.found: dict[Key, tuple[Any, int | None, LazyAdmissible | None]] = {}
        self.masks: dict[Key, torch.Tensor] = {}

    def key(self, tokens: tuple[int, ...]) -> Key:
        state, remaining = self.rows.state(tokens), self.rows.remaining(len(tokens))
        key = (id(state), remaining)
        if key not in self.found:  # (the state is kept with its entry: its id stays its own)
            lazy = self.grammar.lazy_admissible(state, remaining)
            self.found[key] = (state, remaining, lazy)
        return key

    def __getitem__(self, key: Key) -> tuple[LazyAdmissible | None, torch.Tensor]:
        state, remaining, lazy = self.found[key]
        mask = self.masks.get(key)
        if mask is None:
            mask = lazy.superset if lazy is not None else self.grammar.admissible(state, remaining)
            self.masks[key] = mask
        return lazy, mask

    def words(self, keys: list[Key]) -> np.ndarray:
        """The keys' masks packed (the lazy superset where there is one): the grammar's sets
        in one batched call (:meth:`~hf_fvo.grammar.Grammar.admissible_words`)."""
        out = np.zeros((len(keys), (self.grammar.vocab_size + 31) // 32), dtype=np.int32)
        exact = []
        for i, key in enumerate(keys):
            _, _, lazy = self.found[key]
            if lazy is not None:
                out[i] = pack(lazy.superset.numpy())
            else:
                exact.append(i)
        if exact:
            found = [self.found[keys[i]] for i in exact]
            out[exact] = self.grammar.admissible_words([f[0] for f in found], [f[1] for f in found])
        return out


def _prepare_masks(sets: _Sets, generated: list[tuple[int, ...]]) -> _Masks:
    """The masks of the particles whose grammar tokens are ``generated``: it needs only their
    tokens, not the step's logits, so it can run while the forward does."""
    index: dict[Key, int] = {}
    which: list[int] = []
    lazies: list[LazyAdmissible | None] = []
    for tokens in generated:
        key = sets.key(tokens)
        which.append(index.setdefault(key, len(index)))
        lazies.append(sets.found[key][2])
    return _Masks(sets.words(list(index)), which, lazies)


@dataclass(frozen=True)
class _Run:
    """Tokens the grammar spells out after a particle's last one (each the only admissible
    token at its position, within the budget), fed with it to the next forward."""

    tokens: tuple[int, ...] = ()


_NO_RUN = _Run()


def _spelled(
    sets: _Sets,
    generated: tuple[int, ...],
    limit: int,
    eos: tuple[int, ...],
    memo: dict[Key, _Run],
) -> _Run:
    """Up to ``limit`` tokens the grammar spells out after ``generated``: at each position the
    single admissible token (within the budget); the run stops where more than one token or
    EOS is admissible, or at the limit. The masked proposal draws such a token with
    probability 1, so :func:`_verify_runs` keeps every run token. (Guessing through prefix
    chains as well was measured slower: docs/benchmarks.md.) Runs are kept per (state,
    remaining budget) in ``memo``."""
    start = sets.key(generated)
    if start in memo:
        return memo[start]
    tokens: list[int] = []
    key = start
    while len(tokens) < limit:
        lazy, mask = sets[key]
        if int(mask.sum()) > _CHAIN_LIMIT:
            break
        ids = mask.nonzero()[:, 0].tolist()
        if any(i in eos for i in ids):
            break  # ending is a branch
        if lazy is not None:
            ids = [i for i in ids if lazy.admits(i)]
        if len(ids) != 1:
            break
        tokens.append(ids[0])
        key = sets.key(generated + tuple(tokens))
    memo[start] = run = _Run(tuple(tokens))
    return run


def _verify_runs(
    runs: list[_Run],
    logits: torch.Tensor,
    lse: torch.Tensor,
    emitted: list[list[tuple[int, float, float]]],
) -> list[int | None]:
    """The masked proposal at every run position: the run token c is A_t's only member, so it
    is drawn with probability 1 and the particle's weight gains p_t(A_t) = p_t(c), as in a
    masked step. Row k's positions are ``len(runs[k].tokens) + 1`` rows of ``logits``, one
    after another (the last: the position after its run).

    Appends each row's tokens (c, log p_t(c), 0.0) to ``emitted[k]`` (the weight −inf where
    p_t(c) = 0: the particle dies there). Returns, per row, the index of its position after
    the run (``None`` where it died inside the run)."""
    counts = [len(run.tokens) for run in runs]
    starts = [0] * len(runs)
    for k in range(1, len(runs)):
        starts[k] = starts[k - 1] + counts[k - 1] + 1
    ends: list[int | None] = [starts[k] + counts[k] for k in range(len(runs))]
    if not any(counts):
        return ends
    at = torch.tensor([starts[k] + j for k in range(len(runs)) for j in range(counts[k])])
    tokens = torch.tensor([t for run in runs for t in run.tokens])
    z = (logits[at, tokens].double() - lse[at]).tolist()  # log p_t(c) per position
    o = 0
    for k, run in enumerate(runs):
        for j, c in enumerate(run.tokens):
            if z[o + j] == -math.inf:
                emitted[k].append((-1, -math.inf, 0.0))
                ends[k] = None
                break
            emitted[k].append((c, z[o + j], 0.0))
        o += len(run.tokens)
    return ends


def _masked_step(
    prepared: _Masks, logits: torch.Tensor, lse: torch.Tensor
) -> list[tuple[int, float, float]]:
    """One masked proposal (Φ̂ ≡ 1) for every live particle at once: (y, log weight, 0.0)
    each, the weight −inf where A_t has no mass.

    The grammar was asked once per distinct (state, remaining budget)
    (:func:`_prepare_masks`): particles copied by a resampling share their state. Every
    particle's mask (A_t, or the lazy superset) is applied to its row of ``logits`` in one
    tensor operation, and every draw is taken in one multinomial call; only the lazy
    membership checks of the draws run per particle, and a state's verdicts are shared by the
    particles at it."""
    trials = _TRIALS
    lazies = prepared.lazies
    allowed = prepared.words[prepared.which]
    masked = apply_bitmask(logits, allowed, out=torch.empty_like(logits))  # float32: each
    # row's max is subtracted
    top = torch.logsumexp(masked, dim=-1)  # before exp, so no mass underflows
    z = top.double() - lse  # log p_t(mask)
    alive = torch.isfinite(z)
    draws = torch.zeros(len(lazies), trials, dtype=torch.long)
    if bool(alive.any()):
        probs = torch.exp(masked[alive] - top[alive, None])
        draws[alive] = torch.multinomial(probs, trials, replacement=True)
    out = []
    for r, lazy in enumerate(lazies):
        zr = float(z[r])
        if zr == -math.inf:
            out.append((-1, -math.inf, 0.0))
        elif lazy is None:  # A_t itself: p_t on it, weight p_t(A_t)
            out.append((int(draws[r, 0]), zr, 0.0))
        else:
            y, w = _lazy_finish(lazy, draws[r].tolist(), zr, logits[r], lse[r], trials)
            out.append((y, w, 0.0))
    return out


def _twisted_step(
    estimator: PhiEstimator,
    grammar: Grammar,
    rows: RowTracker,
    generated: list[tuple[int, ...]],
    logits: torch.Tensor,
    lse: torch.Tensor,
    prompt: tuple[int, ...],
) -> list[tuple[int, float, float]]:
    """One Φ̂-twisted proposal per live particle: (y, log Z_t, log Φ̂_t(y)) each (Z_t −inf
    where nothing admissible has mass); A_t is computed once per state and budget."""
    support: dict[tuple[int, int | None], torch.Tensor] = {}
    out = []
    for r, tokens in enumerate(generated):
        state, remaining = rows.state(tokens), rows.remaining(len(tokens))
        ids, log_phi, twisted = _proposal(estimator, grammar, state, remaining, tokens,
                                          logits[r], lse[r], prompt, support)  # fmt: skip
        z = _log_mass(twisted)
        if z == -math.inf:
            out.append((-1, -math.inf, 0.0))
            continue
        k = int(torch.multinomial(torch.softmax(twisted, 0), 1))
        out.append((int(ids[k]), z, float(log_phi[k])))
    return out


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
    return _lazy_finish(lazy, drawn, z, logits, lse, trials)


def _lazy_finish(
    lazy: LazyAdmissible,
    drawn: list[int],
    z: float,
    logits: torch.Tensor,
    lse: torch.Tensor,
    trials: int,
) -> tuple[int, float]:
    """:func:`_lazy_draw` from its ``trials`` draws from p_t on the superset (``drawn``) and
    the superset's log mass ``z``: the draws checked in turn, else the set resolved."""
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
