"""The Transformers side: logits processors that apply the grammar and Φ̂ inside ``generate``."""

from hf_fvo.generation.generate import generate
from hf_fvo.generation.processors import FVOLogitsProcessor, GrammarLogitsProcessor

__all__ = ["FVOLogitsProcessor", "GrammarLogitsProcessor", "generate"]
