"""Labels for learned Φ: one position each — the features of its scored candidates
(:mod:`hf_fvo.phi.features`), their log p_t and log Φ, log p_t(EOS) where EOS is admissible
(Φ(EOS) = 1) and a weight (how often μ* passes through the position). Sources:

- :func:`markov_labels`: exact Φ under a Markov LM (product-state DP, any automaton: Dyck,
  budget, regex…), at the positions of trajectories sampled under μ* and under masking;
- :func:`trie_labels`: exact Φ with any LM on a finite language (the explored token trie), at
  the prefixes μ* passes through most;
- :func:`rollout_labels`: Monte-Carlo Φ from rollouts of the model (any grammar, pushdown
  included) with Hoeffding half-widths, at the positions of masked samples;
- :func:`path_labels`: one importance-weighted rollout per position, read off masked draws with no
  extra forward (any grammar): at every position, the sampled token's Φ is estimated without
  bias by the product of the admissible masses p_s(A_s) of the rest of the draw (0 if the draw
  never ends in the language). Noisy one by one, so they are fitted pointwise, to their mean.

:func:`labels_dataset` turns them into a ``datasets.Dataset``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation import generate
from hf_fvo.grammar import Grammar
from hf_fvo.phi.base import PhiContext
from hf_fvo.phi.features import candidate_features

__all__ = [
    "Label",
    "labels_dataset",
    "markov_labels",
    "path_labels",
    "rollout_labels",
    "trie_labels",
]

Label = dict[str, Any]


def _label(
    grammar: Grammar, ctx: PhiContext, log_phi: torch.Tensor, source: str, group: str,
    half_width: float = 0.0, only: list[int] | None = None,
) -> Label | None:  # fmt: skip
    """One position's label from a vocabulary-wide log Φ row (exact or estimated); ``only``
    keeps those candidates (and then leaves EOS unlabelled: the rest of the mass is unknown)."""
    f = candidate_features(grammar, ctx, coverage=1.0, max_candidates=10**9)
    keep = torch.arange(len(f.tokens))
    if only is not None:
        keep = torch.nonzero(torch.isin(f.tokens, torch.tensor(only, dtype=torch.long))).flatten()
    if len(keep) == 0:
        return None
    tokens = f.tokens[keep]
    eos = float(torch.logsumexp(f.logp[f.eos], 0)) if len(f.eos) and only is None else -math.inf
    return {"source": source, "group": group, "features": f.features[keep].tolist(),
            "log_p": f.logp[tokens].tolist(), "log_phi": log_phi[tokens].tolist(),
            "half_width": [half_width] * len(tokens), "log_p_eos": eos,
            "weight": 1.0}  # fmt: skip


def markov_labels(
    grammar: Grammar,
    lm: Any,
    prompt: tuple[int, ...],
    max_new_tokens: int | None,
    *,
    trajectories: int = 20,
    seed: int = 0,
    group: str = "markov",
) -> list[Label]:
    """Exact-Φ labels under a :class:`~hf_fvo.models.MarkovLM` at the distinct positions of
    ``trajectories`` sampled under μ* and as many under masking, each weighted by its share of
    the visits.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.training.labels import markov_labels
        >>> vocab = TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2])
        >>> lm = MarkovLM.random(4, seed=1, bos_token_id=3, eos_token_id=2)
        >>> labels = markov_labels(Grammar.dyck(2, 6, vocab), lm, (3,), 7, trajectories=3)
        >>> len(labels), labels[0]["source"]  # positions with a choice to make
        (3, 'markov')
    """
    from hf_fvo.phi.exact_markov import MarkovExactPhi
    from hf_fvo.phi.uniform import UniformPhi

    exact, masked = MarkovExactPhi(grammar, lm), UniformPhi(grammar)
    table = lm.log_probs.detach().double()
    rng = np.random.default_rng(seed)
    seen: dict = {}
    out: list[Label] = []
    for sampler in (exact, masked):
        for _ in range(trajectories):
            generated: tuple[int, ...] = ()
            state = grammar.initial_state
            while not (generated and generated[-1] in grammar.eos_token_ids):
                left = None if max_new_tokens is None else max_new_tokens - len(generated)
                context = lm.context_of((*prompt, *generated))
                ctx = PhiContext(state, generated, table[context], left, prompt)
                key = (context, state, left)
                log_phi = exact.log_phi(ctx)
                if key not in seen:
                    seen[key] = _label(grammar, ctx, log_phi, "markov", group)
                    if seen[key] is not None:
                        seen[key]["weight"] = 0.0
                        out.append(seen[key])
                if seen[key] is not None:
                    seen[key]["weight"] += 1.0 / (2 * trajectories)
                weights = table[context][: grammar.vocab_size] + sampler.log_phi(ctx)
                probs = torch.softmax(weights, 0).numpy()
                tok = int(rng.choice(len(probs), p=probs / probs.sum()))
                generated, state = (*generated, tok), grammar.next_state(state, tok)
    return out


def trie_labels(
    grammar: Grammar,
    lm: Any,
    prompt: tuple[int, ...],
    *,
    positions: int = 200,
    tol: float = 1e-6,
    max_nodes: int = 20_000,
    group: str = "trie",
) -> list[Label]:
    """Exact-Φ labels with any LM on a finite language: the ``positions`` explored prefixes μ*
    passes through most often, each weighted by that probability, Φ from the explored trie
    (lower bound, exact up to ``tol``). ``lm`` is a model or a :class:`~hf_fvo.phi.PrefixLM`
    whose row cache is reused.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> from hf_fvo.training.labels import trie_labels
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> labels = trie_labels(g, tiny_random_llama(len(tok)), (1,), positions=2, tol=0.0)
        >>> len(labels), labels[0]["source"]  # the root; after "no" only EOS is left
        (1, 'trie')
    """
    from hf_fvo.phi.exact import ExactPhi
    from hf_fvo.phi.lm import PrefixLM

    lm = PrefixLM.wrap(lm, batch_size=32)
    exact = ExactPhi(grammar, lm, tol=tol, max_nodes=max_nodes)
    explored = exact.root_exploration(prompt)
    reach = {explored.root: 1.0}  # μ*'s probability of passing through each explored prefix
    for prefix in explored.order:
        node = explored.nodes[prefix]
        scores = node.child_logp + node.log_phi_lo
        if not torch.isfinite(scores).any():
            continue  # at the explored edge: nothing below was explored
        step = torch.softmax(scores, 0).tolist()
        for tok, share in zip(node.children.tolist(), step, strict=True):
            if (*prefix, tok) in explored.nodes:
                reach[(*prefix, tok)] = reach[prefix] * share
    prefixes = sorted(explored.nodes, key=lambda q: -reach.get(q, 0.0))[:positions]
    out: list[Label] = []
    for start in range(0, len(prefixes), 64):
        chunk = prefixes[start : start + 64]
        for prefix, row in zip(chunk, lm.next_logprobs(prompt, chunk), strict=True):
            node = explored.nodes[prefix]
            log_phi = torch.full((grammar.vocab_size,), -torch.inf, dtype=torch.float64)
            log_phi[node.children] = node.log_phi_lo
            left = None if explored.budget is None else explored.budget - len(prefix)
            ctx = PhiContext(node.state, prefix, row, left, prompt)
            label = _label(grammar, ctx, log_phi, "trie", group)
            if label is not None:
                label["weight"] = reach.get(prefix, 0.0)
                out.append(label)
    return out


def rollout_labels(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    max_new_tokens: int,
    *,
    samples: int = 2,
    k: int = 8,
    candidates: int = 4,
    every: int = 4,
    seed: int = 0,
    masked: bool = True,
    group: str = "rollout",
) -> list[Label]:
    """Monte-Carlo Φ labels (any grammar): along ``samples`` masked samples, every ``every``-th
    position gets :class:`~hf_fvo.phi.RolloutPhi` estimates (``k`` rollouts for the top
    ``candidates``; importance-weighted rollouts from the masked model unless ``masked=False``)
    with their Hoeffding half-widths; candidates not rolled out are left out.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.training.labels import rollout_labels
        >>> vocab = TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2])
        >>> lm = MarkovLM.random(4, seed=1, bos_token_id=3, eos_token_id=2, pad_token_id=2)
        >>> labels = rollout_labels(Grammar.dyck(2, 6, vocab), lm, (3,), 7, samples=1)
        >>> labels[0]["source"], all(h > 0 for h in labels[0]["half_width"])
        ('rollout', True)
    """
    from hf_fvo.phi.rollout import RolloutPhi, hoeffding_half_width

    est = RolloutPhi(grammar, model, k=k, candidates=candidates, seed=seed, masked=masked)
    torch.manual_seed(seed)
    ids = torch.tensor([prompt])
    out: list[Label] = []
    for _ in range(samples):
        res = generate(model, ids, grammar=grammar, max_new_tokens=max_new_tokens,
                       do_sample=True, top_k=0, output_logits=True,
                       return_dict_in_generate=True)  # fmt: skip
        seq = res.sequences[0, len(prompt) :].tolist()
        state = grammar.initial_state
        for t, tok in enumerate(seq):
            if t % every == 0:
                row = res.logits[t][0].double()
                ctx = PhiContext(state, tuple(seq[:t]), row, max_new_tokens - t, prompt)
                log_phi = est.log_phi(ctx)
                rolled = est.rolled_out(ctx)
                hw = hoeffding_half_width(k, est.alpha, max(len(rolled), 1))
                label = _label(grammar, ctx, log_phi, "rollout", group, hw, only=rolled)
                if label is not None:
                    out.append(label)
            if tok in grammar.eos_token_ids:
                break
            state = grammar.next_state(state, tok)
    return out


def path_labels(
    grammar: Grammar,
    model: Any,
    prompt: tuple[int, ...],
    max_new_tokens: int,
    *,
    draws: int = 4,
    seed: int = 0,
    group: str = "path",
) -> list[Label]:
    """One-rollout Φ labels at every position of ``draws`` masked samples (any grammar).

    A masked draw continues the prefix x_{<t}·x_t exactly as a masked rollout would, so the
    product W_t = ∏_{s>t} p_s(A_s) over the rest of the draw (0 when it does not end with EOS
    within the budget) is an unbiased estimate of Φ_t(x_t) in [0, 1] — the importance weight of
    :class:`~hf_fvo.phi.RolloutPhi` with ``masked=True`` and ``k=1``. Every position of every draw
    is labelled for the price of the draw itself. Each label has one candidate, the sampled
    token (``source`` ``"path"``; positions where it is not among the scored candidates of
    :func:`~hf_fvo.phi.features.candidate_features`, and EOS, are skipped); training fits them
    pointwise (:func:`~hf_fvo.training.fit.train_phi_model`).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.models import MarkovLM
        >>> from hf_fvo.training.labels import path_labels
        >>> vocab = TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2])
        >>> lm = MarkovLM.random(4, seed=0, bos_token_id=3, eos_token_id=2, pad_token_id=2)
        >>> labels = path_labels(Grammar.dyck(2, 6, vocab), lm, (3,), 7, draws=4)
        >>> {lab["source"] for lab in labels}, all(lab["log_phi"][0] <= 0 for lab in labels)
        ({'path'}, True)
    """
    from hf_fvo.phi.rollout import hoeffding_half_width

    if not isinstance(draws, int) or draws < 1:
        raise InvalidArgumentError(f"draws must be a positive int, got {draws!r}")
    eos = set(grammar.eos_token_ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        res = generate(model, torch.tensor([prompt] * draws), grammar=grammar,
                       max_new_tokens=max_new_tokens, do_sample=True, top_k=0,
                       output_logits=True, return_dict_in_generate=True)  # fmt: skip
    width = hoeffding_half_width(1, 0.05, 1)
    out: list[Label] = []
    for b in range(draws):
        seq = res.sequences[b, len(prompt) :].tolist()
        state, steps = grammar.initial_state, []
        for t, tok in enumerate(seq):
            left = max_new_tokens - t
            row = res.logits[t][b].double()
            logp = torch.log_softmax(row, -1)[: grammar.vocab_size]
            mask = grammar.admissible(state, left)
            steps.append((PhiContext(state, tuple(seq[:t]), row, left, prompt), tok,
                          float(torch.logsumexp(logp[mask[: len(logp)]], 0))))  # fmt: skip
            if tok in eos:
                break
            state = grammar.next_state(state, tok)
        ended = bool(steps) and steps[-1][1] in eos
        suffix = 0.0 if ended else -math.inf  # log W after the last step
        for ctx, tok, log_adm in reversed(steps):
            if tok not in eos:
                f = candidate_features(grammar, ctx)
                hit = torch.nonzero(f.tokens == tok).flatten()
                if len(hit):
                    k = int(hit[0])
                    out.append({"source": "path", "group": group,
                                "features": [f.features[k].tolist()], "log_p": [float(f.logp[tok])],
                                "log_phi": [suffix], "half_width": [width],
                                "log_p_eos": -math.inf, "weight": 1.0})  # fmt: skip
            suffix += log_adm
    return out


def labels_dataset(labels: Iterable[Label]) -> Any:
    """Labels as a ``datasets.Dataset`` (one row per position).

    Example:
        >>> from hf_fvo.training.labels import labels_dataset
        >>> ds = labels_dataset([{"source": "markov", "group": "g", "features": [[0.0] * 12],
        ...                       "log_p": [-1.0], "log_phi": [-0.5], "half_width": [0.0],
        ...                       "log_p_eos": -2.0, "weight": 1.0}])
        >>> ds.num_rows, ds.column_names[:2]
        (1, ['source', 'group'])
    """
    import datasets

    rows = list(labels)
    if not rows:
        raise InvalidArgumentError("no labels: every position had no scored candidate")
    for r in rows:
        if not (math.isfinite(r["weight"]) and r["weight"] >= 0):
            raise InvalidArgumentError(f"label of {r['group']!r} has weight {r['weight']!r}")
        r["log_p_eos"] = max(float(r["log_p_eos"]), -1e30)
        r["log_phi"] = [max(float(v), -1e30) for v in r["log_phi"]]
    return datasets.Dataset.from_list(rows)
