"""Markov (n-gram) language models as Transformers models.

A Markov LM of order k predicts the next token from the last k tokens only, so exact future
validity Φ is a finite dynamic program over (context × grammar state × remaining length). Here it
is a real ``PreTrainedModel``: ``generate()``, beam search and assisted generation run on it
unchanged, which lets every estimator be measured against ground truth through the same path a
real model takes.

The KV cache is a one-layer ``DynamicCache`` that holds the token history (as float key vectors
of width 1), so cropping (assisted generation), reordering (beam search) and batch expansion are
Transformers' own cache operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DynamicCache,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

from hf_fvo.errors import InvalidArgumentError

__all__ = ["MarkovConfig", "MarkovLM"]


class MarkovConfig(PretrainedConfig):
    """Configuration of :class:`MarkovLM`: ``vocab_size`` tokens, context of ``order`` tokens.

    Positions before the first token read ``start_token_id`` (default: the BOS id, else 0).
    """

    model_type = "fvo_markov"

    def __init__(
        self,
        vocab_size: int = 3,
        order: int = 1,
        start_token_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("num_hidden_layers", 1)  # the history cache has one layer
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.order = int(order)
        if start_token_id is None:
            bos = getattr(self, "bos_token_id", None)
            start_token_id = bos if bos is not None else 0
        self.start_token_id = int(start_token_id)


class MarkovLM(PreTrainedModel, GenerationMixin):
    """p(next | last ``order`` tokens) from a table of ``vocab_size**order`` rows.

    The table is stored as float64 log-probabilities (``log_probs``, rows normalised); the
    forward returns them as logits in the model's dtype.

    Example:
        >>> import torch
        >>> from hf_fvo.models import MarkovLM
        >>> lm = MarkovLM.random(vocab_size=4, order=1, seed=0, eos_token_id=3)
        >>> out = lm.generate(torch.tensor([[0]]), max_new_tokens=5, do_sample=False)
        >>> out.shape[0], bool((out < 4).all())
        (1, True)
        >>> MarkovLM.from_table(lm.transition_table()).log_probs.shape
        torch.Size([4, 4])
    """

    config_class = MarkovConfig
    base_model_prefix = "markov"
    main_input_name = "input_ids"
    _supports_cache_class = True
    _is_stateful = False

    def __init__(self, config: MarkovConfig) -> None:
        super().__init__(config)
        rows = config.vocab_size**config.order
        uniform = torch.full(
            (rows, config.vocab_size), 1.0 / config.vocab_size, dtype=torch.float64
        )
        self.log_probs = torch.nn.Parameter(uniform.log(), requires_grad=False)
        self.post_init()

    def _init_weights(self, module: Any) -> None:  # the table is set explicitly
        pass

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def from_table(cls, table: Any, **config_kwargs: Any) -> MarkovLM:
        """From transition probabilities: shape ``(V,)*order + (V,)`` or ``(V**order, V)``.

        Raises:
            ValueError: negative entries, a row that does not sum to 1, or a bad shape.
        """
        t = torch.as_tensor(table, dtype=torch.float64)
        vocab = t.shape[-1]
        order = config_kwargs.pop("order", None)
        if order is None:
            order = t.dim() - 1 if t.dim() > 2 else _order_of(t.shape[0], vocab)
        t = t.reshape(-1, vocab)
        if t.shape[0] != vocab**order:
            raise InvalidArgumentError(
                f"a table of order {order} over {vocab} tokens needs {vocab**order} rows"
            )
        if (t < 0).any() or not torch.allclose(t.sum(-1), torch.ones(len(t), dtype=t.dtype)):
            raise InvalidArgumentError("transition rows must be non-negative and sum to 1")
        model = cls(MarkovConfig(vocab_size=vocab, order=order, **config_kwargs))
        with torch.no_grad():
            model.log_probs.copy_(t.log())
        return model.eval()

    @classmethod
    def random(
        cls, vocab_size: int, order: int = 1, *, seed: int = 0, temperature: float = 1.0,
        **config_kwargs: Any,
    ) -> MarkovLM:  # fmt: skip
        """Rows softmax(g / temperature) with i.i.d. standard normal logits g (seeded)."""
        if temperature <= 0:
            raise InvalidArgumentError(f"temperature must be positive, got {temperature}")
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(vocab_size**order, vocab_size, generator=g, dtype=torch.float64)
        table = torch.softmax(logits / temperature, dim=-1)
        return cls.from_table(table, order=order, **config_kwargs)

    @classmethod
    def fit(
        cls, sequences: Iterable[Sequence[int]], vocab_size: int, order: int = 1, *,
        add_k: float = 1.0, **config_kwargs: Any,
    ) -> MarkovLM:  # fmt: skip
        """Maximum likelihood with add-k smoothing from token sequences (contexts before the
        first token read ``start_token_id``)."""
        if add_k < 0:
            raise InvalidArgumentError(f"add_k must be non-negative, got {add_k}")
        config = MarkovConfig(vocab_size=vocab_size, order=order, **config_kwargs)
        counts = torch.full((vocab_size**order, vocab_size), float(add_k), dtype=torch.float64)
        for seq in sequences:
            context = [config.start_token_id] * order
            for tok in seq:
                if not 0 <= tok < vocab_size:
                    raise InvalidArgumentError(
                        f"token {tok} is outside the vocabulary of {vocab_size}"
                    )
                counts[_index(context, vocab_size), tok] += 1
                context = [*context[1:], tok]
        empty = counts.sum(-1) == 0
        counts[empty] = 1.0  # unseen contexts with add_k = 0: uniform
        return cls.from_table(counts / counts.sum(-1, keepdim=True), order=order, **config_kwargs)

    # -- the model ------------------------------------------------------------------------------

    def transition_table(self) -> torch.Tensor:
        """p(next | context) as float64, shape ``(V**order, V)`` (row = context index)."""
        return self.log_probs.detach().exp()

    def context_index(self, context: Sequence[int]) -> int:
        """Row of the table for the last ``order`` tokens (oldest first)."""
        return _index(context, self.config.vocab_size)

    def context_of(self, ids: Sequence[int]) -> int:
        """Row of the table that predicts the token after ``ids`` (a non-empty history),
        reading ``start_token_id`` before the first token, as the forward does."""
        order = self.config.order
        if not ids:
            raise InvalidArgumentError("a Markov LM needs at least one token of history")
        padded = [self.config.start_token_id] * (order - 1) + [int(t) for t in ids]
        return _index(padded[len(padded) - order :], self.config.vocab_size)

    def get_input_embeddings(self) -> None:
        return None

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        cache: Any = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        new = input_ids.shape[1]
        if past_key_values is None:  # transformers ≥ 5.24 passes the cache as `cache`
            past_key_values = cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        if past_key_values is not None:
            ids = input_ids.to(torch.float64)[:, None, :, None]
            history = past_key_values.update(ids, ids, 0)[0][:, 0, :, 0].long()
        else:
            history = input_ids
        total = history.shape[1]
        if attention_mask is not None and attention_mask.shape[1] != total:
            attention_mask = None  # a mask for the new tokens only: nothing is padded
        contexts = self._contexts(history, attention_mask)[:, total - new :]
        logits = self.log_probs[contexts].to(self.dtype)
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            logits = logits[:, -logits_to_keep:]
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values)

    def _contexts(self, history: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Table row after each position: the last ``order`` real tokens up to it."""
        order, vocab = self.config.order, self.config.vocab_size
        batch, total = history.shape
        if mask is None or bool(mask.all()):
            start = torch.full((batch, order - 1), self.config.start_token_id, dtype=torch.long)
            padded = torch.cat([start.to(history.device), history], dim=1)
            out = torch.zeros(batch, total, dtype=torch.long, device=history.device)
            for i in range(order):  # oldest first
                out = out * vocab + padded[:, i : i + total]
            return out
        out = torch.zeros(batch, total, dtype=torch.long, device=history.device)
        for b in range(batch):
            real = history[b] if mask is None else history[b].masked_fill(mask[b] == 0, -1)
            context = [self.config.start_token_id] * order
            row = out[b]
            for t, tok in enumerate(real.tolist()):
                if tok >= 0:  # padding keeps the context it found
                    context = [*context[1:], tok]
                row[t] = _index(context, vocab)
        return out


def _index(context: Sequence[int], vocab: int) -> int:
    index = 0
    for tok in context:
        index = index * vocab + int(tok)
    return index


def _order_of(rows: int, vocab: int) -> int:
    order, size = 0, 1
    while size < rows:
        order, size = order + 1, size * vocab
    if size != rows:
        raise InvalidArgumentError(f"{rows} rows is not a power of the vocabulary size {vocab}")
    return order


AutoConfig.register(MarkovConfig.model_type, MarkovConfig, exist_ok=True)
AutoModelForCausalLM.register(MarkovConfig, MarkovLM, exist_ok=True)
