"""hf_fvo: grammar-constrained generation for Hugging Face Transformers that samples the
grammar-conditional distribution μ* rather than the locally masked μ_proj.

Layout follows the math: ``grammar`` (admissible sets A_t) → ``phi`` (future-validity
estimators Φ̂) → ``generation`` (Transformers side: row tracker, processors, FVO-Spec drafting)
→ ``training`` (learned Φ) and ``eval`` (exact laws, benchmarks); ``models`` holds the embedded
default model and Markov LMs, ``errors`` every typed error. The names below are the ones most
users need; everything else is one package down (``docs/api.md``).
"""

from hf_fvo.errors import GrammarError
from hf_fvo.generation import (
    CUSTOM_GENERATE,
    FVOLogitsProcessor,
    GrammarAwareCandidateGenerator,
    GrammarLogitsProcessor,
    generate,
)
from hf_fvo.grammar import Grammar, GrammarCompiler

__version__ = "0.1.0"

__all__ = [
    "CUSTOM_GENERATE",
    "FVOLogitsProcessor",
    "Grammar",
    "GrammarAwareCandidateGenerator",
    "GrammarCompiler",
    "GrammarError",
    "GrammarLogitsProcessor",
    "__version__",
    "generate",
]
