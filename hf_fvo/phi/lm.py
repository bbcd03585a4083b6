"""Batched next-token log-probabilities of a causal LM after ``prompt + prefix``.

The prompt is run once and its KV cache is shared by every prefix (expanded over the batch), so a
prefix costs only its own tokens. Prefixes are right-padded: under causal attention a real token
never sees the padding after it, and each row's logits are read at its last real position.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PrefixLM"]


class PrefixLM:
    """Runs ``model`` on many prefixes of one prompt at once.

    Args:
        model: A Transformers causal LM (any module whose output has ``.logits`` works; the
            prompt cache is used when the output also carries ``past_key_values``).
        batch_size: Prefixes per forward.
        cache_rows: Log-probability rows remembered per (prompt, prefix), so estimators and law
            computations sharing this object never repeat a forward (0: none).

    Example:
        >>> import torch
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.phi import PrefixLM
        >>> model = tiny_random_llama(16)
        >>> rows = PrefixLM(model).next_logprobs((1, 2), [(), (3,), (3, 4)])
        >>> rows.shape, bool(torch.allclose(rows.exp().sum(-1), torch.ones(3, dtype=rows.dtype)))
        (torch.Size([3, 16]), True)
    """

    def __init__(self, model: Any, batch_size: int = 32, cache_rows: int = 0) -> None:
        self.model = model
        self.batch_size = int(batch_size)
        self.cache_rows = int(cache_rows)
        self.forwards = 0  # prefixes evaluated, for cost accounting
        self._rows: OrderedDict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = (
            OrderedDict()
        )
        self._prompt: tuple[tuple[int, ...], Any, torch.Tensor] | None = None

    @staticmethod
    def wrap(model: Any, **kwargs: Any) -> PrefixLM:
        """``model`` itself when it is already a :class:`PrefixLM`, else a new one."""
        return model if isinstance(model, PrefixLM) else PrefixLM(model, **kwargs)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def next_logprobs(
        self, prompt: Sequence[int], prefixes: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """log p(· | prompt + prefix) for each prefix, float64, shape (len(prefixes), V)."""
        prompt = tuple(int(t) for t in prompt)
        if not prompt:
            raise ValueError("PrefixLM needs a non-empty prompt")
        keys = [tuple(int(t) for t in p) for p in prefixes]
        rows: list[torch.Tensor | None] = [self._rows.get((prompt, k)) for k in keys]
        todo = [i for i, r in enumerate(rows) if r is None]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            for i, row in zip(chunk, self._forward(prompt, [keys[i] for i in chunk]), strict=True):
                rows[i] = row
                if self.cache_rows:
                    self._rows[(prompt, keys[i])] = row
                    while len(self._rows) > self.cache_rows:
                        self._rows.popitem(last=False)
        return torch.stack(rows) if rows else torch.empty(0)

    def _prompt_state(self, prompt: tuple[int, ...]) -> tuple[Any, torch.Tensor]:
        if self._prompt is None or self._prompt[0] != prompt:
            out = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True)
            cache = getattr(out, "past_key_values", None)
            last = torch.log_softmax(out.logits[0, -1].double(), dim=-1).cpu()
            self._prompt = (prompt, cache, last)
            self.forwards += 1
        return self._prompt[1], self._prompt[2]

    def _forward(self, prompt: tuple[int, ...], prefixes: list[tuple[int, ...]]) -> torch.Tensor:
        cache, last = self._prompt_state(prompt)
        out = torch.empty(len(prefixes), last.shape[0], dtype=torch.float64)
        busy = [i for i, p in enumerate(prefixes) if p]
        for i, p in enumerate(prefixes):
            if not p:
                out[i] = last
        if not busy:
            return out
        self.forwards += len(busy)
        width = max(len(prefixes[i]) for i in busy)
        ids = torch.zeros(len(busy), width, dtype=torch.long)
        for row, i in enumerate(busy):
            ids[row, : len(prefixes[i])] = torch.tensor(prefixes[i])
        lengths = torch.tensor([len(prefixes[i]) for i in busy])
        if cache is not None:
            logits = self._cached_forward(cache, len(prompt), ids)
        else:  # no KV cache: run prompt + prefix in full (fine for small test models)
            full = torch.cat([torch.tensor([prompt]).expand(len(busy), -1), ids], dim=1)
            logits = self.model(input_ids=full.to(self.device)).logits[:, len(prompt) :]
        picked = logits[torch.arange(len(busy)), lengths - 1].double()
        out[busy] = torch.log_softmax(picked, dim=-1).cpu()
        return out

    def _cached_forward(self, cache: Any, n_prompt: int, ids: torch.Tensor) -> torch.Tensor:
        from transformers import DynamicCache

        batch, width = ids.shape
        shared = DynamicCache()
        for layer_idx, layer in enumerate(cache.layers):
            shared.update(
                layer.keys.expand(batch, -1, -1, -1).contiguous(),
                layer.values.expand(batch, -1, -1, -1).contiguous(),
                layer_idx,
            )
        mask = torch.ones(batch, n_prompt + width, dtype=torch.long)
        positions = (n_prompt + torch.arange(width)).unsqueeze(0).expand(batch, -1)
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            past_key_values=shared,
            use_cache=True,
        ).logits
