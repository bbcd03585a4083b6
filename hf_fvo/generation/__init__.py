"""The Transformers side: logits processors that apply the grammar inside ``model.generate``."""

from hf_fvo.generation.processors import FVOLogitsProcessor, GrammarLogitsProcessor

__all__ = ["FVOLogitsProcessor", "GrammarLogitsProcessor"]
