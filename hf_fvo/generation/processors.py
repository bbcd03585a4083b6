"""Logits processors that constrain generation to a grammar.

A processor here is a pure function of ``input_ids``: the grammar state is recomputed from the
generated tokens (memoised by prefix), never advanced per call. That is what makes it correct
under beam search and assisted generation, where Transformers calls processors on prefixes that
are later discarded.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from transformers import LogitsProcessor

from hf_fvo.grammar import Grammar, OutOfGrammarError

__all__ = ["GrammarLogitsProcessor"]


class GrammarLogitsProcessor(LogitsProcessor):
    r"""Masks every token outside the admissible set A_t (scores set to ``-inf``).

    This samples the locally projected law μ_proj (Φ ≡ 1). Unlike per-row stateful processors,
    it may be called on any prefix in any order. After EOS a row stays in the terminal state,
    where EOS is allowed, whatever padding follows.

    Compose it before warpers (temperature, top-k, top-p): Transformers applies processors in
    list order, and ``generate(logits_processor=[...])`` runs custom processors after its own.

    Args:
        grammar (`Grammar`): The compiled automaton; its ``vocab_size`` may be smaller than the
            scores' width, extra ids are masked.
        prompt_length (`int`, *optional*): Number of prompt tokens in ``input_ids`` (after left
            padding). Default: the width of the first ``input_ids`` this processor sees, so use
            a fresh processor per ``generate`` call.
        cache_size (`int`): Prefixes and masks remembered (LRU).

    Raises:
        OutOfGrammarError: a row's generated tokens leave the grammar (e.g. a prefix forced by
            the caller), or the scores are narrower than the grammar's vocabulary.

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
        self, grammar: Grammar, prompt_length: int | None = None, cache_size: int = 4096
    ) -> None:
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be an hf_fvo.Grammar, got {type(grammar).__name__}")
        if prompt_length is not None and (not isinstance(prompt_length, int) or prompt_length < 0):
            raise ValueError(f"prompt_length must be a non-negative int, got {prompt_length!r}")
        self.grammar = grammar
        self.prompt_length = prompt_length
        self._cache_size = int(cache_size)
        self._states: OrderedDict[tuple[int, ...], int] = OrderedDict()
        self._masks: OrderedDict[int, torch.Tensor] = OrderedDict()

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

    def _mask(self, state: int) -> torch.Tensor:
        mask = self._masks.get(state)
        if mask is None:
            mask = self.grammar.allowed(state)
            self._remember(self._masks, state, mask)
        return mask

    def _remember(self, cache: OrderedDict, key, value) -> None:
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        width = scores.shape[-1]
        if width < self.grammar.vocab_size:
            raise OutOfGrammarError(
                f"scores have {width} columns but the grammar was compiled for vocab_size "
                f"{self.grammar.vocab_size}"
            )
        rows = input_ids[:, self.prompt_length :].tolist()
        allowed = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        for r, generated in enumerate(rows):
            mask = self._mask(self.state_of(tuple(generated)))
            allowed[r, : mask.shape[0]] = mask.to(scores.device)
        return scores.masked_fill(~allowed, -float("inf"))
