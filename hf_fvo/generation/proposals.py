"""Particle proposals: how one step of :func:`~hf_fvo.generation.particles.sample_particles`
draws each live particle's next tokens, apart from the SMC controller (weights, resampling,
the cache, the report).

A proposal turns the live particles' histories and their next-token logits into emitted tokens,
each with the log of its incremental weight's numerator (Z_t, or log p_t(c) for a spelled-out
token) and the log Φ̂_t it was proposed with; the controller divides by the previous Φ̂, so the
weighted set targets μ*_B whatever the proposal. Two proposals:

- :class:`MaskedProposal` (Φ̂ ≡ 1): the grammar asked once per distinct (state, remaining
  budget), every row masked in one tensor operation and drawn in one multinomial call; lazily
  decided sets checked draw by draw with an unbiased weight (:func:`_lazy_draw`); and, where
  the controller's cache allows, the tokens the grammar spells out after a particle's last
  one fed with it in the next forward (:meth:`MaskedProposal.ahead`), each kept with
  probability 1.
- :class:`TwistedProposal`: p_t·Φ̂_t on A_t for any estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hf_fvo.generation.tracker import RowTracker
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.bitmask import apply_bitmask, pack
from hf_fvo.grammar.interface import LazyAdmissible
from hf_fvo.phi import PhiContext, PhiEstimator

__all__ = ["Emitted", "MaskedProposal", "Proposal", "TwistedProposal", "proposal_for"]

Key = tuple[int, int | None]  # a grammar state's id and the remaining budget
#: one emitted token: (token, log incremental weight numerator, log Φ̂_t(token))
Emitted = tuple[int, float, float]
_TRIALS = 8  # draws checked token by token before a lazily decided A_t is resolved whole
_CHAIN_LIMIT = 32  # admissible sets larger than this are branching points


class Proposal:
    """How the live particles draw their next tokens (the base: no tokens fed ahead)."""

    def draw(
        self, histories: list[tuple[int, ...]], logits: torch.Tensor, lse: torch.Tensor
    ) -> list[list[Emitted]]:
        """Per live particle (``histories``: their grammar tokens, in the cache's row order),
        the tokens emitted this step; ``logits`` holds each row's fed positions one after
        another (see :meth:`ahead`), ``lse`` their log-normalisers. A token whose weight is
        −inf ends the particle (nothing admissible had mass)."""
        raise NotImplementedError

    def ahead(self, histories: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The tokens each live particle feeds after its last one in the next forward (their
        positions come back to :meth:`draw`, in the same row order): none here."""
        return [() for _ in histories]


class MaskedProposal(Proposal):
    """The masked proposal (Φ̂ ≡ 1), with up to ``runs`` spelled-out tokens fed ahead.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.proposals import MaskedProposal
        >>> from hf_fvo.generation.tracker import RowTracker
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["xq"], tok)
        >>> proposal = MaskedProposal(g, RowTracker(g, prompt_length=0, max_new_tokens=8), runs=8)
        >>> tok.decode(proposal.ahead([()])[0])  # each token the only one admissible; EOS branches
        'xq'
    """

    def __init__(self, grammar: Grammar, rows: RowTracker, runs: int = 0) -> None:
        self.grammar, self.rows, self.runs = grammar, rows, runs
        self._fed: list[_Run] | None = None  # the runs fed after the rows' last tokens
        self._sets: _Sets | None = None  # the sets asked while they were spelled out

    def draw(
        self, histories: list[tuple[int, ...]], logits: torch.Tensor, lse: torch.Tensor
    ) -> list[list[Emitted]]:
        emitted: list[list[Emitted]] = [[] for _ in histories]
        fed = self._fed if self._fed is not None else [_NO_RUN] * len(histories)
        ends = _verify_runs(fed, logits, lse, emitted)  # the runs, then the free draws
        free = [k for k, end in enumerate(ends) if end is not None]
        masks = _prepare_masks(  # (the runs' sets: asked where the runs stopped)
            self._sets if self._sets is not None else _Sets(self.grammar, self.rows),
            [histories[k] + tuple(y for y, _, _ in emitted[k]) for k in free],
        )
        at = torch.tensor([ends[k] for k in free], dtype=torch.long)
        drawn = _masked_step(masks, logits[at], lse[at]) if free else []
        for k, d in zip(free, drawn, strict=True):
            emitted[k].append(d)
        return emitted

    def ahead(self, histories: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if not self.runs:
            return super().ahead(histories)
        self._sets, memo = _Sets(self.grammar, self.rows), {}
        eos = self.grammar.eos_token_ids
        self._fed = [_spelled(self._sets, h, self.runs, eos, memo) for h in histories]
        return [run.tokens for run in self._fed]


class TwistedProposal(Proposal):
    """p_t·Φ̂_t on A_t for any estimator (one position per row)."""

    def __init__(
        self, estimator: PhiEstimator, grammar: Grammar, rows: RowTracker,
        prompt: tuple[int, ...],
    ) -> None:  # fmt: skip
        self.estimator, self.grammar, self.rows, self.prompt = estimator, grammar, rows, prompt

    def draw(
        self, histories: list[tuple[int, ...]], logits: torch.Tensor, lse: torch.Tensor
    ) -> list[list[Emitted]]:
        drawn = _twisted_step(self.estimator, self.grammar, self.rows, histories, logits, lse,
                              self.prompt)  # fmt: skip
        return [[d] for d in drawn]


def proposal_for(
    estimator: PhiEstimator, grammar: Grammar, rows: RowTracker, prompt: tuple[int, ...],
    runs: int = 0,
) -> Proposal:  # fmt: skip
    """The masked proposal for a masking estimator (``runs`` spelled-out tokens ahead), else
    the twisted one.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.proposals import proposal_for
        >>> from hf_fvo.generation.tracker import RowTracker
        >>> from hf_fvo.models import load_default_tokenizer
        >>> from hf_fvo.phi import make_estimator
        >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
        >>> rows = RowTracker(g, prompt_length=0, max_new_tokens=4)
        >>> type(proposal_for(make_estimator("uniform", g), g, rows, ())).__name__
        'MaskedProposal'
    """
    if estimator.is_masking:
        return MaskedProposal(grammar, rows, runs)
    return TwistedProposal(estimator, grammar, rows, prompt)


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
