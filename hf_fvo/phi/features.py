"""Per-candidate features of one position, for every grammar backend (the learned Φ's input).

For each admissible candidate y at a position (grammar state s, tokens left r, model scores p_t):

====  ===========================================================================================
 0    log p_t(y) − log p_t(A_t): the candidate's share of the admissible mass
 1    log OneStep(y) = log p_t(A_{t+1}(x·y)): admissible mass at the next state under p_t
 2    the next state is accepting (EOS admissible after y)
 3    log p_t(EOS)
 4    log |A_{t+1}| / log V: how open the next state is (a string's interior admits most tokens)
 5    min tokens from the next state to acceptance ÷ (r − 1) (0 without a budget), clipped to 1
 6    1 / (r − 1) (0 without a budget)
 7    log Φ_iid(y): exact Φ under the surrogate LM that draws every future token from p_t,
      within the budget (automata; :meth:`TokenAutomaton.acceptance_probability`); on pushdown
      grammars, where it is not available, the OneStep value
 8    Φ_iid is available (1 on automata, 0 on pushdown grammars)
 9    log p_t(A_t)
10    log Φ_iid at temperature 2 (the surrogate draws from p_t^{1/2}, renormalised): how much
      Φ_iid depends on the surrogate being sharp (the value of feature 7 on pushdown grammars)
11    log p_t(admissible tokens whose bytes strictly extend y's) − log p_t(y): a split the
      tokenizer would have merged (``"EN"`` where ``"ENABLED"`` is admissible) is one the model
      rarely continues; computed where A_t holds at most 4,096 tokens
====  ===========================================================================================

EOS is not a candidate here: Φ(EOS) = 1 at accepting states, whatever an estimator says.
Log-values are clipped at ``LOG_FLOOR`` so that no feature is infinite.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import torch

from hf_fvo.grammar import Grammar, TokenAutomaton
from hf_fvo.phi.base import PhiContext

__all__ = ["FEATURE_NAMES", "LOG_FLOOR", "CandidateFeatures", "candidate_features"]

FEATURE_NAMES = (
    "log_share",
    "log_onestep",
    "next_accepting",
    "log_p_eos",
    "next_openness",
    "min_to_accept_over_budget",
    "inverse_budget",
    "log_phi_iid",
    "iid_available",
    "log_p_admissible",
    "log_phi_iid_flat",
    "log_extensions",
)
LOG_FLOOR = -40.0
IID_HORIZON = 64  # horizon of Φ_iid when no budget binds


@dataclass(frozen=True)
class CandidateFeatures:
    """The scored candidates of one position (non-EOS), their features, and what was left out.

    ``tokens``: candidate ids; ``features``: float32 (len(tokens), len(FEATURE_NAMES));
    ``rest``: admissible non-EOS ids not scored (pushdown grammars score the candidates that
    carry ``coverage`` of the mass); ``eos``: admissible EOS ids; ``logp``: log p_t over the
    grammar's vocabulary (float64); ``mask``: the admissible set within the budget.
    """

    tokens: torch.Tensor
    features: torch.Tensor
    rest: torch.Tensor
    eos: torch.Tensor
    logp: torch.Tensor
    mask: torch.Tensor


def candidate_features(
    grammar: Grammar,
    ctx: PhiContext,
    *,
    coverage: float = 0.99,
    max_candidates: int = 32,
) -> CandidateFeatures:
    """The features of every admissible candidate at ``ctx`` (all of them on automata; on
    pushdown grammars the most likely ones until they hold ``coverage`` of A_t's mass, at most
    ``max_candidates``).

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import PhiContext
        >>> from hf_fvo.phi.features import FEATURE_NAMES, candidate_features
        >>> g = Grammar.budget(4, 1, zero=0, one=1, eos_token_id=2, vocab_size=3)
        >>> ctx = PhiContext(g.initial_state, (), torch.tensor([0.0, 0.0, -1.0]), 5)
        >>> f = candidate_features(g, ctx)
        >>> f.tokens.tolist(), f.features.shape == (2, len(FEATURE_NAMES))
        ([0, 1], True)
    """
    width = grammar.vocab_size
    logp = torch.log_softmax(ctx.logits.double(), dim=-1)[:width]
    if len(logp) < width:
        logp = torch.nn.functional.pad(logp, (0, width - len(logp)), value=-math.inf)
    mask = grammar.admissible(ctx.state, ctx.remaining)
    eos_ids = torch.tensor(grammar.eos_token_ids, dtype=torch.long)
    eos = eos_ids[mask[eos_ids]]
    cand = mask.clone()
    cand[eos_ids] = False
    ids = torch.nonzero(cand).flatten()
    empty = torch.zeros((0, len(FEATURE_NAMES)), dtype=torch.float32)
    if len(ids) == 0:
        return CandidateFeatures(ids, empty, ids, eos, logp, mask)
    log_adm = torch.logsumexp(logp[mask], 0)
    after = None if ctx.remaining is None else ctx.remaining - 1
    if isinstance(grammar, TokenAutomaton):
        tokens, nexts = _automaton_candidates(grammar, ctx.state, cand)
        rest = ids[:0]
        iid = _iid_values(grammar, logp, after)
        iid_flat = _iid_values(grammar, torch.log_softmax(logp / 2, 0), after)
    else:
        tokens, rest = _top_candidates(logp, ids, mask, coverage, max_candidates)
        nexts = [grammar.next_state(ctx.state, int(y)) for y in tokens.tolist()]
        iid = iid_flat = None
    # per distinct next state: admissible mass, size, accepting, distance
    cols: dict[object, tuple[float, float, float, float]] = {}
    log_v = math.log(max(width, 2))
    for nxt in dict.fromkeys(nexts):
        allowed = grammar.admissible(nxt, after)
        n_allowed = int(allowed.sum())
        one = float(torch.logsumexp(logp[allowed], 0)) if n_allowed else -math.inf
        dist = grammar.min_tokens_to_accept(nxt)
        cols[nxt] = (one, float(grammar.is_accepting(nxt)), math.log(max(n_allowed, 1)) / log_v,
                     min(dist / after, 1.0) if after else 0.0)  # fmt: skip
    per = torch.tensor([cols[n] for n in nexts], dtype=torch.float64)
    feats = torch.empty((len(tokens), len(FEATURE_NAMES)), dtype=torch.float64)
    feats[:, 0] = logp[tokens] - log_adm
    feats[:, 1] = per[:, 0]
    feats[:, 2] = per[:, 1]
    feats[:, 3] = logp[eos_ids].logsumexp(0)
    feats[:, 4] = per[:, 2]
    feats[:, 5] = per[:, 3]
    feats[:, 6] = 1.0 / after if after else 0.0
    if iid is None:
        feats[:, 7] = feats[:, 10] = per[:, 0]
        feats[:, 8] = 0.0
    else:
        at = torch.tensor(nexts, dtype=torch.long)
        feats[:, 7] = iid[at].log()
        feats[:, 8] = 1.0
        feats[:, 10] = iid_flat[at].log()
    feats[:, 9] = log_adm
    feats[:, 11] = _log_extensions(grammar, logp, ids, tokens)
    feats = feats.nan_to_num(nan=LOG_FLOOR, neginf=LOG_FLOOR).clamp_min(LOG_FLOOR)
    return CandidateFeatures(tokens, feats.float(), rest, eos, logp, mask)


EXTENSION_LIMIT = 4096  # feature 11 is computed where A_t holds at most this many tokens


def _log_extensions(
    grammar: Grammar, logp: torch.Tensor, ids: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """Feature 11 per candidate: log of the p_t mass of the admissible tokens whose bytes
    strictly extend the candidate's, minus its own log p_t; LOG_FLOOR where there are none or
    A_t (``ids``) is larger than EXTENSION_LIMIT. Sorted by bytes, a token's extensions follow
    it contiguously."""
    out = torch.full((len(tokens),), LOG_FLOOR, dtype=torch.float64)
    vocab = grammar.vocabulary
    if vocab is None or len(ids) > EXTENSION_LIMIT:
        return out
    tb = vocab.token_bytes
    adm = [i for i in ids.tolist() if i < len(tb) and tb[i]]
    adm.sort(key=lambda i: tb[i])
    keys = [tb[i] for i in adm]
    p = logp[adm].exp() if adm else logp[:0]
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(p, 0)])
    for k, y in enumerate(tokens.tolist()):
        b = tb[y] if y < len(tb) else None
        if not b:
            continue
        lo = bisect.bisect_right(keys, b)  # strictly after b itself
        hi = lo
        while hi < len(keys) and keys[hi].startswith(b):
            hi += 1
        mass = float(cum[hi] - cum[lo])
        if mass > 0:
            out[k] = math.log(mass) - float(logp[y])
    return out


def _automaton_candidates(
    g: TokenAutomaton, state: int, cand: torch.Tensor
) -> tuple[torch.Tensor, list[int]]:
    groups = g.transitions(state)
    toks, nexts = [], []
    for k, nxt in enumerate(groups.next_states.tolist()):
        a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
        t = groups.token_ids[a:b].long()
        t = t[cand[t]]
        toks.append(t)
        nexts.extend([nxt] * len(t))
    return torch.cat(toks) if toks else cand.nonzero().flatten()[:0], nexts


def _top_candidates(
    logp: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, coverage: float, most: int
) -> tuple[torch.Tensor, torch.Tensor]:
    lp = logp[ids]
    order = torch.argsort(lp, descending=True)
    share = torch.exp(torch.logcumsumexp(lp[order], 0) - torch.logsumexp(logp[mask], 0))
    take = int(torch.searchsorted(share, torch.tensor(coverage, dtype=share.dtype))) + 1
    take = min(take, most, len(ids))
    return ids[order[:take]], ids[order[take:]]


def _iid_values(g: TokenAutomaton, logp: torch.Tensor, after: int | None) -> torch.Tensor:
    horizon = IID_HORIZON if after is None else after
    longest = g.max_tokens_to_accept(g.initial_state)
    if longest is not None:
        horizon = min(horizon, longest + 1)
    return g.acceptance_probability(logp.exp(), horizon)
