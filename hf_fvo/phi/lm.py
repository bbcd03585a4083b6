"""Batched next-token log-probabilities of a causal LM after ``prompt + prefix``.

The prompt is run once and its KV cache is shared by every prefix (expanded over the batch).
Prefixes explored as a trie share more than the prompt: the key/value vectors of every evaluated
token are kept per prefix (``kv_bytes`` bounds that store), so a prefix whose ancestors were
evaluated costs one token — the new one attends to its ancestors' stored keys — instead of its
whole length. Prefixes without stored ancestors run in full, right-padded: under causal attention
a real token never sees the padding after it, and each row's logits are read at its last real
position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.lru import LRU
from hf_fvo.models.cache import cache_argument, output_cache

__all__ = ["PrefixLM"]

Prefix = tuple[int, ...]


class PrefixLM:
    """Runs ``model`` on many prefixes of one prompt at once.

    Args:
        model: A Transformers causal LM (any module whose output has ``.logits`` works; the
            prompt and trie caches are used when the output also carries a ``DynamicCache``).
        batch_size: Prefixes per forward.
        cache_rows: Rows remembered per (prompt, prefix), so estimators and law computations
            sharing this object never repeat a forward (0: none). A row is kept as the model's
            own logits plus their log-normaliser, so a cached row is bit-identical to a fresh one.
        kv_bytes: Memory for the per-prefix key/value store (0: every prefix runs in full).

    Example:
        >>> import torch
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.phi import PrefixLM
        >>> model = tiny_random_llama(16)
        >>> rows = PrefixLM(model).next_logprobs((1, 2), [(), (3,), (3, 4)])
        >>> rows.shape, bool(torch.allclose(rows.exp().sum(-1), torch.ones(3, dtype=rows.dtype)))
        (torch.Size([3, 16]), True)
    """

    def __init__(
        self,
        model: Any,
        batch_size: int = 32,
        cache_rows: int = 0,
        kv_bytes: int = 1 << 30,
    ) -> None:
        self.model = model
        self.batch_size = int(batch_size)
        self.cache_rows = int(cache_rows)
        self.kv_bytes = int(kv_bytes)
        self.forwards = 0  # prefixes evaluated, for cost accounting
        self.incremental = 0  # of which ran as one token over stored ancestors
        self._rows: LRU[tuple[Prefix, Prefix], tuple[torch.Tensor, float]] = LRU(
            max(self.cache_rows, 1)
        )
        self._prompt: tuple[Prefix, Any, torch.Tensor] | None = None
        # (layers, 2, heads, dim) per prefix; sized from kv_bytes once the first entry is known
        self._kv: LRU[Prefix, torch.Tensor] = LRU(1)

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
            raise InvalidArgumentError("PrefixLM needs a non-empty prompt")
        keys = [tuple(int(t) for t in p) for p in prefixes]
        rows: list[torch.Tensor | None] = [None] * len(keys)
        todo: dict[Prefix, list[int]] = {}
        for i, k in enumerate(keys):
            hit = self._rows.get((prompt, k))
            if hit is not None:
                rows[i] = hit[0].double() - hit[1]
            else:
                todo.setdefault(k, []).append(i)
        pending = list(todo)
        for start in range(0, len(pending), self.batch_size):
            chunk = pending[start : start + self.batch_size]
            logits = self._forward(prompt, chunk)
            lse = torch.logsumexp(logits.double(), dim=-1)
            for k, row_logits, z in zip(chunk, logits, lse.tolist(), strict=True):
                row = row_logits.double() - z
                for i in todo[k]:
                    rows[i] = row
                if self.cache_rows:
                    self._rows.put((prompt, k), (row_logits.clone(), z))  # not a view of the batch
        return torch.stack(rows) if rows else torch.empty(0)

    # -- forwards -------------------------------------------------------------------------------

    def _prompt_state(self, prompt: Prefix) -> tuple[Any, torch.Tensor]:
        if self._prompt is None or self._prompt[0] != prompt:
            out = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True)
            cache = output_cache(out)
            if not _is_plain_cache(cache):
                cache = None
            # a copy, not a view that would keep the whole prompt's logits alive
            self._prompt = (prompt, cache, out.logits[0, -1].cpu().clone())
            self._kv.clear()
            self.forwards += 1
        return self._prompt[1], self._prompt[2]

    def _forward(self, prompt: Prefix, prefixes: list[Prefix]) -> torch.Tensor:
        """The model's raw logits after each prefix (its dtype), shape (len(prefixes), V)."""
        cache, last = self._prompt_state(prompt)
        out = torch.empty(len(prefixes), last.shape[0], dtype=last.dtype)
        stepped, full = [], []
        for i, p in enumerate(prefixes):
            if not p:
                out[i] = last
            elif (
                cache is not None
                and self.kv_bytes
                and all(p[:j] in self._kv for j in range(1, len(p)))
            ):
                stepped.append(i)
            elif p:
                full.append(i)
        self.forwards += len(stepped) + len(full)
        self.incremental += len(stepped)
        if stepped:
            out[stepped] = self._step_forward(cache, len(prompt), [prefixes[i] for i in stepped])
        if full:
            batch = [prefixes[i] for i in full]
            if cache is not None:
                out[full] = self._full_cached_forward(cache, len(prompt), batch)
            else:  # no usable KV cache: run prompt + prefix in full (small test models)
                ids, lengths = _right_padded(batch)
                whole = torch.cat([torch.tensor([prompt]).expand(len(batch), -1), ids], dim=1)
                logits = self.model(input_ids=whole.to(self.device)).logits[:, len(prompt) :]
                out[full] = logits[torch.arange(len(batch)), lengths - 1].to(out).cpu()
        return out

    def _full_cached_forward(self, cache: Any, n_prompt: int, batch: list[Prefix]) -> torch.Tensor:
        ids, lengths = _right_padded(batch)
        width = ids.shape[1]
        shared = _expanded(cache, len(batch))
        mask = torch.ones(len(batch), n_prompt + width, dtype=torch.long)
        positions = (n_prompt + torch.arange(width)).unsqueeze(0).expand(len(batch), -1)
        logits = self._run(ids, mask, positions, shared)
        for r, p in enumerate(batch):
            for j in range(len(p)):
                self._store(p[: j + 1], shared, r, n_prompt + j)
        return logits[torch.arange(len(batch)), lengths - 1].cpu()

    def _step_forward(self, cache: Any, n_prompt: int, batch: list[Prefix]) -> torch.Tensor:
        """One new token per row, attending to the prompt and its ancestors' stored keys."""
        width = max(len(p) for p in batch) - 1  # stored ancestors per row, right-padded
        first = self._kv.get(max(batch, key=len)[:1]) if width else None  # shape and dtype
        shared = _expanded(cache, len(batch))
        mask = torch.zeros(len(batch), n_prompt + width + 1, dtype=torch.long)
        mask[:, :n_prompt] = 1
        mask[:, -1] = 1
        if width:
            assert first is not None
            path = first.new_zeros((len(batch), width, *first.shape))
            for r, p in enumerate(batch):
                for j in range(len(p) - 1):
                    path[r, j] = self._kv.get(p[: j + 1])
                mask[r, n_prompt : n_prompt + len(p) - 1] = 1
            for layer_idx, layer in enumerate(shared.layers):
                # (batch, width, heads, dim) → (batch, heads, width, dim)
                keys = path[:, :, layer_idx, 0].transpose(1, 2).to(layer.keys)
                values = path[:, :, layer_idx, 1].transpose(1, 2).to(layer.values)
                layer.keys = torch.cat([layer.keys, keys], dim=2)
                layer.values = torch.cat([layer.values, values], dim=2)
        ids = torch.tensor([[p[-1]] for p in batch])
        positions = torch.tensor([[n_prompt + len(p) - 1] for p in batch])
        logits = self._run(ids, mask, positions, shared)
        for r, p in enumerate(batch):
            self._store(p, shared, r, n_prompt + width)
        return logits[:, -1].cpu()

    def _run(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any):
        return self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            **cache_argument(self.model, cache),
        ).logits

    def _store(self, prefix: Prefix, cache: Any, row: int, position: int) -> None:
        if not self.kv_bytes or prefix in self._kv:
            return
        kv = torch.stack(
            [
                torch.stack([layer.keys[row, :, position], layer.values[row, :, position]])
                for layer in cache.layers
            ]
        ).cpu()
        room = self.kv_bytes // (kv.numel() * kv.element_size())
        if room:
            self._kv.size = room
            self._kv.put(prefix, kv)


def _is_plain_cache(cache: Any) -> bool:
    """A DynamicCache whose layers hold full (batch, heads, length, dim) key/value tensors."""
    from transformers import DynamicCache

    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer).__name__ == "DynamicLayer" for layer in layers)
        and all(
            getattr(layer, "keys", None) is not None and layer.keys.dim() == 4 for layer in layers
        )
    )


def _expanded(cache: Any, batch: int) -> Any:
    from transformers import DynamicCache

    shared = DynamicCache()
    for layer_idx, layer in enumerate(cache.layers):
        shared.update(
            layer.keys.expand(batch, -1, -1, -1),
            layer.values.expand(batch, -1, -1, -1),
            layer_idx,
        )
    return shared


def _right_padded(prefixes: list[Prefix]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prefixes)
    ids = torch.zeros(len(prefixes), width, dtype=torch.long)
    for r, p in enumerate(prefixes):
        ids[r, : len(p)] = torch.tensor(p)
    return ids, torch.tensor([len(p) for p in prefixes])
