"""One prompt's key/value cache shared by N rows that continue it (particles).

N particles of one prompt differ only after it, yet a batched ``DynamicCache`` holds N copies of
the prompt's keys and values, copies them all again at every step (it grows by
concatenation), and every row's attention reads its own copy: with a long prompt (a JSON
schema) that, not the weights, is most of an N-row decoding step on a CPU. A
:class:`SharedPrefixCache` keeps the prompt once and each row's own tokens in a buffer that
grows by doubling; a registered attention function attends every row's queries to the shared
prompt in one matrix product, to the row's own tokens in another, and joins the two softmaxes
exactly (one normaliser over both parts). The result is the same attention, to float rounding.

It applies to models whose attention goes through Transformers' attention interface with the
plain causal pattern (Llama, Mistral without a sliding window, Qwen2, SmolLM2…):
:func:`shared_prefix_supported` says when; otherwise callers keep a ``DynamicCache``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from hf_fvo.errors import InvalidArgumentError

__all__ = ["SharedPrefixCache", "shared_prefix", "shared_prefix_supported"]

NAME = "hf_fvo_shared_prefix"
_ACTIVE: contextvars.ContextVar[SharedPrefixCache | None] = contextvars.ContextVar(
    "hf_fvo_shared_prefix", default=None
)
_PLAIN = ("sdpa", "eager")  # implementations whose arithmetic the shared path reproduces


def shared_prefix_supported(model: Any) -> bool:
    """Whether ``model``'s decoding steps can read one shared prompt cache: a Transformers
    model whose every layer is plain causal attention (no sliding window, no soft-capping,
    no attention sinks) run by ``sdpa`` or ``eager``.

    Example:
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.models.shared_prefix import shared_prefix_supported
        >>> shared_prefix_supported(tiny_random_llama(16)), shared_prefix_supported(object())
        (True, False)
    """
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in _PLAIN:
        return False
    if getattr(config, "is_encoder_decoder", False):
        return False
    for key in ("sliding_window", "attn_logit_softcapping", "use_sliding_window"):
        if getattr(config, key, None):
            return False
    types = getattr(config, "layer_types", None)
    if types is not None and any(t != "full_attention" for t in types):
        return False
    return getattr(config, "model_type", None) in _MODEL_TYPES


# Decoder-only models whose attention module calls the interface with (query, key, value,
# mask, scaling) and nothing else that changes the arithmetic (no sinks, no position bias).
_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2", "granite",
                          "phi3", "starcoder2", "smollm3", "helium"})  # fmt: skip


class _Layer(DynamicLayer):
    """One layer: the prompt's keys/values (batch 1) and each row's own (a growing buffer)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: int) -> None:
        self.is_initialized = True
        self.prefix_keys, self.prefix_values = keys, values  # (1, heads, P, dim)
        self.device = keys.device
        heads, dim = keys.shape[1], keys.shape[3]
        self._buf_k = keys.new_empty(rows, heads, 16, dim)
        self._buf_v = values.new_empty(rows, heads, 16, dim)
        self.length = 0

    @property
    def keys(self) -> torch.Tensor:  # the rows' own keys (a view of the buffer)
        return self._buf_k[:, :, : self.length]

    @keys.setter
    def keys(self, value: Any) -> None:  # the base class's constructor sets it
        pass

    @property
    def values(self) -> torch.Tensor:
        return self._buf_v[:, :, : self.length]

    @values.setter
    def values(self, value: Any) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[2]
        need = self.length + new
        if need > self._buf_k.shape[2]:
            size = max(need, 2 * self._buf_k.shape[2])
            for name in ("_buf_k", "_buf_v"):
                old = getattr(self, name)
                grown = old.new_empty(old.shape[0], old.shape[1], size, old.shape[3])
                grown[:, :, : self.length] = old[:, :, : self.length]
                setattr(self, name, grown)
        self._buf_k[:, :, self.length : need] = key_states
        self._buf_v[:, :, self.length : need] = value_states
        self.length = need
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.prefix_keys.shape[2] + self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def reorder_cache(self, index: torch.Tensor) -> None:
        index = index.to(self.device)
        self._buf_k = self._buf_k.index_select(0, index)
        self._buf_v = self._buf_v.index_select(0, index)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0 or -tokens_to_remove > self.length:
            raise InvalidArgumentError("a shared-prefix cache crops only its rows' own tokens")
        self.length += tokens_to_remove


class SharedPrefixCache(Cache):
    """The cache of N rows that continue one prompt: built from the prompt's ``DynamicCache``
    (batch 1), it keeps the prompt once and each row's tokens apart. Read it only inside
    :func:`shared_prefix` (the attention that knows the layout).

    Example:
        >>> import torch
        >>> from transformers import DynamicCache
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.models.shared_prefix import SharedPrefixCache, shared_prefix
        >>> model = tiny_random_llama(32)
        >>> prompt = DynamicCache()
        >>> _ = model(torch.tensor([[1, 2, 3]]), past_key_values=prompt, use_cache=True)
        >>> cache = SharedPrefixCache.from_prompt(prompt, rows=4)
        >>> with shared_prefix(model, cache):
        ...     logits = model(torch.tensor([[4], [5], [6], [7]]), past_key_values=cache,
        ...                    use_cache=True).logits
        >>> logits.shape[0], cache.get_seq_length()
        (4, 4)
    """

    def __init__(self, layers: list[_Layer]) -> None:
        super().__init__(layers=layers)

    @classmethod
    def from_prompt(cls, prompt_cache: Any, rows: int) -> SharedPrefixCache:
        """The N-row cache continuing a batch-1 prompt cache (its tensors are shared, not
        copied)."""
        layers = []
        for layer in prompt_cache.layers:
            if layer.keys is None or layer.keys.shape[0] != 1:
                raise InvalidArgumentError("the prompt cache must hold one row")
            layers.append(_Layer(layer.keys, layer.values, rows))
        return cls(layers)

    def prefix(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        return layer.prefix_keys, layer.prefix_values

    def reorder_cache(self, index: torch.Tensor) -> None:
        """Rows ``index`` (resampled particles: the prompt is untouched)."""
        for layer in self.layers:
            layer.reorder_cache(index)


@contextlib.contextmanager
def shared_prefix(model: Any, cache: SharedPrefixCache) -> Iterator[None]:
    """Run ``model``'s forwards with ``cache`` through the shared-prefix attention (the model's
    attention implementation is switched for the block and restored after it)."""
    _register()
    config = model.config
    before = config._attn_implementation
    token = _ACTIVE.set(cache)
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
        _ACTIVE.reset(token)


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    _REGISTERED = True


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of N rows' queries (N, H, q, d) to the shared prompt's keys and to each row's
    own (``key``, ``value``: (N, kvH, t, d), the new tokens included), with one softmax over
    both. ``attention_mask`` (bool or additive, over prompt + own keys) applies to both parts."""
    cache = _ACTIVE.get()
    if cache is None:
        raise RuntimeError("the shared-prefix attention ran outside shared_prefix()")
    pk, pv = cache.prefix(module.layer_idx)
    rows, heads, q, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    plen, own = pk.shape[2], key.shape[2]
    # the prompt: every row's queries of a key head in one product with the single copy
    qp = query.reshape(rows, kv_heads, group * q, dim).transpose(0, 1)  # (kvH, N, gq, d)
    qp = qp.reshape(kv_heads, rows * group * q, dim)
    s_prompt = torch.matmul(qp, pk[0].transpose(1, 2))  # (kvH, N·gq, P)
    s_prompt = s_prompt.reshape(kv_heads, rows, group * q, plen).transpose(0, 1)
    qs = query.reshape(rows, kv_heads, group * q, dim)
    s_own = torch.matmul(qs, key.transpose(2, 3))  # (N, kvH, gq, t)
    scores = torch.cat([s_prompt, s_own], dim=-1).float() * scale
    scores = scores.reshape(rows, heads, q, plen + own)
    if attention_mask is not None:
        mask = attention_mask[..., -(plen + own) :]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    elif q > 1:  # causal among the new queries (the last q of all keys)
        width = plen + own
        visible = torch.ones(q, width, dtype=torch.bool, device=query.device).tril(width - q)
        scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1).to(query.dtype)
    weights = weights.reshape(rows, kv_heads, group * q, plen + own)
    w_prompt = weights[..., :plen].transpose(0, 1).reshape(kv_heads, rows * group * q, plen)
    out = torch.matmul(w_prompt, pv[0]).reshape(kv_heads, rows, group * q, dim).transpose(0, 1)
    out = out + torch.matmul(weights[..., plen:], value)
    out = out.reshape(rows, heads, q, dim).transpose(1, 2).contiguous()
    return out, None
