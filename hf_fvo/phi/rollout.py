"""Monte-Carlo rollout Φ (seed 000 §5.4) and the budget-gated hybrid (§5.6).

Φ̂(y) = the fraction of k rollouts from x·y, sampled from the *unconstrained* model, that end
inside the grammar (EOS at an accepting state) within the token budget and the horizon; a
rollout that leaves the grammar stops at once as a failure. Hoeffding: |Φ̂(y) − Φ(y)| ≤
sqrt(ln(2m/α)/(2k)) for all m rolled-out candidates at once with probability ≥ 1 − α.

``masked=True`` (importance-weighted rollouts): each rollout is sampled from the grammar-masked
model instead and weighted by W = ∏_s p_s(A_s), the admissible mass at every step it took (0 if
it cannot end within the budget). W = p(path)/q(path) on the paths q samples, so E[W] = Φ(y);
W lies in [0, 1], so the same Hoeffding bound holds, and W² ≤ W gives Var W ≤ Φ(1 − Φ), the
variance of one unconstrained rollout: never worse, and far better where unconstrained rollouts
almost never stay inside the grammar (long JSON).

All candidates × k rollouts advance as one batch per step over the prefix's key/value cache,
computed once and expanded (never recomputed); finished rows leave the batch. Rollouts run on the
model's device, and under ``accelerate launch`` each process runs its share of the rows and the
success counts are summed across processes (:class:`accelerate.PartialState`).

Randomness: by default every call draws afresh (from a generator seeded once), so a prefix
visited by many samples sees many estimates and the sampled law averages over them, as in seed
000. ``resample=False`` seeds each estimate by (seed, prompt, prefix) instead: Φ̂ is then a fixed
function of the prefix and the sampling law one frozen realization, which ``hf_fvo.eval`` can
compute exactly (but a single unlucky estimate then applies to every sample through it).
"""

from __future__ import annotations

import copy
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.phi.base import PhiContext
from hf_fvo.phi.onestep import OneStepPhi

_ALWAYS = 16  # the default candidate set is never smaller (all of them where there are fewer)
_AT_MOST = 256  # nor larger: a flat p_t inside a free string would otherwise keep ~all 49k

__all__ = [
    "GatedPhi",
    "RolloutPhi",
    "RolloutReport",
    "hoeffding_half_width",
    "rollout_rows",
    "rollout_successes",
]


@dataclass(frozen=True)
class RolloutReport:
    """What the last estimate at a prefix did: candidates rolled out, the p·OneStep mass of the
    pruned ones (which kept their OneStep value), the Hoeffding half-width, and the cost."""

    rolled_out: int
    pruned: int
    pruned_mass: float  # share of the p·OneStep mass left to OneStep
    half_width: float  # sqrt(ln(2m/α)/(2k)) over the m rolled-out candidates
    forwards: int  # batched model calls
    rollout_tokens: int  # rows × steps actually computed


class RolloutPhi(OneStepPhi):
    """Monte-Carlo future validity: k unconstrained rollouts per candidate.

    Args:
        grammar: The compiled grammar.
        model: A Transformers causal LM with a ``DynamicCache`` (any device).
        k: Rollouts per candidate.
        candidates: Roll out only the top candidates by p·Φ̂_OneStep; the rest keep their
            OneStep value and the step reports their mass (``RolloutReport``). ``None`` (the
            default): the smallest top set holding ``coverage`` of the admissible p·OneStep
            mass, and never fewer than 16 (all of them where there are no more) nor more
            than 256.
        coverage: The share of mass the default candidate set holds (1.0: every candidate,
            which inside a free JSON string is most of the vocabulary, without the cap of 256).
        memory: Bytes the rollout rows may take at once (their key/value caches and vocabulary
            rows, :func:`rollout_rows`); rows beyond it run in further chunks. Default: half
            the free memory of a CUDA device, 2 GiB elsewhere.
        horizon: Longest rollout in tokens (EOS counted); also bounded by the token budget.
            Required for infinite languages when no budget is given.
        alpha: Confidence level of the reported Hoeffding half-width.
        seed: Base seed.
        resample: Fresh rollouts at every call (default); ``False``: one estimate per prefix,
            seeded by (seed, prompt, prefix).
        masked: Importance-weighted rollouts from the grammar-masked model (see above) instead
            of unconstrained ones.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.phi import PhiContext, RolloutPhi
        >>> vocab = TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2])
        >>> g = Grammar.dyck(3, 8, vocab)
        >>> lm = MarkovLM.random(4, seed=0, bos_token_id=3, eos_token_id=2)
        >>> phi = RolloutPhi(g, lm, k=16)
        >>> step = phi.step(PhiContext(g.initial_state, (), lm.log_probs[3], 9, prompt=(3,)))
        >>> round(step.diagnostics.delta, 3)  # sqrt(ln(2·1/0.05)/32): one candidate, "("
        0.34
    """

    name = "rollout"
    needs_model = True

    def __init__(
        self,
        grammar: Grammar,
        model: Any,
        k: int = 8,
        *,
        candidates: int | None = None,
        coverage: float = 0.999,
        memory: int | None = None,
        horizon: int | None = None,
        alpha: float = 0.05,
        seed: int = 0,
        resample: bool = True,
        masked: bool = False,
    ) -> None:
        super().__init__(grammar, model)
        if not 0.0 < coverage <= 1.0:
            raise InvalidArgumentError(f"coverage must lie in (0, 1], got {coverage}")
        for name, value in (("k", k), ("candidates", candidates), ("horizon", horizon),
                            ("memory", memory)):  # fmt: skip
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):  # fmt: skip
                raise InvalidArgumentError(f"{name} must be a positive int, got {value!r}")
        if not 0.0 < alpha < 1.0:
            raise InvalidArgumentError(f"alpha must lie in (0, 1), got {alpha}")
        self.k, self.candidates, self.horizon = k, candidates, horizon
        self.coverage, self.memory = float(coverage), memory
        self.alpha, self.seed, self.resample = float(alpha), int(seed), bool(resample)
        self.masked = bool(masked)
        self.calls = 0
        self.reports: dict[tuple[int, ...], RolloutReport] = {}  # by prefix, last few kept
        self.forwards = 0  # total batched model calls, for cost accounting
        self.rollout_tokens = 0  # total rows × steps computed

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        return self._rolled_out(ctx, super().log_phi(ctx))

    def rolled_out(self, ctx: PhiContext) -> list[int]:
        """The candidates :meth:`log_phi` rolls out at ``ctx`` (the top admissible tokens
        other than EOS by p·OneStep, as many as ``candidates`` or ``coverage`` asks); the others
        keep their OneStep value."""
        score, _, order = self._ranking(ctx, super().log_phi(ctx))
        return self._chosen(score, order).tolist()

    def _chosen(self, score: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
        if self.candidates is not None:
            return order[: self.candidates]
        if self.coverage >= 1.0 or len(order) <= _ALWAYS:
            return order
        mass = torch.softmax(score[order], 0).cumsum(0)
        n = int(torch.searchsorted(mass, torch.tensor([self.coverage], dtype=mass.dtype))) + 1
        return order[: min(_AT_MOST, max(_ALWAYS, n))]

    def _ranking(
        self, ctx: PhiContext, onestep: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log p·OneStep per token, the live candidates, the live ones best first)."""
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)[: self.grammar.vocab_size]
        score = logp + onestep
        score[list(self.grammar.eos_token_ids)] = -math.inf  # Φ(EOS) = 1 already
        live = torch.nonzero(torch.isfinite(score)).flatten()
        return score, live, live[torch.argsort(score[live], descending=True)]

    def _rolled_out(self, ctx: PhiContext, onestep: torch.Tensor) -> torch.Tensor:
        """Rollout estimates over ``onestep`` (OneStep everywhere, −inf off the admissible set)."""
        if not ctx.prompt:
            raise InvalidArgumentError("rollouts need the prompt token ids (PhiContext.prompt)")
        g = self.grammar
        out = onestep.clone()
        score, live, order = self._ranking(ctx, out)
        if len(live) == 0:  # EOS alone (Φ = 1 exactly) or nothing: no estimate to make
            self._remember(ctx.generated, RolloutReport(0, 0, 0.0, 0.0, 0, 0))
            return out
        chosen = self._chosen(score, order)
        steps = self._max_steps(ctx)
        starts = [(int(y), g.next_state(ctx.state, int(y))) for y in chosen]
        prefix = (*ctx.prompt, *ctx.generated)
        device = next(self.model.parameters()).device
        memory = self.memory if self.memory is not None else default_rollout_memory(device)
        max_rows = rollout_rows(self.model, len(prefix) + steps + 1, g.vocab_size, memory)
        successes, forwards, tokens = rollout_successes(
            self.model, g, prefix, starts, self.k, steps,
            seed=self._next_seed(ctx), masked=self.masked, max_rows=max_rows,
        )  # fmt: skip
        self.forwards += forwards
        self.rollout_tokens += tokens
        frac = successes / self.k
        half = hoeffding_half_width(self.k, self.alpha, len(chosen))
        onestep_chosen = out[chosen].clone()
        out[chosen] = torch.where(frac > 0, frac.log(), torch.full_like(frac, -math.inf))
        if not torch.isfinite(out).any():
            # Every rollout failed and nothing else is admissible. Sampling needs a positive
            # vector: OneStep's, scaled to peak at the half-width h. Where all estimates are 0
            # Hoeffding puts every Φ in [0, h], so this vector is within h of Φ as well.
            out[chosen] = onestep_chosen - onestep_chosen.max() + math.log(min(half, 1.0))
        pruned = order[len(chosen) :]
        pruned_mass = 0.0
        if len(pruned):
            pruned_mass = math.exp(
                torch.logsumexp(score[pruned], 0) - torch.logsumexp(score[live], 0)
            )
        self._remember(ctx.generated, RolloutReport(len(chosen), len(pruned), pruned_mass, half,
                                                    forwards, tokens))  # fmt: skip
        return out

    def additive_error(self, ctx: PhiContext) -> float | None:
        """The Hoeffding half-width when every candidate was rolled out (else ``None``: the
        pruned candidates' OneStep values carry no bound)."""
        report = self.reports.get(ctx.generated)
        if report is None or report.pruned:
            return None
        return report.half_width

    def _next_seed(self, ctx: PhiContext) -> int:
        self.calls += 1
        if self.resample:
            return (self.seed * 1_000_003 + self.calls) % (2**63 - 1)
        return _seed(self.seed, ctx.prompt, ctx.generated)

    def _max_steps(self, ctx: PhiContext) -> int:
        limits = [x for x in (self.horizon,) if x is not None]
        if ctx.remaining is not None:
            limits.append(ctx.remaining - 1)  # tokens left after y, EOS counted
        longest = self.grammar.max_tokens_to_accept(ctx.state)
        if longest is not None:
            limits.append(longest + 1)
        if not limits:
            raise InvalidArgumentError(
                f"{self.grammar.source} is infinite: rollouts need a token budget "
                "(max_new_tokens) or a horizon"
            )
        return min(limits)

    def _remember(self, prefix: tuple[int, ...], report: RolloutReport) -> None:
        self.reports[prefix] = report
        if len(self.reports) > 4096:
            self.reports.pop(next(iter(self.reports)))


class GatedPhi(RolloutPhi):
    """The budget-gated hybrid (seed 000 §5.6): OneStep, escalated to rollouts only where the
    OneStep dispersion log(Φ̂max/Φ̂min) exceeds ``tau`` and the masked entropy (nats) exceeds
    ``min_entropy``; the rollout estimate is kept only if it moves the step distribution by at
    least ``min_tv`` in total variation. ``escalations`` / ``steps`` count how often it did.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.phi import GatedPhi, PhiContext
        >>> g = Grammar.dyck(3, 8, TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2]))
        >>> lm = MarkovLM.random(4, seed=0, bos_token_id=3, eos_token_id=2)
        >>> phi = GatedPhi(g, lm, tau=100.0)  # never dispersed enough: OneStep throughout
        >>> _ = phi.log_phi(PhiContext(g.initial_state, (), lm.log_probs[3], 9, prompt=(3,)))
        >>> phi.steps, phi.escalations
        (1, 0)
    """

    name = "gated"

    def __init__(
        self,
        grammar: Grammar,
        model: Any,
        k: int = 8,
        *,
        tau: float = 1.0,
        min_entropy: float = 0.0,
        min_tv: float = 0.0,
        **rollout_kwargs: Any,
    ) -> None:
        super().__init__(grammar, model, k, **rollout_kwargs)
        if tau < 0 or min_entropy < 0 or not 0 <= min_tv <= 1:
            raise InvalidArgumentError("tau and min_entropy must be ≥ 0 and min_tv in [0, 1]")
        self.tau, self.min_entropy, self.min_tv = float(tau), float(min_entropy), float(min_tv)
        self.steps = 0
        self.escalations = 0  # rollouts run
        self.kept = 0  # rollout estimates used (moved the step by ≥ min_tv)
        self._escalated: dict[tuple[int, ...], bool] = {}

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        self.steps += 1
        onestep = OneStepPhi.log_phi(self, ctx)
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)[: self.grammar.vocab_size]
        if not self.should_escalate(onestep, logp):
            self._escalated[ctx.generated] = False
            return onestep
        self.escalations += 1
        rolled = self._rolled_out(ctx, onestep)  # reuses the OneStep vector
        a, b = torch.softmax(logp + onestep, 0), torch.softmax(logp + rolled, 0)
        if 0.5 * float((a - b).abs().sum()) < self.min_tv:
            self._escalated[ctx.generated] = False
            return onestep
        self.kept += 1
        self._escalated[ctx.generated] = True
        return rolled

    def should_escalate(self, onestep: torch.Tensor, logp: torch.Tensor) -> bool:
        """Stage 1: dispersion of OneStep over the candidates > τ and masked entropy > h_min."""
        finite = torch.isfinite(onestep)
        if int(finite.sum()) < 2:
            return False
        values = onestep[finite]
        if float(values.max() - values.min()) <= self.tau:
            return False
        masked = torch.log_softmax(logp[finite], 0)
        entropy = float(-(masked.exp() * masked).sum())
        return entropy > self.min_entropy

    def additive_error(self, ctx: PhiContext) -> float | None:
        if not self._escalated.get(ctx.generated, False):
            return None
        return super().additive_error(ctx)


@torch.no_grad()
def rollout_successes(
    model: Any,
    grammar: Grammar,
    prefix: tuple[int, ...],
    starts: list[tuple[int, int]],
    k: int,
    max_steps: int,
    *,
    seed: int = 0,
    masked: bool = False,
    max_rows: int | None = None,
) -> tuple[torch.Tensor, int, int]:
    """For each (token y, grammar state after y), the summed outcome of k rollouts from prefix·y
    within ``max_steps`` further tokens (EOS counted): how many end inside the grammar, or with
    ``masked=True`` the sum of their importance weights ∏ p_s(A_s) (rollouts from the masked
    model). Either way the sum ÷ k estimates Φ(y) without bias, from outcomes in [0, 1].

    Rows (rollouts) run in chunks of at most ``max_rows`` (default: all at once), each chunk
    over its own copy of the prefix's cache, so memory is bounded by the chunk whatever the
    number of candidates (:func:`rollout_rows` sizes a chunk from a memory budget). Row i draws
    its tokens from uniforms that depend only on (seed, i, step), so a seed gives the same sums
    whatever the chunk size or the number of processes.

    Returns (the sums per start (float64), model calls: the prefix once plus one batched call
    per rollout step of each chunk, rows × steps computed). Under ``accelerate launch`` each
    process runs rows ``i ≡ rank (mod world size)`` and the sums are added over processes.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.phi.rollout import rollout_successes
        >>> g = Grammar.dyck(1, 2, TokenVocabulary([b"(", b")", None], eos_token_ids=[2]))
        >>> lm = MarkovLM.from_table([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
        >>> wins, calls, _ = rollout_successes(lm, g, (2,), [(0, g.walk([0]))], k=4, max_steps=2)
        >>> wins.tolist()  # "(" then the model surely writes ")" and EOS
        [4.0]
    """
    from accelerate import PartialState

    from hf_fvo.models.cache import output_cache

    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int)
                                 or max_rows < 1):  # fmt: skip
        raise InvalidArgumentError(f"max_rows must be a positive int, got {max_rows!r}")
    state = PartialState()
    device = next(model.parameters()).device
    rows = [i for i in range(len(starts) * k) if i % state.num_processes == state.process_index]
    wins = torch.zeros(len(starts), dtype=torch.float64)
    calls = tokens = 0
    if rows and max_steps > 0:
        out = model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
        calls += 1  # the prefix once; each chunk expands a copy of its cache to its rows
        prefix_cache = output_cache(out)
        del out
        chunk = len(rows) if max_rows is None else max_rows
        for first in range(0, len(rows), chunk):
            part = rows[first : first + chunk]
            last = first + chunk >= len(rows)
            cache = prefix_cache if last else copy.deepcopy(prefix_cache)
            c, t = _roll(model, grammar, len(prefix), cache, starts, k, part, max_steps,
                         seed, masked, wins)  # fmt: skip
            calls, tokens = calls + c, tokens + t
            del cache
    if state.num_processes > 1:
        from accelerate.utils import reduce

        wins = reduce(wins.to(state.device), reduction="sum").cpu()
    return wins, calls, tokens


def _roll(
    model: Any,
    grammar: Grammar,
    prefix_length: int,
    cache: Any,
    starts: list[tuple[int, int]],
    k: int,
    rows: list[int],
    max_steps: int,
    seed: int,
    masked: bool,
    wins: torch.Tensor,
) -> tuple[int, int]:
    """One chunk of rollout rows over ``cache`` (the prefix's, expanded here): adds each
    row's outcome to ``wins[start]``; returns (model calls, rows × steps)."""
    from hf_fvo.models.cache import cache_argument

    device = next(model.parameters()).device
    calls = tokens = 0
    cache.batch_repeat_interleave(len(rows))
    owner = [i // k for i in rows]
    ids = torch.tensor([[starts[o][0]] for o in owner], device=device)
    states = [starts[o][1] for o in owner]
    log_w = torch.zeros(len(rows), dtype=torch.float64)  # masked: log ∏ p_s(A_s) so far
    alive = torch.arange(len(rows))
    length = prefix_length + 1
    eos = set(grammar.eos_token_ids)
    width = grammar.vocab_size
    for step in range(max_steps):
        mask = torch.ones(len(alive), length, dtype=torch.long, device=device)
        logits = model(input_ids=ids, attention_mask=mask, use_cache=True,
                       **cache_argument(model, cache)).logits[:, -1]  # fmt: skip
        calls += 1
        tokens += len(alive)
        if masked:
            left = max_steps - step  # tokens left, EOS counted
            n = min(width, logits.shape[-1])
            bias = torch.stack([grammar.admissible_bias(s, left)[:n] for s in states])
            logp = torch.log_softmax(logits.double(), dim=-1).cpu()[:, :n] + bias
            log_z = torch.logsumexp(logp, dim=-1)
            log_w += log_z
            dead = ~torch.isfinite(log_z)  # nothing admissible: weight 0, any draw
            probs = torch.where(dead[:, None], 1.0, (logp - log_z[:, None]).exp())
            probs = probs.nan_to_num(0.0)
        else:
            probs = torch.softmax(logits.double(), dim=-1)
        uniforms = row_uniforms(seed, [rows[int(a)] for a in alive], step)
        drawn = inverse_cdf(probs, uniforms.to(probs.device)).cpu().tolist()
        del logits, probs
        keep = []
        for r, (tok, s) in enumerate(zip(drawn, states, strict=True)):
            if masked and not math.isfinite(float(log_w[r])):
                continue  # nothing admissible: weight 0
            if tok in eos:
                if grammar.is_accepting(s):
                    wins[owner[int(alive[r])]] += math.exp(float(log_w[r]))
                continue
            nxt = grammar.next_state(s, tok) if tok < width else None
            if nxt is not None:
                states[r] = nxt
                keep.append(r)
        if not keep:
            break
        if len(keep) < len(alive):  # finished rollouts leave the batch (and the cache)
            cache.batch_select_indices(torch.tensor(keep, device=device))
        alive, log_w = alive[keep], log_w[keep]
        states = [states[r] for r in keep]
        ids = torch.tensor([[drawn[r]] for r in keep], device=device)
        length += 1
    return calls, tokens


def rollout_rows(model: Any, context: int, vocab_size: int, memory: int) -> int:
    """How many rollout rows fit in ``memory`` bytes at once: per row, the key/value cache of
    ``context`` positions (from the model's config: layers × 2 × key/value heads × head
    width × the dtype's bytes; 0 for a model without one) and a float64 row of the vocabulary
    four times over (the logits, their softmax, the cumulative sums, a draw's work). At
    least 1.

    Example:
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.phi.rollout import rollout_rows
        >>> model = tiny_random_llama(100)  # 2 layers, 2 key/value heads of 8: 256 B a position
        >>> rollout_rows(model, context=64, vocab_size=100, memory=1 << 20)  # 19.6 KB a row
        53
    """
    config = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    head_dim = getattr(config, "head_dim", None)
    if head_dim is None and heads:
        head_dim = getattr(config, "hidden_size", 0) // heads
    per_position = 0  # a model without attention's shape (a table LM): vocabulary rows only
    if layers and heads and head_dim:
        kv = getattr(config, "num_key_value_heads", None) or heads
        dtype = next(model.parameters()).dtype
        per_position = layers * 2 * kv * head_dim * dtype.itemsize
    row = per_position * context + 4 * 8 * vocab_size
    return max(1, int(memory) // row)


def default_rollout_memory(device: torch.device) -> int:
    """The rollout rows' memory budget on ``device`` when none is given: half the memory a CUDA
    device has free, 2 GiB elsewhere.

    Example:
        >>> import torch
        >>> from hf_fvo.phi.rollout import default_rollout_memory
        >>> default_rollout_memory(torch.device("cpu")) == 2 << 30
        True
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free) // 2
    return 2 << 30


def row_uniforms(seed: int, rows: list[int], step: int) -> torch.Tensor:
    """One uniform in [0, 1) per row for this step, a function of (seed, row, step) only
    (SplitMix64 of a counter): the same draws whichever chunk or process a row runs in.

    Example:
        >>> from hf_fvo.phi.rollout import row_uniforms
        >>> a = row_uniforms(7, [0, 1, 2], step=3)
        >>> bool(((a >= 0) & (a < 1)).all()), bool(row_uniforms(7, [1], 3)[0] == a[1])
        (True, True)
    """
    with np.errstate(over="ignore"):
        x = np.asarray(rows, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x ^= np.uint64(seed % (1 << 64)) * np.uint64(0xD1B54A32D192ED03)
        x += np.uint64(step + 1) * np.uint64(0x94D049BB133111EB)
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            x ^= x >> np.uint64(shift)
            x *= np.uint64(mult)
        x ^= x >> np.uint64(31)
    return torch.from_numpy((x >> np.uint64(11)).astype(np.float64) / float(1 << 53))


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs`` (rows × vocabulary, unnormalised, ≥ 0) from its uniform:
    the first id whose cumulative mass exceeds u·total (never an id of mass 0).

    Example:
        >>> import torch
        >>> from hf_fvo.phi.rollout import inverse_cdf
        >>> probs = torch.tensor([[0.0, 1.0, 0.0, 3.0], [2.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
        >>> inverse_cdf(probs, torch.tensor([0.3, 0.99], dtype=torch.float64)).tolist()
        [3, 0]
    """
    cdf = probs.cumsum(-1)
    target = uniforms[:, None] * cdf[:, -1:]
    drawn = torch.searchsorted(cdf, target, right=True).flatten()
    over = drawn >= probs.shape[-1]  # u·total rounded up to the total: the last positive id
    if bool(over.any()):
        last = probs.shape[-1] - 1 - (probs[over].flip(-1) > 0).int().argmax(-1)
        drawn[over] = last
    return drawn


def _seed(base: int, prompt: tuple[int, ...], generated: tuple[int, ...]) -> int:
    data = np.asarray([*prompt, -1, *generated], dtype=np.int64).tobytes()
    return (base * 1_000_003 + zlib.crc32(data)) % (2**63 - 1)


def hoeffding_half_width(k: int, alpha: float, candidates: int = 1) -> float:
    """sqrt(ln(2m/α)/(2k)): the additive error of k-rollout estimates of m candidates, all at
    once with probability ≥ 1 − α.

    Example:
        >>> from hf_fvo.phi.rollout import hoeffding_half_width
        >>> round(hoeffding_half_width(64, 0.05), 3)
        0.17
    """
    return math.sqrt(math.log(2 * candidates / alpha) / (2 * k))
