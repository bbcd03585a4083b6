"""Admissible sets A_t behind one interface (:class:`Grammar`) with two backends: token automata
(regex, choices, bounded Dyck, token tables) and a pushdown matcher (llguidance: JSON schemas,
Lark and EBNF grammars).

A :class:`GrammarCompiler` owns one tokenizer's facts and compiles once (cached by grammar);
query cheaply; per-sequence state is a value the caller holds (or a :class:`GrammarMatcher`).
JSON Schema logic lives in :mod:`hf_fvo.grammar.schema` (pure: dict in, prepared schema out).
"""

from hf_fvo.grammar.automaton import TokenAutomaton, TokenTrie, TransitionGroups
from hf_fvo.grammar.compiler import GrammarCompiler, clear_cache, prepare_json_schema
from hf_fvo.grammar.interface import Grammar, GrammarMatcher
from hf_fvo.grammar.pushdown import PushdownGrammar
from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = [
    "Grammar",
    "GrammarCompiler",
    "GrammarMatcher",
    "PushdownGrammar",
    "TokenAutomaton",
    "TokenTrie",
    "TokenVocabulary",
    "TransitionGroups",
    "clear_cache",
    "prepare_json_schema",
]
