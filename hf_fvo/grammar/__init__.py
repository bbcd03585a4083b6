"""Admissible sets A_t behind one interface (:class:`Grammar`) with two backends: token automata
(regex, choices, bounded Dyck, token tables) and a pushdown matcher (llguidance: JSON schemas,
Lark and EBNF grammars).

Compile once (cached by grammar and tokenizer), query cheaply; per-sequence state is a value the
caller holds (or a :class:`GrammarMatcher`).
"""

from hf_fvo.grammar.automaton import TokenAutomaton, TransitionGroups
from hf_fvo.grammar.base import Grammar, GrammarMatcher
from hf_fvo.grammar.compile import clear_cache
from hf_fvo.grammar.pushdown import PushdownGrammar
from hf_fvo.grammar.trie import TokenTrie
from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = [
    "Grammar",
    "GrammarMatcher",
    "PushdownGrammar",
    "TokenAutomaton",
    "TokenTrie",
    "TokenVocabulary",
    "TransitionGroups",
    "clear_cache",
]
