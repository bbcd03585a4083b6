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
    """One layer: the prompt's keys/values (batch 1) and each row's own (a zero-filled buffer
    that grows by doubling; row r's own tokens are its first ``lengths[r]`` positions)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: int) -> None:
        self.is_initialized = True
        self.prefix_keys, self.prefix_values = keys, values  # (1, heads, P, dim)
        self.device = keys.device
        heads, dim = keys.shape[1], keys.shape[3]
        self._buf_k = keys.new_zeros(rows, heads, 16, dim)  # zeros: unwritten slots are finite
        self._buf_v = values.new_zeros(rows, heads, 16, dim)

    @property
    def keys(self) -> Any:  # the base class's attribute; the rows' keys are in the buffer
        return self._buf_k

    @keys.setter
    def keys(self, value: Any) -> None:  # the base class's constructor sets it
        pass

    @property
    def values(self) -> Any:
        return self._buf_v

    @values.setter
    def values(self, value: Any) -> None:
        pass

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor, plan: _Plan) -> None:
        """Store a forward's new keys/values, packed (1, heads, T, dim) or one block per row
        (rows, heads, q, dim), at the places ``plan`` gives them."""
        if plan.longest > self._buf_k.shape[2]:
            size = max(plan.longest, 2 * self._buf_k.shape[2])
            for name in ("_buf_k", "_buf_v"):
                old = getattr(self, name)
                grown = old.new_zeros(old.shape[0], old.shape[1], size, old.shape[3])
                grown[:, :, : old.shape[2]] = old
                setattr(self, name, grown)
        k = _packed(key_states, plan).transpose(0, 1)  # (T, heads, dim)
        v = _packed(value_states, plan).transpose(0, 1)
        self._buf_k[plan.row, :, plan.slot] = k
        self._buf_v[plan.row, :, plan.slot] = v

    def get_max_length(self) -> int:
        return -1

    def reorder_cache(self, index: torch.Tensor) -> None:
        index = index.to(self.device)
        self._buf_k = self._buf_k.index_select(0, index)
        self._buf_v = self._buf_v.index_select(0, index)


class _Plan:
    """Where a forward's T new tokens go: token t is row ``row[t]``'s own token ``slot[t]``
    (its position after the prompt), the ``offset[t]``-th of the ``counts[row]`` it brings."""

    def __init__(self, before: torch.Tensor, counts: list[int]) -> None:
        device = before.device
        self.before = before
        self.counts = torch.tensor(counts, dtype=torch.long, device=device)
        self.rows = len(counts)
        rows = [r for r, c in enumerate(counts) for _ in range(c)]
        offsets = [j for c in counts for j in range(c)]
        self.row = torch.tensor(rows, dtype=torch.long, device=device)
        self.offset = torch.tensor(offsets, dtype=torch.long, device=device)
        self.slot = before[self.row] + self.offset
        self.width = max(counts)  # most new tokens of a row
        self.longest = int((before + self.counts).max())  # longest row after the forward
        self.uniform = min(counts) == self.width


def _packed(states: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """(heads, T, dim) from a forward's packed (1, heads, T, dim) or per-row
    (rows, heads, q, dim) states."""
    if states.shape[0] == 1:
        return states[0]
    return states.transpose(0, 1).reshape(states.shape[1], -1, states.shape[3])


class SharedPrefixCache(Cache):
    """The cache of N rows that continue one prompt: built from the prompt's ``DynamicCache``
    (batch 1), it keeps the prompt once and each row's tokens apart; rows may hold different
    numbers of tokens. Read it only inside :func:`shared_prefix` (the attention that knows
    the layout).

    A forward either gives every row the same number of new tokens (``input_ids`` of shape
    (rows, q), all rows of equal length) or, after :meth:`pack`, ``counts[r]`` tokens to row
    r packed in one sequence (shape (1, Σ counts), with the position ids :meth:`pack`
    returns). Attention masks are not read: a row attends to the prompt and to its own tokens
    up to its position.

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
        >>> positions = cache.pack([1, 3, 1, 2])  # ragged: 7 tokens in one sequence
        >>> with shared_prefix(model, cache):
        ...     logits = model(torch.tensor([[8, 9, 10, 11, 12, 13, 14]]), past_key_values=cache,
        ...                    position_ids=positions, use_cache=True).logits
        >>> logits.shape[1], cache.lengths.tolist()
        (7, [2, 4, 2, 3])
    """

    def __init__(self, layers: list[_Layer], rows: int) -> None:
        super().__init__(layers=layers)
        self.prompt_length = layers[0].prefix_keys.shape[2]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=layers[0].device)
        self._plan: _Plan | None = None  # the forward in progress
        self._next: _Plan | None = None  # set by pack() for the next forward

    @classmethod
    def from_prompt(cls, prompt_cache: Any, rows: int) -> SharedPrefixCache:
        """The N-row cache continuing a batch-1 prompt cache (its tensors are shared, not
        copied)."""
        layers = []
        for layer in prompt_cache.layers:
            if layer.keys is None or layer.keys.shape[0] != 1:
                raise InvalidArgumentError("the prompt cache must hold one row")
            layers.append(_Layer(layer.keys, layer.values, rows))
        if not layers:
            raise InvalidArgumentError("the prompt cache is empty")
        return cls(layers, rows)

    def pack(self, counts: Any) -> torch.Tensor:
        """Make the next forward a packed one: ``counts[r]`` ≥ 1 new tokens for row r, rows
        in order in one sequence. Returns its position ids, shape (1, Σ counts)."""
        counts = [int(c) for c in counts]
        if len(counts) != len(self.lengths) or min(counts, default=0) < 1:
            raise InvalidArgumentError(
                f"pack needs one count ≥ 1 per row ({len(self.lengths)} rows), got {counts}"
            )
        self._next = _Plan(self.lengths, counts)
        return (self.prompt_length + self._next.slot)[None]

    def trim(self, lengths: Any) -> None:
        """Keep each row's first ``lengths[r]`` own tokens (drop rejected speculation)."""
        lengths = torch.as_tensor(lengths, dtype=torch.long, device=self.lengths.device)
        if lengths.shape != self.lengths.shape or bool(
            ((lengths < 0) | (lengths > self.lengths)).any()
        ):
            raise InvalidArgumentError("trim keeps between 0 and each row's length of its tokens")
        self.lengths = lengths

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        if layer_idx == 0:
            self._begin(key_states)
        plan = self._plan
        assert plan is not None
        layer = self.layers[layer_idx]
        layer.write(key_states, value_states, plan)
        if layer_idx == len(self.layers) - 1:
            self.lengths = self.lengths + plan.counts
        return key_states, value_states

    def _begin(self, key_states: torch.Tensor) -> None:
        """The plan of the forward that starts: :meth:`pack`'s, or one block per row."""
        plan, self._next = self._next, None
        if plan is None:
            rows, q = key_states.shape[0], key_states.shape[2]
            if rows != len(self.lengths):
                raise InvalidArgumentError(
                    f"a forward of {rows} rows on a cache of {len(self.lengths)}: pass one row "
                    "per cache row, or pack() a ragged step"
                )
            if bool((self.lengths != self.lengths[0]).any()):
                raise InvalidArgumentError("rows of unequal lengths take a pack()ed forward")
            plan = _Plan(self.lengths, [q] * rows)
        elif key_states.shape[0] != 1 or key_states.shape[2] != len(plan.row):
            raise InvalidArgumentError(
                f"the packed forward must hold {len(plan.row)} tokens in one row"
            )
        self._plan = plan

    def prefix(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        return layer.prefix_keys, layer.prefix_values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.prompt_length + int(self.lengths.max()) if len(self.lengths) else 0

    def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        query = args[0] if args else kwargs.get("query_length", 1)
        query = query if isinstance(query, int) else int(query.shape[0])
        return self.get_seq_length() + query, 0

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` tokens of every row (Transformers' convention:
        a negative count), never the prompt's."""
        if tokens_to_remove > 0 or bool((self.lengths < -tokens_to_remove).any()):
            raise InvalidArgumentError("a shared-prefix cache crops only its rows' own tokens")
        self.lengths = self.lengths + tokens_to_remove

    def reorder_cache(self, index: torch.Tensor) -> None:
        """Rows ``index`` (resampled particles: the prompt is untouched)."""
        index = torch.as_tensor(index, dtype=torch.long)
        for layer in self.layers:
            layer.reorder_cache(index)
        self.lengths = self.lengths.index_select(0, index.to(self.lengths.device))


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
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, _no_mask)
    _REGISTERED = True


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The attention below builds its pattern from the cache's plan: no mask is made."""
    return None


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
    """Attention of the forward's new tokens (packed (1, H, T, d) or per row (N, H, q, d)) to
    the shared prompt and to their row's own tokens up to their position, as one softmax: the
    prompt part in one product of every query with the single copy, the own part per row,
    joined by their maxima and sums (as flash attention joins blocks)."""
    cache = _ACTIVE.get()
    if cache is None or cache._plan is None:
        raise RuntimeError("the shared-prefix attention ran outside shared_prefix()")
    plan = cache._plan
    layer = cache.layers[module.layer_idx]
    pk, pv = layer.prefix_keys[0], layer.prefix_values[0]  # (kvH, P, d)
    heads, dim = query.shape[1], query.shape[3]
    kv_heads = pk.shape[0]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    q = _packed(query, plan)  # (H, T, d)
    tokens = q.shape[1]
    # the prompt: every new token's queries of a key head in one product with the single copy
    s_p = torch.matmul(q.reshape(kv_heads, group * tokens, dim), pk.transpose(1, 2)).float()
    s_p = s_p * scale  # (kvH, g·T, P)
    m_p = s_p.amax(-1, keepdim=True)
    e_p = torch.exp(s_p - m_p)
    sum_p = e_p.sum(-1, keepdim=True)
    out_p = torch.matmul(e_p.to(pv.dtype), pv).float()  # (kvH, g·T, d)
    # the rows' own tokens: queries laid out per row (rows, H, width, d), causal by position
    rows, width, own = plan.rows, plan.width, plan.longest
    if plan.uniform:
        qr = q.reshape(heads, rows, width, dim)
    else:
        qr = q.new_zeros(heads, rows * width, dim)
        qr[:, plan.row * width + plan.offset] = q
        qr = qr.reshape(heads, rows, width, dim)
    qr = qr.reshape(kv_heads, group, rows, width, dim).permute(2, 0, 1, 3, 4)
    qr = qr.reshape(rows, kv_heads, group * width, dim)
    keys, values = layer._buf_k[:, :, :own], layer._buf_v[:, :, :own]
    s_o = torch.matmul(qr, keys.transpose(2, 3)).float() * scale  # (rows, kvH, g·width, own)
    s_o = s_o.reshape(rows, kv_heads, group, width, own)
    last = plan.before[:, None] + torch.arange(width, device=q.device)
    visible = torch.arange(own, device=q.device) <= last[:, :, None]  # (rows, width, own)
    s_o = s_o.masked_fill(~visible[:, None, None], float("-inf"))
    m_o = s_o.amax(-1, keepdim=True)  # finite: a row's own first key is always visible
    e_o = torch.exp(s_o - m_o)
    sum_o = e_o.sum(-1, keepdim=True)
    e_o = e_o.reshape(rows, kv_heads, group * width, own).to(values.dtype)
    out_o = torch.matmul(e_o, values).float().reshape(rows, kv_heads, group, width, dim)
    # back to the packed order (kvH, g, T, ·), then the two parts joined
    pick = (plan.row, slice(None), slice(None), plan.offset)
    m_o, sum_o, out_o = (x[pick].permute(1, 2, 0, 3) for x in (m_o, sum_o, out_o))
    m_p, sum_p, out_p = (x.reshape(kv_heads, group, tokens, -1) for x in (m_p, sum_p, out_p))
    top = torch.maximum(m_p, m_o)
    a, b = torch.exp(m_p - top), torch.exp(m_o - top)
    out = (out_p * a + out_o * b) / (sum_p * a + sum_o * b)  # (kvH, g, T, d)
    out = out.reshape(heads, tokens, dim).to(query.dtype)
    if query.shape[0] == 1:
        return out.transpose(0, 1)[None], None  # (1, T, H, d)
    return out.reshape(heads, rows, width, dim).permute(1, 2, 0, 3), None  # (rows, q, H, d)
