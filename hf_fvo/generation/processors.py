"""Logits processors that constrain generation to a grammar and reweight it by Φ̂.

A processor here is a pure function of ``input_ids``: the grammar state is recomputed from the
generated tokens (memoised by prefix), never advanced per call. That is what makes it correct
under beam search and assisted generation, where Transformers calls processors on prefixes that
are later discarded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from hf_fvo.grammar import Grammar, OutOfGrammarError
from hf_fvo.phi import Certificate, PhiContext, PhiDiagnostics, PhiEstimator, make_estimator

__all__ = ["FVOLogitsProcessor", "GrammarLogitsProcessor"]


class FVOLogitsProcessor(LogitsProcessor):
    r"""Reweights the admissible tokens by future validity: scores become log p_t(y) + log Φ̂_t(y).

    Sampling from the result draws μ̂_t(y) ∝ p_t(y)·Φ̂_t(y) on A_t, which is the grammar-conditional
    law μ* when Φ̂ is exact and the masked law μ_proj when Φ̂ ≡ 1 (``phi="uniform"``). Tokens outside
    A_t, or whose completion cannot fit in ``max_new_tokens``, get ``-inf``. After EOS a row stays
    in the terminal state, where only EOS is allowed, whatever padding follows.

    Composition: Transformers applies custom processors before its warpers, so temperature,
    top-k and top-p act on the reweighted scores (at temperature T the row samples
    ∝ (p·Φ̂)^{1/T}). Exactness claims hold at T = 1 without truncation.

    Args:
        grammar (`Grammar`): The compiled automaton.
        phi (`str` or `PhiEstimator`): ``"uniform"``, ``"onestep"``, ``"exact"`` or an estimator.
        model (*optional*): The model, for estimators that run forwards (``"exact"``).
        prompt_length (`int`, *optional*): Prompt tokens per row (after left padding). Default:
            the width of the first ``input_ids`` seen, so use a fresh processor per ``generate``.
        max_new_tokens (`int`, *optional*): The generation budget; completions must fit in it.
        cache_size (`int`): Prefixes remembered (LRU).

    Raises:
        OutOfGrammarError: a row's generated tokens leave the grammar, or the scores are
            narrower than the grammar's vocabulary.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> proc = FVOLogitsProcessor(g, phi="onestep", prompt_length=1)
        >>> scores = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
        >>> int(torch.isfinite(scores).sum())  # y, ye, yes, n, no
        5
    """

    def __init__(
        self,
        grammar: Grammar,
        phi: str | PhiEstimator = "onestep",
        model: Any = None,
        prompt_length: int | None = None,
        max_new_tokens: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be an hf_fvo.Grammar, got {type(grammar).__name__}")
        if prompt_length is not None and (not isinstance(prompt_length, int) or prompt_length < 0):
            raise ValueError(f"prompt_length must be a non-negative int, got {prompt_length!r}")
        if max_new_tokens is not None and (
            not isinstance(max_new_tokens, int) or max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        self.grammar = grammar
        self.estimator = make_estimator(phi, grammar, model)
        self.prompt_length = prompt_length
        self.max_new_tokens = max_new_tokens
        self._cache_size = int(cache_size)
        self._states: OrderedDict[tuple[int, ...], int] = OrderedDict()
        self._steps: OrderedDict[tuple[int, ...], PhiDiagnostics] = OrderedDict()

    def state_of(self, generated: tuple[int, ...]) -> int:
        """The grammar state after the generated tokens (memoised by prefix)."""
        hit = self._states.get(generated)
        if hit is not None:
            self._states.move_to_end(generated)
            return hit
        g = self.grammar
        if not generated:
            state = g.initial_state
        else:
            parent = self.state_of(generated[:-1]) if len(generated) < 64 else None
            if parent is None:
                parent = self._walk(generated[:-1])
            state = self._step(parent, generated[-1], len(generated) - 1)
        self._remember(self._states, generated, state)
        return state

    def _walk(self, generated: tuple[int, ...]) -> int:
        # Long prefixes: find the longest remembered ancestor instead of recursing.
        for cut in range(len(generated), -1, -1):
            hit = self._states.get(generated[:cut])
            if hit is not None or cut == 0:
                state = self.grammar.initial_state if hit is None else hit
                for i in range(cut, len(generated)):
                    state = self._step(state, generated[i], i)
                return state
        raise AssertionError("unreachable")

    def _step(self, state: int, token: int, position: int) -> int:
        g = self.grammar
        if state == g.terminal_state:
            return state  # the row has finished; Transformers pads it with anything
        nxt = g.next_state(state, token)
        if nxt is None:
            raise OutOfGrammarError(
                f"generated token {token} at position {position} is not allowed by "
                f"{g.source}; the prefix left the grammar"
            )
        return nxt

    def _remember(self, cache: OrderedDict, key, value) -> None:
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def step_at(self, generated: tuple[int, ...]) -> PhiDiagnostics | None:
        """Diagnostics (Φ̄_t, dispersion, δ_t) of the last Φ̂ computed at this prefix, if kept."""
        return self._steps.get(tuple(generated))

    def certificate(self, generated: Sequence[int]) -> Certificate:
        """The fidelity certificate of one generated sequence (prompt excluded): the kept
        diagnostics at each of its positions up to and including its first EOS.

        Example:
            >>> import torch
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.generation import FVOLogitsProcessor
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_choices(["yes", "no"], tok)
            >>> proc = FVOLogitsProcessor(g, phi="onestep", prompt_length=1)
            >>> _ = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
            >>> cert = proc.certificate(tok.encode("no"))  # its first step was computed above
            >>> cert.steps[0].delta is None, cert.tv_bound  # OneStep carries no bound
            (True, inf)
        """
        generated = [int(t) for t in generated]
        eos = set(self.grammar.eos_token_ids)
        end = next((i + 1 for i, t in enumerate(generated) if t in eos), len(generated))
        return Certificate(tuple(self.step_at(tuple(generated[:i])) for i in range(end)))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        width = scores.shape[-1]
        vocab = self.grammar.vocab_size
        if width < vocab:
            raise OutOfGrammarError(
                f"scores have {width} columns but the grammar was compiled for vocab_size {vocab}"
            )
        out = torch.full_like(scores, -torch.inf)
        for r, row in enumerate(input_ids.tolist()):
            prompt, generated = tuple(row[: self.prompt_length]), tuple(row[self.prompt_length :])
            state = self.state_of(generated)
            logp = torch.log_softmax(scores[r].double(), dim=-1)
            if state == self.grammar.terminal_state:
                log_phi = torch.full((vocab,), -torch.inf, dtype=torch.float64)
                log_phi[list(self.grammar.eos_token_ids)] = 0.0
            else:
                remaining = (
                    None if self.max_new_tokens is None else self.max_new_tokens - len(generated)
                )
                ctx = PhiContext(state, generated, scores[r], remaining, prompt)
                step = self.estimator.step(ctx)
                self._remember(self._steps, generated, step.diagnostics)
                log_phi = step.log_phi
                if not bool(torch.isfinite(log_phi).any()):
                    log_phi = self._out_of_budget(state)
            out[r, :vocab] = (logp[:vocab] + log_phi.to(logp.device)).to(scores.dtype)
        return out

    def _out_of_budget(self, state: Any) -> torch.Tensor:
        """Nothing admissible fits the budget (a pushdown grammar looks one token ahead, so a
        member can outgrow ``max_new_tokens``): draw from A_t, unweighted. The output is then cut
        off by the budget, never made invalid; a row of −inf would crash sampling."""
        mask = self.grammar.allowed(state)
        log_phi = torch.full((self.grammar.vocab_size,), -torch.inf, dtype=torch.float64)
        log_phi[mask] = 0.0
        return log_phi


class GrammarLogitsProcessor(FVOLogitsProcessor):
    r"""Masks every token outside the admissible set A_t: ``FVOLogitsProcessor`` with Φ ≡ 1.

    This samples the locally projected law μ_proj. Unlike Outlines' and XGrammar's per-row
    stateful processors, it may be called on any prefix in any order, so it survives beam
    search and assisted generation.

    Args:
        grammar (`Grammar`): The compiled automaton.
        prompt_length (`int`, *optional*): As in :class:`FVOLogitsProcessor`.
        max_new_tokens (`int`, *optional*): Also mask tokens whose completion cannot fit.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import GrammarLogitsProcessor
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tokenizer = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tokenizer)
        >>> proc = GrammarLogitsProcessor(g, prompt_length=1)
        >>> scores = proc(torch.tensor([[1]]), torch.zeros(1, g.vocab_size))
        >>> sorted(tokenizer.decode([i]) for i in torch.isfinite(scores[0]).nonzero().flatten())
        ['n', 'no', 'y', 'ye', 'yes']
    """

    def __init__(
        self,
        grammar: Grammar,
        prompt_length: int | None = None,
        max_new_tokens: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        super().__init__(grammar, "uniform", None, prompt_length, max_new_tokens, cache_size)
