"""Training learned Φ (``hf-fvo train-phi``): :func:`train_phi_model` fits a
:class:`~hf_fvo.phi.PhiModel` to labels (:mod:`hf_fvo.training.labels`) by the listwise loss
KL(μ*_t ‖ μ̂_t), μ̂_t ∝ p_t·Φ̂_t, at each position weighted by how often μ* visits it — by the
chain rule that sum is the sequence-level KL(μ* ‖ μ̂) — with each grammar and each label source
counting equally; :func:`step_tv` measures per-position TV. One-rollout labels
(:func:`~hf_fvo.training.labels.path_labels`, source ``"path"``: an unbiased but noisy W in
[0, 1] for one candidate) are fitted pointwise instead, by the cross-entropy
−T log Φ̂ − (1 − T) log(1 − Φ̂), whose minimiser is the conditional mean E[T | features], with
the target T either

- ``"mean"``: T = W, so Φ̂ → Φ itself; but over a long open completion W is the product of
  a hundred masses below 1 (median log W ≈ −17 on the development schemas, 0 for most draws the
  budget cut off), so nearly every label is ≈ 0 and the fit can hardly tell candidates apart;
- ``"finish"``: T = 1[W > 0], so Φ̂ → the probability that the masked continuation ends in the
  language within the budget, an upper bound on Φ (W ≤ 1[W > 0]) learned from low-variance
  labels: the part of Φ that keeps completions inside the token budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.phi.learned import PhiModel
from hf_fvo.training.labels import Label

__all__ = ["POINTWISE_SOURCES", "path_brier", "step_tv", "train_phi_model"]

POINTWISE_SOURCES = ("path",)  # label sources with one noisy, unbiased Φ sample per row


def _tensors(rows: list[Label]) -> tuple[torch.Tensor, ...]:
    n = max(len(r["log_p"]) for r in rows)
    d = len(rows[0]["features"][0])
    feats = torch.zeros(len(rows), n, d)
    logp = torch.full((len(rows), n + 1), -torch.inf, dtype=torch.float64)
    logphi = torch.full((len(rows), n), -torch.inf, dtype=torch.float64)
    for i, r in enumerate(rows):
        m = len(r["log_p"])
        feats[i, :m] = torch.tensor(r["features"])
        logp[i, :m] = torch.tensor(r["log_p"], dtype=torch.float64)
        logp[i, n] = r["log_p_eos"] if r["log_p_eos"] > -1e29 else -math.inf
        logphi[i, :m] = torch.tensor(r["log_phi"], dtype=torch.float64).clamp_min(-700)
    return feats, logp, logphi


def _step_laws(model: PhiModel, feats, logp, logphi) -> tuple[torch.Tensor, torch.Tensor]:
    """(log μ*_t, log μ̂_t) per row over the candidates and EOS (last column)."""
    n = feats.shape[1]
    pred = model(feats).double()
    valid = torch.isfinite(logp[:, :n])
    star = torch.cat([torch.where(valid, logp[:, :n] + logphi, -torch.inf), logp[:, n:]], 1)
    mine = torch.cat([torch.where(valid, logp[:, :n] + pred, -torch.inf), logp[:, n:]], 1)
    return torch.log_softmax(star, 1), torch.log_softmax(mine, 1)


TARGETS = ("finish", "mean")  # what a pointwise label's W is turned into (module docstring)


def _pointwise(rows: list[Label]) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (n, d) and log W (n,) of one-candidate rows, unclipped (−1e30: W = 0)."""
    feats = torch.tensor([r["features"][0] for r in rows])
    return feats, torch.tensor([float(r["log_phi"][0]) for r in rows], dtype=torch.float64)


def _cross_entropy(model: PhiModel, feats, log_w, target: str) -> torch.Tensor:
    """−T log Φ̂ − (1 − T) log(1 − Φ̂) per row, T = W or 1[W > 0]."""
    log_hat = model(feats).double()
    target = log_w.exp() if target == "mean" else (log_w > -1e29).double()
    log_miss = torch.log(-torch.expm1(log_hat.clamp_max(-1e-12)))
    return -(target * log_hat + (1 - target) * log_miss)


def step_tv(model: PhiModel | None, dataset: Any) -> np.ndarray:
    """TV(μ̂_t, μ*_t) at every labelled position (``model=None``: masking, Φ̂ ≡ 1).

    Example:
        >>> from hf_fvo.training.labels import labels_dataset
        >>> from hf_fvo.training.fit import step_tv
        >>> ds = labels_dataset([{"source": "s", "group": "g", "features": [[0.0] * 12] * 2,
        ...                       "log_p": [-1.0, -1.0], "log_phi": [0.0, -30.0],
        ...                       "half_width": [0.0, 0.0], "log_p_eos": -1e30, "weight": 1.0}])
        >>> round(float(step_tv(None, ds)[0]), 6)  # masking splits 1/2–1/2, μ* puts all on one
        0.5
    """
    rows = list(dataset)
    out = np.zeros(len(rows))
    for start in range(0, len(rows), 256):
        chunk = rows[start : start + 256]
        feats, logp, logphi = _tensors(chunk)
        with torch.no_grad():
            if model is None:
                n = feats.shape[1]
                valid = torch.isfinite(logp[:, :n])
                star = torch.cat([torch.where(valid, logp[:, :n] + logphi, -torch.inf),
                                  logp[:, n:]], 1).log_softmax(1)  # fmt: skip
                mine = logp.log_softmax(1)
            else:
                star, mine = _step_laws(model, feats, logp, logphi)
        tv = 0.5 * (star.exp() - mine.exp()).abs().sum(1)
        out[start : start + len(chunk)] = tv.numpy()
    return out


def path_brier(model: PhiModel | None, dataset: Any, target: str = "mean") -> np.ndarray:
    """(Φ̂ − T)² at every pointwise label, T = W (``"mean"``) or 1[W > 0] (``"finish"``)
    (``model=None``: masking, Φ̂ ≡ 1): its mean is the estimator's squared error to E[T] plus
    the labels' own variance, so two estimators compare by it without knowing E[T].

    Example:
        >>> from hf_fvo.training.labels import labels_dataset
        >>> from hf_fvo.training.fit import path_brier
        >>> ds = labels_dataset([{"source": "path", "group": "g", "features": [[0.0] * 12],
        ...                       "log_p": [-1.0], "log_phi": [-1e30], "half_width": [1.0],
        ...                       "log_p_eos": -1e30, "weight": 1.0}])
        >>> path_brier(None, ds).tolist()  # masking says 1, the draw never ended: W = 0
        [1.0]
    """
    if target not in TARGETS:
        raise InvalidArgumentError(f"target must be one of {TARGETS}, got {target!r}")
    rows = list(dataset)
    if not rows:
        return np.zeros(0)
    feats, log_w = _pointwise(rows)
    goal = log_w.exp() if target == "mean" else (log_w > -1e29).double()
    with torch.no_grad():
        hat = torch.ones_like(goal) if model is None else model(feats).double().exp()
    return ((hat - goal) ** 2).numpy()


def train_phi_model(
    dataset: Any,
    *,
    hidden: int = 32,
    epochs: int = 30,
    lr: float = 3e-3,
    batch_size: int = 64,
    seed: int = 0,
    lr_decay: bool | None = None,
    path_target: str = "finish",
    progress: Callable[[int, float], None] | None = None,
    **config: Any,
) -> PhiModel:
    """Fit a :class:`PhiModel` to a labels dataset by the listwise loss KL(μ*_t ‖ μ̂_t) (and the
    pointwise cross-entropy on one-rollout labels), each source weighted equally; ``config``
    goes to the model (base models, tokenizers, training description). ``lr_decay``: anneal the
    learning rate to 0 (cosine); by default only when there are pointwise labels, whose noise
    otherwise keeps the iterates from settling. ``path_target``: what pointwise labels are fitted
    to, ``"finish"`` or ``"mean"`` (module docstring). ``progress(epoch, loss)`` is called after
    each epoch.

    Example:
        >>> from hf_fvo.training.labels import labels_dataset
        >>> from hf_fvo.training.fit import step_tv, train_phi_model
        >>> rows = [{"source": "s", "group": "g", "features": [[1.0] * 12, [0.0] * 12],
        ...          "log_p": [-1.0, -1.0], "log_phi": [0.0, -30.0], "half_width": [0, 0],
        ...          "log_p_eos": -1e30, "weight": 1.0}]
        >>> model = train_phi_model(labels_dataset(rows), epochs=200, lr=0.05)
        >>> float(step_tv(model, labels_dataset(rows))[0]) < 0.05
        True
    """
    if path_target not in TARGETS:
        raise InvalidArgumentError(f"path_target must be one of {TARGETS}, got {path_target!r}")
    torch.manual_seed(seed)
    rows = list(dataset)
    if not rows:
        raise InvalidArgumentError("the labels dataset is empty")
    model = PhiModel(hidden=hidden, **config)
    allf = torch.cat([torch.tensor(r["features"]) for r in rows])
    model.mean.copy_(allf.mean(0))
    model.scale.copy_(allf.std(0).clamp_min(1e-3))
    # Σ_t KL(μ*_t ‖ μ̂_t) weighted by how often μ* visits the position is the sequence-level
    # KL(μ* ‖ μ̂) (chain rule); each group (grammar × LM) and each source counts equally
    sources = sorted({r["source"] for r in rows})
    groups: dict[tuple[str, str], float] = {}
    for r in rows:
        groups[(r["source"], r["group"])] = groups.get((r["source"], r["group"]), 0.0) + r["weight"]
    per_source = {s: sum(k[0] == s for k in groups) for s in sources}

    def weight(r: Label) -> float:
        key = (r["source"], r["group"])
        return r["weight"] / groups[key] / per_source[r["source"]] / len(sources)

    # buckets of similar width keep padding small; pointwise rows (all of width 1) batch on
    # their own, shuffled so that a batch mixes grammars
    pointwise = [r["source"] in POINTWISE_SOURCES for r in rows]
    listwise = sorted((i for i in range(len(rows)) if not pointwise[i]),
                      key=lambda i: len(rows[i]["log_p"]))  # fmt: skip
    mixed = np.flatnonzero(pointwise)[np.random.default_rng(seed).permutation(sum(pointwise))]
    batches = [(kind, order[i : i + batch_size])
               for kind, order in ((False, listwise), (True, mixed.tolist()))
               for i in range(0, len(order), batch_size)]  # fmt: skip
    tensors = [(kind, _pointwise([rows[i] for i in b]) if kind else _tensors([rows[i] for i in b]),
                torch.tensor([weight(rows[i]) for i in b], dtype=torch.float64))
               for kind, b in batches]  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    if lr_decay is None:
        lr_decay = any(pointwise)
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(tensors))
             if lr_decay else None)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for j in torch.randperm(len(tensors), generator=gen).tolist():
            kind, batch, w = tensors[j]
            if kind:
                loss = (w * _cross_entropy(model, *batch, path_target)).sum()
            else:
                feats, logp, logphi = batch
                star, mine = _step_laws(model, feats, logp, logphi)
                p = star.exp()
                kl = (p * (star - mine)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).sum(1)
                loss = (w * kl).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            total += float(loss.detach())
        if progress is not None:
            progress(epoch, total)
    return model.eval()
