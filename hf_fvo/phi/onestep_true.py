"""OneStep-true: Φ̂(y) = Σ_{u ∈ A_{t+1}(x y)} p(u | x, y) for the top-K candidates.

One extra batched forward over the K most likely candidates (ranked by p_t·OneStep) replaces the
context-independence proxy of OneStep-cheap by the true next-step distribution; the remaining
candidates keep the cheap value. Seed 000 Prop. 10: the result still overestimates Φ by the
probability of dead ends two or more steps ahead.
"""

from __future__ import annotations

from typing import Any

import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.phi.base import PhiContext
from hf_fvo.phi.lm import PrefixLM
from hf_fvo.phi.onestep import OneStepPhi

__all__ = ["OneStepTruePhi"]


class OneStepTruePhi(OneStepPhi):
    """OneStep with the model's own next-step distribution for the top-``k`` candidates.

    Args:
        grammar: The compiled grammar.
        model: The causal LM, or a shared :class:`PrefixLM` (one extra batched forward of up
            to ``k`` prefixes per position).
        k: Candidates that get the true one-step value.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import OneStepTruePhi, PhiContext
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok))
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> est = OneStepTruePhi(g, model, k=2)
        >>> ctx = PhiContext(g.initial_state, (), torch.zeros(len(tok)), prompt=(1,))
        >>> int(est.log_phi(ctx).isfinite().sum()), est.lm.forwards  # the prompt, then 2 prefixes
        (5, 3)
    """

    name = "onestep_true"
    needs_model = True

    def __init__(self, grammar: Grammar, model: Any, k: int = 8) -> None:
        super().__init__(grammar, model)
        if not isinstance(k, int) or k < 1:
            raise InvalidArgumentError(f"k must be a positive int, got {k!r}")
        self.k = k
        self.lm = PrefixLM.wrap(model, batch_size=k)

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        if not ctx.prompt:
            raise InvalidArgumentError(
                "onestep_true needs the prompt token ids (PhiContext.prompt)"
            )
        g = self.grammar
        out = super().log_phi(ctx)
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)[: g.vocab_size]
        eos = list(g.eos_token_ids)
        score = logp + out
        score[eos] = -torch.inf  # Φ(EOS) = 1 already
        finite = int(torch.isfinite(score).sum())
        if finite == 0:
            return out
        top = torch.topk(score, min(self.k, finite)).indices.tolist()
        rows = self.lm.next_logprobs(ctx.prompt, [(*ctx.generated, y) for y in top])
        after = None if ctx.remaining is None else ctx.remaining - 1
        for y, row in zip(top, rows, strict=True):
            nxt = g.next_state(ctx.state, y)
            allowed = g.admissible(nxt, after)
            out[y] = torch.logsumexp(row[: allowed.shape[0]][allowed], 0)
        return out
