"""What hf_fvo keeps per model between calls, on the model object itself (as Transformers keeps
its compiled caches): estimators named by string, so that a second ``generate(..., phi="exact")``
reuses the first one's tables, and the token splits the model chose where the grammar fixed the
text. Each use is one named :class:`~hf_fvo.lru.LRU` table.

The memory lives and dies with the model; a copy of the model (``copy.deepcopy``, pickling)
starts with an empty one, since what it holds was computed with the original's weights. After
changing a model's weights, :func:`forget` clears it.

Example:
    >>> from hf_fvo.models import tiny_random_llama
    >>> from hf_fvo.models.memory import forget, model_memory
    >>> model = tiny_random_llama(16)
    >>> model_memory(model, "notes", size=2).put("a", 1)
    >>> model_memory(model, "notes", size=2).get("a")
    1
    >>> forget(model); model_memory(model, "notes", size=2).get("a") is None
    True
"""

from __future__ import annotations

from typing import Any

from hf_fvo.lru import LRU

__all__ = ["forget", "model_memory"]

_ATTRIBUTE = "_hf_fvo_memory"


class _Memory(dict):
    """Named LRU tables; copies of it (and of the model holding it) start empty."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _Memory:
        return _Memory()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (_Memory, ())


def model_memory(model: Any, name: str, size: int) -> LRU | None:
    """The table ``name`` kept on ``model`` (made with ``size`` entries on first use), or
    ``None`` where the model takes no attributes (then nothing is kept)."""
    memory = getattr(model, "__dict__", {}).get(_ATTRIBUTE)
    if memory is None:
        memory = _Memory()
        try:
            object.__setattr__(model, _ATTRIBUTE, memory)
        except (AttributeError, TypeError):
            return None
    table = memory.get(name)
    if table is None:
        table = memory[name] = LRU(size)
    return table


def forget(model: Any) -> None:
    """Clear everything hf_fvo keeps on ``model`` (after its weights change, say)."""
    memory = getattr(model, "__dict__", {}).get(_ATTRIBUTE)
    if memory is not None:
        memory.clear()
