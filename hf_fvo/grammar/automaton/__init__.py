"""The token-automaton backend: grammars as finite automata over token ids (outlines-core).

:class:`TokenAutomaton` holds the tables (per state, the admissible tokens grouped by next
state); :func:`compile_automaton` builds them from a regex through outlines-core, exactly;
:func:`from_transitions` and :func:`budget_language` from tables given directly; token tries
(:class:`TokenTrie`) enumerate finite languages. Everything here depends on the grammar
interface only; :class:`~hf_fvo.grammar.GrammarCompiler` is the front door.
"""

from hf_fvo.grammar.automaton.build import AutomatonTokenizer, compile_automaton
from hf_fvo.grammar.automaton.tables import TokenAutomaton, TransitionGroups
from hf_fvo.grammar.automaton.transitions import budget_language, from_transitions
from hf_fvo.grammar.trie import TokenTrie

__all__ = [
    "AutomatonTokenizer",
    "TokenAutomaton",
    "TokenTrie",
    "TransitionGroups",
    "budget_language",
    "compile_automaton",
    "from_transitions",
]
