"""Admissible sets A_t: token automata compiled from regex, JSON schema, choices and bounded Dyck.

Compile once (cached by grammar and tokenizer), query cheaply; per-sequence state is an int.
"""

from hf_fvo.grammar.automaton import Grammar, TransitionGroups
from hf_fvo.grammar.compile import clear_cache
from hf_fvo.grammar.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    InfiniteLanguageError,
    InvalidRegexError,
    OutOfGrammarError,
    TokenizerError,
    UnsupportedSchemaError,
)
from hf_fvo.grammar.trie import TokenTrie
from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = [
    "EmptyLanguageError",
    "Grammar",
    "GrammarError",
    "GrammarTooLargeError",
    "InfiniteLanguageError",
    "InvalidRegexError",
    "OutOfGrammarError",
    "TokenTrie",
    "TokenVocabulary",
    "TokenizerError",
    "TransitionGroups",
    "UnsupportedSchemaError",
    "clear_cache",
]
