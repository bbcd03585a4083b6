"""Errors raised while compiling a grammar into a token automaton.

Every error is a :class:`GrammarError`, which subclasses :class:`ValueError`, so
``except ValueError`` keeps working for callers that do not care about the cause.
"""

from __future__ import annotations


class GrammarError(ValueError):
    """Base class: the grammar cannot be compiled for this tokenizer."""


class InvalidGrammarError(GrammarError):
    """The grammar text (Lark, EBNF, regex) is malformed or uses a feature the engine lacks."""


class InvalidRegexError(InvalidGrammarError):
    """The regular expression is malformed or uses a feature the compiler lacks."""


class UnsupportedSchemaError(GrammarError):
    """The JSON schema uses a keyword or structure that would not be enforced."""


class EmptyLanguageError(GrammarError):
    """No token sequence of this tokenizer spells a member of the language."""


class InfiniteLanguageError(GrammarError):
    """An enumeration was asked of a language with infinitely many members."""


class GrammarTooLargeError(GrammarError):
    """The automaton or its enumeration would exceed a configured size limit."""


class TokenizerError(GrammarError):
    """The tokenizer cannot be mapped to token bytes."""


class OutOfGrammarError(GrammarError):
    """A token sequence leaves the language (raised where a walk must succeed)."""
