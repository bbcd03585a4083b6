"""Batched next-token log-probabilities of a causal LM after ``prompt + prefix``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PrefixLM"]


class PrefixLM:
    """Runs ``model`` on many prefixes of one prompt at once (left padding, explicit positions).

    Args:
        model: A Transformers causal LM.
        batch_size: Prefixes per forward.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from hf_fvo.phi.lm import PrefixLM
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8,
        ...     intermediate_size=16, num_hidden_layers=1, num_attention_heads=2))
        >>> rows = PrefixLM(model).next_logprobs((1, 2), [(), (3,), (3, 4)])
        >>> rows.shape, bool(torch.allclose(rows.exp().sum(-1), torch.ones(3, dtype=rows.dtype)))
        (torch.Size([3, 16]), True)
    """

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = int(batch_size)
        self.forwards = 0  # prefixes evaluated, for cost accounting

    @torch.no_grad()
    def next_logprobs(
        self, prompt: Sequence[int], prefixes: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """log p(· | prompt + prefix) for each prefix, float64, shape (len(prefixes), V)."""
        device = next(self.model.parameters()).device
        rows = []
        for start in range(0, len(prefixes), self.batch_size):
            chunk = [tuple(prompt) + tuple(p) for p in prefixes[start : start + self.batch_size]]
            width = max(len(s) for s in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for i, seq in enumerate(chunk):
                if seq:
                    ids[i, width - len(seq) :] = torch.tensor(seq)
                    mask[i, width - len(seq) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            out = self.model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                use_cache=False,
            )
            rows.append(torch.log_softmax(out.logits[:, -1].double(), dim=-1).cpu())
            self.forwards += len(chunk)
        return torch.cat(rows)
