"""The Transformers side: logits processors that apply the grammar and Φ̂ inside ``generate``,
and the grammar-aware draft of FVO-Spec (speculative decoding that samples μ*)."""

from hf_fvo.generation.generate import generate
from hf_fvo.generation.grammar_draft import GrammarCandidateGenerator
from hf_fvo.generation.processors import FVOLogitsProcessor, GrammarLogitsProcessor
from hf_fvo.generation.speculative import GrammarAwareCandidateGenerator, SpeculationStats

__all__ = [
    "FVOLogitsProcessor",
    "GrammarAwareCandidateGenerator",
    "GrammarCandidateGenerator",
    "GrammarLogitsProcessor",
    "SpeculationStats",
    "generate",
]
