"""Exact Φ for finite (or length-bounded) languages with any LM: backward DP over the token trie.

Token tries are large (every segmentation of every member is a distinct token sequence: a
3-value JSON enum has ~88k nodes over SmolLM2's vocabulary), but almost all of that mass is
negligible. The trie is therefore explored best-first by model probability, in batches of
forwards, until the unexplored mass is at most ``tol`` times the mass of completed members. The
DP then gives, per explored node, a lower bound Φ_lo (unexplored children count 0, which is what
sampling uses) and an upper bound Φ_hi (they count 1); ``Φ_hi − Φ_lo`` is the certified additive
error δ. All products are in log space, so Φ down to 1e-300 is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import (
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidArgumentError,
    check_int,
    check_real,
)
from hf_fvo.grammar import Grammar
from hf_fvo.lru import LRU
from hf_fvo.phi.base import PhiContext, PhiEstimator, no_dead_row
from hf_fvo.phi.frontier import BestFirstFrontier
from hf_fvo.phi.lm import PrefixLM

__all__ = ["ExactPhi", "TrieExploration"]


@dataclass
class _Node:
    state: int
    children: torch.Tensor  # admissible child tokens (EOS included where accepting)
    child_logp: torch.Tensor  # float64 log p(child | prefix)
    log_phi_lo: torch.Tensor | None = None  # per child, after the DP
    log_phi_hi: torch.Tensor | None = None


@dataclass
class TrieExploration:
    """The explored part of the token trie below one root prefix.

    ``nodes`` maps a generated prefix (relative to the prompt) to its admissible children and
    their model log-probabilities. ``residual`` is the unexplored mass relative to the completed
    mass at the root (the certificate the exploration stopped at).
    """

    grammar: Grammar
    prompt: tuple[int, ...]
    root: tuple[int, ...]
    budget: int | None  # tokens remaining at the root (EOS counted)
    nodes: dict[tuple[int, ...], _Node] = field(default_factory=dict)
    order: list[tuple[int, ...]] = field(default_factory=list)
    residual: float = 0.0

    def log_phi_bounds(self, prefix: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(children tokens, log Φ_lo per child) at an explored prefix."""
        node = self.nodes[prefix]
        return node.children, node.log_phi_lo

    def logprob_row(self, prefix: tuple[int, ...]) -> torch.Tensor:
        """log p(· | prefix) over the grammar's vocabulary as this exploration saw it: the
        stored model log-probabilities on the admissible children, −inf elsewhere (float64).
        Laws built from these rows use exactly the probabilities the DP used."""
        node = self.nodes[prefix]
        row = torch.full((self.grammar.vocab_size,), -torch.inf, dtype=torch.float64)
        row[node.children] = node.child_logp
        return row

    def completions(self) -> dict[tuple[int, ...], float]:
        """log p(x | root) of every explored complete sequence x (EOS included, relative to the
        root): the likelihoods behind μ* on the explored support, from this exploration's own
        forwards (no Φ involved), so μ* needs no second exploration."""
        eos = set(self.grammar.eos_token_ids)
        path = {self.root: 0.0}
        out: dict[tuple[int, ...], float] = {}
        for prefix in self.order:  # parents are expanded before their children
            node, weight = self.nodes[prefix], path[prefix]
            for tok, lp in zip(node.children.tolist(), node.child_logp.tolist(), strict=True):
                child = (*prefix, tok)
                if tok in eos and lp > -math.inf:
                    if _passes_check(self.grammar, prefix):
                        out[child[len(self.root) :]] = weight + lp
                elif child in self.nodes:
                    path[child] = weight + lp
        return out


def _passes_check(grammar: Grammar, text: tuple[int, ...]) -> bool:
    """Whether a finished text passes the grammar's final check (a leaf's Φ: 1 or 0; the
    check keeps its verdicts)."""
    return not grammar.checked or grammar.check(text) is None


class ExactPhi(PhiEstimator):
    """Exact future validity on finite (or budget-bounded) languages, with any LM.

    Args:
        grammar: The compiled grammar; its language must be finite, or every call must carry a
            token budget (``remaining``).
        model: The Transformers causal LM whose completions are counted, or a shared
            :class:`PrefixLM` (whose row cache then serves several estimators and laws).
        tol: Stop exploring once unexplored mass ≤ ``tol`` × completed mass (0: explore all).
        max_nodes: Refuse explorations that would expand more nodes.
        max_stored: Refuse explorations that would keep more candidate tokens in memory (16
            bytes each; a free-text state admits ~10⁴ tokens per prefix).
        batch_size: Prefixes per forward.
        max_prompts: Explorations kept for this many prompts (least recently used dropped).

    Raises:
        GrammarTooLargeError: the exploration needs more than ``max_nodes`` forwards or
            ``max_stored`` candidates; the message says how much mass was left unexplored.
        InfiniteLanguageError: the language is infinite and no token budget was given.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import ExactPhi, PhiContext
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok))
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> phi = ExactPhi(g, model, tol=0.0)
        >>> ctx = PhiContext(g.initial_state, (), torch.zeros(len(tok)), prompt=(1,))
        >>> step = phi.step(ctx)
        >>> step.diagnostics.delta, int(step.log_phi.isfinite().sum())
        (0.0, 5)
    """

    name = "exact"
    needs_model = True

    def __init__(
        self,
        grammar: Grammar,
        model: Any,
        *,
        tol: float = 1e-12,
        max_nodes: int = 100_000,
        max_stored: int = 20_000_000,
        batch_size: int = 32,
        max_prompts: int = 8,
    ) -> None:
        super().__init__(grammar, model)
        self.max_prompts = check_int("max_prompts", max_prompts, minimum=1)
        self.tol = check_real("tol", tol, low=0.0, high=1.0, high_open=True)
        self.max_nodes = check_int("max_nodes", max_nodes, minimum=1)
        self.max_stored = check_int("max_stored", max_stored, minimum=1)
        self.lm = PrefixLM.wrap(model, batch_size=check_int("batch_size", batch_size, minimum=1))
        # explorations per (prompt, budget at the root), least recently used first
        self._explorations: LRU[tuple[tuple[int, ...], int | None], list[TrieExploration]] = LRU(
            self.max_prompts
        )

    # -- interface ------------------------------------------------------------------------------

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        exploration = self.exploration(ctx)
        children, log_lo = exploration.log_phi_bounds(ctx.generated)
        out = torch.full((self.grammar.vocab_size,), -torch.inf, dtype=torch.float64)
        out[children] = log_lo
        mask = torch.zeros(self.grammar.vocab_size, dtype=torch.bool)
        mask[children] = True
        return no_dead_row(out, mask)

    def additive_error(self, ctx: PhiContext) -> float | None:
        node = self.exploration(ctx).nodes[ctx.generated]
        gap = node.log_phi_hi.exp() - node.log_phi_lo.exp()
        return float(gap.max()) if len(gap) else 0.0

    # -- exploration ----------------------------------------------------------------------------

    def root_exploration(
        self, prompt: tuple[int, ...], max_new_tokens: int | None = None
    ) -> TrieExploration:
        """The exploration from the grammar's initial state after ``prompt`` (explored on first
        use, then cached): the same one generation starts from.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
            >>> from hf_fvo.phi import ExactPhi
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_choices(["yes", "no"], tok)
            >>> ex = ExactPhi(g, tiny_random_llama(len(tok)), tol=0.0).root_exploration((1,))
            >>> len(ex.completions()), ex.residual
            (6, 0.0)
        """
        g = self.grammar
        logits = torch.zeros(g.vocab_size)
        return self.exploration(
            PhiContext(g.initial_state, (), logits, max_new_tokens, tuple(prompt))
        )

    def known_law(
        self, prompt: tuple[int, ...], generated: tuple[int, ...], remaining: int | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """μ*_t at an explored prefix, from the exploration's own forwards: (children, their
        log-probabilities, normalised), or ``None`` where no exploration made so far covers
        ``generated`` (nothing is explored here).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
            >>> from hf_fvo.phi import ExactPhi
            >>> tok = load_default_tokenizer()
            >>> g, lm = Grammar.from_choices(["yes", "no"], tok), tiny_random_llama(len(tok))
            >>> phi = ExactPhi(g, lm, tol=0.0)
            >>> phi.known_law((1,), (), None) is None  # nothing explored yet
            True
            >>> _ = phi.root_exploration((1,))
            >>> children, log_law = phi.known_law((1,), (), None)
            >>> len(children), round(float(log_law.exp().sum()), 9)
            (5, 1.0)
        """
        exploration = self._covering(self._key(prompt, generated, remaining), generated)
        if exploration is None:
            return None
        node = exploration.nodes[generated]
        log_law = node.child_logp + node.log_phi_lo
        return node.children, log_law - torch.logsumexp(log_law, 0)

    def exploration(self, ctx: PhiContext) -> TrieExploration:
        """The exploration covering ``ctx.generated`` (explored on first use, then cached)."""
        if not ctx.prompt:
            raise InvalidArgumentError(
                "the exact estimator needs the prompt token ids (PhiContext.prompt)"
            )
        key = self._key(ctx.prompt, ctx.generated, ctx.remaining)
        budget = key[1]
        exploration = self._covering(key, ctx.generated)
        if exploration is not None:
            return exploration
        root_budget = None if budget is None else ctx.remaining
        if root_budget is None and not self.grammar.is_finite:
            raise InfiniteLanguageError(
                f"{self.grammar.source} is infinite (or, as a pushdown grammar, not known to be "
                "finite): the exact estimator needs a token budget (max_new_tokens)"
            )
        exploration = self._explore(ctx.prompt, ctx.generated, ctx.state, root_budget)
        self._explorations.put(key, [*self._explorations.get(key, []), exploration])
        return exploration

    def _key(
        self, prompt: tuple[int, ...], generated: tuple[int, ...], remaining: int | None
    ) -> tuple[tuple[int, ...], int | None]:
        """(prompt, budget at the root) under which explorations are kept."""
        budget = None if remaining is None else remaining + len(generated)
        longest = self.grammar.max_tokens_to_accept(self.grammar.initial_state)
        if budget is not None and longest is not None and budget > longest:
            budget = None  # every member fits with its EOS: the budget never binds
        return tuple(prompt), budget

    def _covering(
        self, key: tuple[tuple[int, ...], int | None], generated: tuple[int, ...]
    ) -> TrieExploration | None:
        for exploration in self._explorations.get(key, []):
            node = exploration.nodes.get(generated)
            # a node at the explored edge (every child unexplored) is explored afresh below it
            if node is not None and bool(torch.isfinite(node.log_phi_lo).any()):
                return exploration
        return None

    def _explore(
        self, prompt: tuple[int, ...], root: tuple[int, ...], state: int, budget: int | None
    ) -> TrieExploration:
        g = self.grammar
        eos = np.array(sorted(g.eos_token_ids), dtype=np.int64)
        ex = TrieExploration(g, prompt, root, budget)
        frontier = BestFirstFrontier()  # path log-probabilities are relative to the root
        done_log = -math.inf  # log of completed (EOS) mass
        log_tol = math.log(self.tol) if self.tol > 0 else -math.inf
        stored = 0
        batch: list[tuple[float, tuple[int, ...], Any]] = [(0.0, root, state)]
        while batch:
            if len(ex.nodes) + len(batch) > self.max_nodes:
                raise self._too_large(f"more than max_nodes={self.max_nodes} forwards", ex,
                                      frontier, done_log)  # fmt: skip
            rows = self.lm.next_logprobs(prompt, [p for _, p, _ in batch])
            for (logp_path, prefix, s), row in zip(batch, rows, strict=True):
                remaining = None if budget is None else budget - (len(prefix) - len(root))
                children = torch.nonzero(g.admissible(s, remaining)).flatten()
                child_logp = row[children]
                ex.nodes[prefix] = _Node(s, children, child_logp)
                ex.order.append(prefix)
                stored += len(children)
                toks, lps = children.numpy(), child_logp.numpy()
                ends = np.isin(toks, eos)
                if ends.any() and _passes_check(g, prefix):
                    done_log = float(np.logaddexp.reduce([done_log, *(logp_path + lps[ends])]))
                frontier.add(prefix, s, logp_path, toks[~ends], lps[~ends])
            if stored > self.max_stored:
                raise self._too_large(
                    f"more than max_stored={self.max_stored} candidate tokens in memory (the "
                    "language branches widely)", ex, frontier, done_log,
                )  # fmt: skip
            if done_log > -math.inf and frontier.log_mass() <= log_tol + done_log:
                break
            batch = []
            while len(frontier) and len(batch) < self.lm.batch_size:
                logp_path, child, parent_state, tok = frontier.pop()
                batch.append((logp_path, child, g.next_state(parent_state, tok)))
        if len(frontier):
            rest = frontier.log_mass()
            ex.residual = math.exp(rest - done_log) if done_log > -math.inf else math.inf
        self._backward(ex)
        return ex

    def _too_large(
        self, what: str, ex: TrieExploration, frontier: BestFirstFrontier, done_log: float
    ) -> GrammarTooLargeError:
        left = frontier.log_mass()
        ratio = math.exp(left - done_log) if done_log > -math.inf else math.inf
        return GrammarTooLargeError(
            f"exact Φ on {self.grammar.source} needs {what}: after expanding {len(ex.nodes)} "
            f"prefixes the unexplored mass is {ratio:.3g} × the completed mass (tol "
            f"{self.tol:g}); raise tol, max_nodes or max_stored, lower max_new_tokens, or use "
            "another estimator"
        )

    def _backward(self, ex: TrieExploration) -> None:
        """log Φ_lo / log Φ_hi per child, children before parents (reverse expansion order)."""
        eos = set(self.grammar.eos_token_ids)
        for prefix in reversed(ex.order):
            node = ex.nodes[prefix]
            lo = torch.full((len(node.children),), -torch.inf, dtype=torch.float64)
            hi = torch.zeros(len(node.children), dtype=torch.float64)  # unexplored: Φ ≤ 1
            for i, tok in enumerate(node.children.tolist()):
                if tok in eos:  # a leaf: Φ = 1 when the text passes the final check, else 0
                    lo[i] = hi[i] = 0.0 if _passes_check(self.grammar, prefix) else -math.inf
                    continue
                child = ex.nodes.get((*prefix, tok))
                if child is not None:
                    lo[i] = torch.logsumexp(child.child_logp + child.log_phi_lo, 0)
                    hi[i] = torch.logsumexp(child.child_logp + child.log_phi_hi, 0)
            node.log_phi_lo, node.log_phi_hi = lo, hi
