"""hf_fvo: grammar-constrained generation for Hugging Face Transformers that samples the
grammar-conditional distribution μ* rather than the locally masked μ_proj.

Layout follows the math: ``grammar`` (admissible sets A_t) → ``phi`` (future-validity
estimators Φ̂) → ``generation`` (Transformers side: processors, FVO-Spec drafting); ``eval``
reads all three; ``models`` loads the embedded default model; ``errors`` holds every typed error.
"""

from hf_fvo.errors import GrammarError
from hf_fvo.generation import (
    FVOLogitsProcessor,
    GrammarAwareCandidateGenerator,
    GrammarLogitsProcessor,
    generate,
)
from hf_fvo.grammar import Grammar

__version__ = "0.1.0"

__all__ = [
    "FVOLogitsProcessor",
    "Grammar",
    "GrammarAwareCandidateGenerator",
    "GrammarError",
    "GrammarLogitsProcessor",
    "__version__",
    "generate",
]
