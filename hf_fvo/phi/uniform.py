"""Uniform: Φ ≡ 1 on the admissible set. Sampling with it is plain masking, the law μ_proj."""

from __future__ import annotations

import torch

from hf_fvo.phi.base import PhiContext, PhiEstimator

__all__ = ["UniformPhi"]


class UniformPhi(PhiEstimator):
    """Φ̂ ≡ 1 on A_t (restricted to completions that fit the budget): local masking.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import PhiContext, UniformPhi
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
        >>> ctx = PhiContext(g.initial_state, (), torch.zeros(g.vocab_size))
        >>> UniformPhi(g).log_phi(ctx).isfinite().sum().item()  # y, ye, yes, n, no
        5
    """

    name = "uniform"

    @property
    def is_masking(self) -> bool:
        return True

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        mask = self.grammar.admissible(ctx.state, ctx.remaining)
        # masked_fill, not out[mask] = 0: a fraction of the time on a 49k vocabulary
        return torch.zeros(mask.shape, dtype=torch.float64).masked_fill_(~mask, -torch.inf)
