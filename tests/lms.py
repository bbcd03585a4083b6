"""Small language models built in the tests: a bigram LM with a table we control, and a tiny
random Llama."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from hf_fvo.models import tiny_random_llama


class BigramLM(torch.nn.Module):
    """logits(next | prefix) = table[last token]: a Markov model with exactly known laws.

    It answers the keyword interface ``PrefixLM`` uses (``input_ids``, ``attention_mask``).
    """

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table.float(), requires_grad=False)

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(logits=self.table[input_ids])

    def logprob(self, prompt: tuple[int, ...], seq: tuple[int, ...]) -> float:
        """log p(seq | prompt), computed directly from the table."""
        logp = torch.log_softmax(self.table.double(), dim=-1)
        prev, total = prompt[-1], 0.0
        for t in seq:
            total += float(logp[prev, t])
            prev = t
        return total


def random_bigram(vocab_size: int, seed: int = 0, scale: float = 3.0) -> BigramLM:
    g = torch.Generator().manual_seed(seed)
    return BigramLM(torch.randn(vocab_size, vocab_size, generator=g) * scale)


def tiny_llama(vocab_size: int, eos_token_id: int, seed: int = 0):
    """A tiny random Llama with sharpened logits, so the laws under test differ visibly."""
    return tiny_random_llama(vocab_size, eos_token_id=eos_token_id, seed=seed, sharpness=8.0)
