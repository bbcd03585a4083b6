"""A reference for μ* where no oracle enumerates the language.

On an open grammar (a real JSON schema, a Lark grammar) μ*'s support cannot be listed, so an
estimator's sampling law cannot be compared with μ* exactly. Two samplers give a reference:

- **Importance sampling** (:func:`importance_sample`): draw from a proposal whose per-sequence
  probability q(x) is known — any Φ̂ processor; masking (``"uniform"``) by default — and weight
  each draw by p(x)/q(x). Self-normalised, the weighted draws estimate μ* expectations
  consistently (the bias is O(1/n)); :attr:`WeightedSample.ess` says how many independent draws
  they are worth. q(x) is read from the very scores the draw was sampled from (Transformers'
  ``output_scores``), so it is exact for any estimator, random ones (rollouts) included.
- **Several proposals pooled** (:func:`mixture_sample`): draws of every proposal weighted by
  p(x) over the proposals' average q̄(x) = Σ_j n_j q_j(x)/N (multiple importance sampling,
  balance heuristic), each q_j(x) recomputed by teacher forcing. Consistent whichever proposals
  are pooled, and a proposal that collapses on a small part of the language, whose own weights
  are then all alike (a high ESS that says nothing), cannot dominate the pooled law.
- **Rejection sampling** (:func:`rejection_sample`): draw from the unconstrained model and keep
  the members. The kept draws are exact μ* draws; their number is what acceptance allows.

Both target μ* restricted to the token budget: p(x)·1[x ∈ L, |x| ≤ max_new_tokens]/Z, x ending
with EOS.

Example:
    >>> import torch
    >>> from hf_fvo import Grammar
    >>> from hf_fvo.eval.reference import importance_sample
    >>> from hf_fvo.models import tiny_random_llama
    >>> g = Grammar.from_transitions({0: {3: 1, 4: 1}, 1: {}}, [1], vocab_size=8, eos_token_id=2)
    >>> model = tiny_random_llama(8, eos_token_id=2)
    >>> ref = importance_sample(model, torch.tensor([[1]]), g, 64, max_new_tokens=3)
    >>> law = ref.law(lambda x: x[0])
    >>> sorted(law), round(sum(p for p, _ in law.values()), 9)
    ([3, 4], 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import InvalidArgumentError, check_int
from hf_fvo.grammar import Grammar

__all__ = [
    "RejectionSample",
    "WeightedSample",
    "importance_sample",
    "mixture_sample",
    "rejection_sample",
    "sequence_log_probs",
]


@dataclass(frozen=True)
class WeightedSample:
    """Draws from a proposal q with log importance weights log p(x) − log q(x) (−inf for a
    draw outside the language, e.g. one the budget cut short).

    Example:
        >>> from hf_fvo.eval.reference import WeightedSample
        >>> s = WeightedSample(((5, 2), (6, 2), (5, 2)), (0.0, math.log(2.0), 0.0))
        >>> mean, se = s.estimate(lambda x: x[0] == 5)
        >>> mean, round(se, 4), round(s.ess, 4)
        (0.5, 0.3062, 2.6667)
    """

    sequences: tuple[tuple[int, ...], ...]
    log_weights: tuple[float, ...]

    @property
    def weights(self) -> np.ndarray:
        """Self-normalised weights (sum to 1; all 0 if no draw is in the language)."""
        logs = np.asarray(self.log_weights, dtype=np.float64)
        if logs.size == 0 or not np.isfinite(logs).any():
            return np.zeros(logs.size)
        w = np.exp(logs - logs[np.isfinite(logs)].max())
        return w / w.sum()

    @property
    def ess(self) -> float:
        """Kish's effective sample size (Σw)²/Σw², between 1 and n (0 with no member)."""
        w = self.weights
        return 0.0 if not w.any() else float(1.0 / np.square(w).sum())

    def estimate(self, f: Callable[[tuple[int, ...]], float]) -> tuple[float, float]:
        """E_μ*[f] and its delta-method standard error sqrt(Σ w_i² (f_i − Ê)²).

        Raises:
            InvalidArgumentError: no draw is in the language (nothing to estimate from).
        """
        w = self.weights
        if not w.any():
            raise InvalidArgumentError("no draw is in the language: μ* cannot be estimated")
        values = np.array(
            [float(f(x)) if wi > 0 else 0.0 for x, wi in zip(self.sequences, w, strict=True)]
        )
        mean = float(np.dot(w, values))
        return mean, float(math.sqrt(np.dot(np.square(w), np.square(values - mean))))

    def law(self, f: Callable[[tuple[int, ...]], Hashable]) -> dict[Hashable, tuple[float, float]]:
        """μ*'s law of the statistic ``f``: value → (probability, standard error)."""
        w = self.weights
        if not w.any():
            raise InvalidArgumentError("no draw is in the language: μ* cannot be estimated")
        values = {f(x) for x, wi in zip(self.sequences, w, strict=True) if wi > 0}
        return {v: self.estimate(lambda x, v=v: f(x) == v) for v in values}


@dataclass(frozen=True)
class RejectionSample:
    """Exact μ* draws (``sequences``, each ending with EOS) kept out of ``draws`` unconstrained
    ones.

    Example:
        >>> from hf_fvo.eval.reference import RejectionSample
        >>> RejectionSample(((5, 2),), draws=4).acceptance
        0.25
    """

    sequences: tuple[tuple[int, ...], ...]
    draws: int

    @property
    def acceptance(self) -> float:
        return len(self.sequences) / self.draws if self.draws else 0.0


def importance_sample(
    model: Any,
    input_ids: Any,
    grammar: Grammar,
    num_samples: int,
    *,
    proposal: Any = "uniform",
    max_new_tokens: int,
    batch_size: int = 16,
    seed: int = 0,
) -> WeightedSample:
    """``num_samples`` draws of ``hf_fvo.generate`` with ``phi=proposal`` (temperature 1, no
    truncation), each weighted by p(x)/q(x), for a prompt of one row.

    Args:
        model: A Transformers causal LM.
        input_ids: The prompt, shape (1, length).
        grammar: The grammar, compiled for the model's vocabulary.
        num_samples: Draws.
        proposal: Any ``phi=`` of :func:`hf_fvo.generate` (masking by default).
        max_new_tokens: The token budget (EOS included).
        batch_size: Draws per ``generate`` call.
        seed: Seeds torch's generator before the first call.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval.reference import importance_sample
        >>> from hf_fvo.models import tiny_random_llama
        >>> g = Grammar.from_transitions({0: {3: 1}, 1: {}}, [1], vocab_size=8, eos_token_id=2)
        >>> s = importance_sample(tiny_random_llama(8, eos_token_id=2), torch.tensor([[1]]), g,
        ...                       4, max_new_tokens=2)
        >>> set(s.sequences), round(s.ess, 6)
        ({(3, 2)}, 4.0)
    """
    from hf_fvo.generation.generate import generate

    ids, num_samples, batch_size, budget = _checked(
        input_ids, num_samples, batch_size, max_new_tokens, seed
    )
    eos = set(grammar.eos_token_ids)
    sequences: list[tuple[int, ...]] = []
    log_weights: list[float] = []
    while len(sequences) < num_samples:
        rows = min(batch_size, num_samples - len(sequences))
        out = generate(
            model, ids.repeat(rows, 1), grammar=grammar, phi=proposal, do_sample=True,
            max_new_tokens=budget, temperature=1.0, top_k=0, top_p=1.0,
            return_dict_in_generate=True, output_scores=True, output_logits=True,
            pad_token_id=grammar.eos_token_id, eos_token_id=sorted(eos),
        )  # fmt: skip
        generated = out.sequences[:, ids.shape[1] :]
        # per step and row: log p_t(x_t) − log q_t(x_t), one log-softmax per step for all rows
        steps = [
            (torch.log_softmax(p.double(), -1) - torch.log_softmax(q.double(), -1))
            .gather(1, generated[:, t : t + 1]).squeeze(1)
            for t, (p, q) in enumerate(zip(out.logits, out.scores, strict=True))
        ]  # fmt: skip
        for r, row in enumerate(generated.tolist()):
            end = next((i for i, t in enumerate(row) if t in eos), None)
            seq = tuple(row if end is None else row[: end + 1])
            # q's support is the language within the budget: a draw cut off weighs nothing
            log_w = -math.inf if end is None else sum(float(steps[t][r]) for t in range(len(seq)))
            sequences.append(seq)
            log_weights.append(log_w)
    return WeightedSample(tuple(sequences), tuple(log_weights))


def sequence_log_probs(
    model: Any,
    input_ids: Any,
    grammar: Grammar,
    sequences: Any,
    proposals: Any,
    *,
    max_new_tokens: int,
) -> tuple[np.ndarray, np.ndarray]:
    """log p(x) under the model and log q_j(x) under each proposal's sampling law (that of
    ``hf_fvo.generate(phi=proposal)`` at temperature 1 without truncation, within the budget)
    for each sequence of generated ids, by teacher forcing: one forward per sequence, then the
    proposal's logits processor step by step.

    Returns:
        ``(log_p, log_q)`` of shapes (n,) and (n, len(proposals)); −inf where a proposal
        cannot produce the sequence.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval.reference import sequence_log_probs
        >>> from hf_fvo.models import tiny_random_llama
        >>> g = Grammar.from_transitions({0: {3: 1, 4: 1}, 1: {}}, [1], vocab_size=8,
        ...                              eos_token_id=2)
        >>> model = tiny_random_llama(8, eos_token_id=2)
        >>> log_p, log_q = sequence_log_probs(model, torch.tensor([[1]]), g, [(3, 2), (4, 2)],
        ...                                   ["uniform"], max_new_tokens=3)
        >>> round(float(torch.tensor(log_q[:, 0]).exp().sum()), 6)  # masking's law sums to 1
        1.0
    """
    from hf_fvo.generation.processors import FVOLogitsProcessor

    ids, _, _, budget = _checked(input_ids, 1, 1, max_new_tokens, 0)
    width = ids.shape[1]
    device = next(model.parameters()).device
    procs = [FVOLogitsProcessor(grammar, phi, model, prompt_length=width, max_new_tokens=budget)
             for phi in proposals]  # fmt: skip
    log_p = np.zeros(len(sequences))
    log_q = np.zeros((len(sequences), len(procs)))
    for i, seq in enumerate(sequences):
        seq = [int(t) for t in seq]
        if not seq or len(seq) > budget:
            raise InvalidArgumentError(
                f"sequence {i} has {len(seq)} tokens; the budget is {budget}"
            )
        full = torch.cat([ids, torch.tensor([seq], dtype=ids.dtype)], 1).to(device)
        with torch.no_grad():
            logits = model(full).logits[0, width - 1 : width - 1 + len(seq)].float().cpu()
        target = torch.tensor(seq)
        log_p[i] = float(
            torch.log_softmax(logits.double(), -1)[torch.arange(len(seq)), target].sum()
        )
        for j, proc in enumerate(procs):
            total = 0.0
            for t, tok in enumerate(seq):
                scores = proc(full[:, : width + t].cpu(), logits[t : t + 1].clone())
                total += float(torch.log_softmax(scores[0].double(), -1)[tok])
                if total == -math.inf:
                    break
            log_q[i, j] = total
    return log_p, log_q


def mixture_sample(samples: Any, log_p: Any, log_q: Any) -> WeightedSample:
    """Draws of several proposals pooled into one μ* estimate (multiple importance sampling,
    balance heuristic): draw x of proposal k weighs p(x) / Σ_j (n_j/N) q_j(x).

    Args:
        samples: One :class:`WeightedSample` per proposal (their draws; a draw with weight −inf,
            outside the language, keeps weight 0).
        log_p: log p(x) for the concatenated draws (:func:`sequence_log_probs`).
        log_q: log q_j(x), shape (draws, proposals), the proposals in the order of ``samples``.

    Example:
        >>> import math
        >>> from hf_fvo.eval.reference import WeightedSample, mixture_sample
        >>> a = WeightedSample(((3, 2),), (0.0,))  # proposal a drew (3, 2); b drew (4, 2)
        >>> b = WeightedSample(((4, 2),), (0.0,))
        >>> log_p = [math.log(0.3), math.log(0.1)]
        >>> log_q = [[math.log(0.5), math.log(1e-9)], [math.log(0.5), math.log(1.0)]]
        >>> [round(float(w), 4) for w in mixture_sample([a, b], log_p, log_q).weights]
        [0.9, 0.1]
    """
    seqs = [x for s in samples for x in s.sequences]
    member = np.isfinite([w for s in samples for w in s.log_weights])
    log_p, log_q = np.asarray(log_p, dtype=np.float64), np.asarray(log_q, dtype=np.float64)
    if log_q.shape != (len(seqs), len(samples)) or log_p.shape != (len(seqs),):
        raise InvalidArgumentError(
            f"log_p and log_q must have shapes ({len(seqs)},) and ({len(seqs)}, {len(samples)})"
        )
    shares = np.log([len(s.sequences) / len(seqs) for s in samples])
    with np.errstate(divide="ignore", invalid="ignore"):  # non-members: −inf − (−inf)
        mix = np.logaddexp.reduce(log_q + shares, axis=1)
        logs = np.where(member & np.isfinite(mix), log_p - mix, -math.inf)
    return WeightedSample(tuple(seqs), tuple(float(v) for v in logs))


def rejection_sample(
    model: Any,
    input_ids: Any,
    grammar: Grammar,
    num_samples: int,
    *,
    max_new_tokens: int,
    max_draws: int,
    batch_size: int = 16,
    seed: int = 0,
) -> RejectionSample:
    """Unconstrained draws from ``model`` (temperature 1, no truncation) until ``num_samples``
    are members of the grammar's language or ``max_draws`` were made; the members are exact
    draws of μ* within the budget.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.eval.reference import rejection_sample
        >>> from hf_fvo.models import tiny_random_llama
        >>> g = Grammar.from_transitions({0: {3: 1, 4: 1}, 1: {}}, [1], vocab_size=8,
        ...                              eos_token_id=2)
        >>> s = rejection_sample(tiny_random_llama(8, eos_token_id=2), torch.tensor([[1]]), g,
        ...                      5, max_new_tokens=2, max_draws=400)
        >>> all(x[0] in (3, 4) and x[1:] == (2,) for x in s.sequences), s.draws <= 400
        (True, True)
    """
    max_draws = check_int("max_draws", max_draws, minimum=1)
    ids, num_samples, batch_size, budget = _checked(
        input_ids, num_samples, batch_size, max_new_tokens, seed
    )
    eos = set(grammar.eos_token_ids)
    kept: list[tuple[int, ...]] = []
    draws = 0
    while len(kept) < num_samples and draws < max_draws:
        rows = min(batch_size, max_draws - draws)
        out = model.generate(
            ids.repeat(rows, 1), attention_mask=torch.ones(rows, ids.shape[1], dtype=torch.long),
            do_sample=True, max_new_tokens=budget, temperature=1.0, top_k=0, top_p=1.0,
            pad_token_id=grammar.eos_token_id, eos_token_id=sorted(eos),
        )  # fmt: skip
        for row in out[:, ids.shape[1] :].tolist():
            draws += 1
            end = next((i for i, t in enumerate(row) if t in eos), None)
            if end is None or len(kept) >= num_samples:
                continue
            state = grammar.walk(row[:end])
            if state is not None and grammar.is_accepting(state):
                kept.append(tuple(row[: end + 1]))
    return RejectionSample(tuple(kept), draws)


def _checked(
    input_ids: Any, num_samples: Any, batch_size: Any, max_new_tokens: Any, seed: Any
) -> tuple[torch.Tensor, int, int, int]:
    """The arguments both samplers share, checked; seeds torch's generator."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise InvalidArgumentError(
            "input_ids must be a torch tensor of shape (1, length): one prompt, sampled many times"
        )
    checked = [check_int(name, value, minimum=1) for name, value in (
        ("num_samples", num_samples), ("batch_size", batch_size),
        ("max_new_tokens", max_new_tokens))]  # fmt: skip
    torch.manual_seed(check_int("seed", seed, minimum=0))
    return input_ids, *checked
