"""Small language models built in the tests: a bigram (Markov) LM with a table we control, and a
tiny random Llama."""

from __future__ import annotations

import torch

from hf_fvo.models import MarkovConfig, MarkovLM, tiny_random_llama


class BigramLM(MarkovLM):
    """An order-1 :class:`~hf_fvo.models.MarkovLM` built from a logits table we control:
    logits(next | prefix) = table[last token], so laws are exactly known. A real Transformers
    model, so ``PrefixLM`` runs it with its key/value cache like any other."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__(MarkovConfig(vocab_size=table.shape[-1], order=1))
        with torch.no_grad():
            self.log_probs.copy_(torch.log_softmax(table.double(), dim=-1))
        self.eval()

    @property
    def table(self) -> torch.Tensor:
        """The normalised log-probabilities (valid logits)."""
        return self.log_probs.detach()

    def logprob(self, prompt: tuple[int, ...], seq: tuple[int, ...]) -> float:
        """log p(seq | prompt), computed directly from the table."""
        prev, total = prompt[-1], 0.0
        for t in seq:
            total += float(self.table[prev, t])
            prev = t
        return total


def random_bigram(vocab_size: int, seed: int = 0, scale: float = 3.0) -> BigramLM:
    g = torch.Generator().manual_seed(seed)
    return BigramLM(torch.randn(vocab_size, vocab_size, generator=g) * scale)


def tiny_llama(vocab_size: int, eos_token_id: int, seed: int = 0):
    """A tiny random Llama with sharpened logits, so the laws under test differ visibly."""
    return tiny_random_llama(vocab_size, eos_token_id=eos_token_id, seed=seed, sharpness=8.0)
