"""hf_fvo: grammar-constrained generation for Hugging Face Transformers that samples the
grammar-conditional distribution μ* rather than the locally masked μ_proj.

Layout follows the math: ``grammar`` (admissible sets A_t) → ``phi`` (future-validity
estimators Φ̂) → ``generation`` (Transformers side); ``eval`` reads all three; ``models`` loads
the embedded default model.
"""

from hf_fvo.generation import FVOLogitsProcessor, GrammarLogitsProcessor, generate
from hf_fvo.grammar import (
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidRegexError,
    OutOfGrammarError,
    TokenizerError,
    TokenTrie,
    TokenVocabulary,
    UnsupportedSchemaError,
)

__version__ = "0.1.0"

__all__ = [
    "EmptyLanguageError",
    "FVOLogitsProcessor",
    "Grammar",
    "GrammarError",
    "GrammarLogitsProcessor",
    "GrammarTooLargeError",
    "InfiniteLanguageError",
    "InvalidRegexError",
    "OutOfGrammarError",
    "TokenTrie",
    "TokenVocabulary",
    "TokenizerError",
    "UnsupportedSchemaError",
    "__version__",
    "generate",
]
