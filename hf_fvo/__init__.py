"""hf_fvo: grammar-constrained generation for Hugging Face Transformers that samples the
grammar-conditional distribution μ* rather than the locally masked μ_proj.

Layout follows the math: ``grammar`` (admissible sets A_t) → ``phi`` (future-validity
estimators Φ̂) → ``generation`` (Transformers side: processors, FVO-Spec drafting); ``eval``
reads all three; ``models`` loads the embedded default model; ``recipe`` is the
``custom_generate`` folder for ``model.generate``.
"""

from hf_fvo.generation import (
    FVOLogitsProcessor,
    GrammarAwareCandidateGenerator,
    GrammarLogitsProcessor,
    SpeculationStats,
    generate,
)
from hf_fvo.grammar import (
    ConstraintConflictError,
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidArgumentError,
    InvalidGrammarError,
    InvalidRegexError,
    NonFiniteScoresError,
    OutOfGrammarError,
    OutsideTrainingWarning,
    TokenizerError,
    TokenTrie,
    TokenVocabulary,
    UnsupportedSchemaError,
    WeightsMismatchError,
)

__version__ = "0.1.0"

__all__ = [
    "ConstraintConflictError",
    "EmptyLanguageError",
    "FVOLogitsProcessor",
    "Grammar",
    "GrammarAwareCandidateGenerator",
    "GrammarError",
    "GrammarLogitsProcessor",
    "GrammarTooLargeError",
    "InfiniteLanguageError",
    "InvalidArgumentError",
    "InvalidGrammarError",
    "InvalidRegexError",
    "NonFiniteScoresError",
    "OutOfGrammarError",
    "OutsideTrainingWarning",
    "SpeculationStats",
    "TokenTrie",
    "TokenVocabulary",
    "TokenizerError",
    "UnsupportedSchemaError",
    "WeightsMismatchError",
    "__version__",
    "generate",
]
