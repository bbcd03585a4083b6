"""The pushdown backend: llguidance's Earley parser over token bytes (JSON schemas, Lark and
EBNF grammars, regexes without a state limit). Everything here depends on the grammar
interface only; :class:`~hf_fvo.grammar.GrammarCompiler` is the front door.
"""

from hf_fvo.grammar.pushdown.engine import (
    PushdownTokenizer,
    ebnf_definition,
    json_definition,
    json_lark_definition,
    lark_definition,
    patterns_intersect,
    regex_definition,
    regex_problem,
    translate_error,
)
from hf_fvo.grammar.pushdown.grammar import PushdownGrammar, PushdownState

__all__ = [
    "PushdownGrammar",
    "PushdownState",
    "PushdownTokenizer",
    "ebnf_definition",
    "json_definition",
    "json_lark_definition",
    "lark_definition",
    "patterns_intersect",
    "regex_definition",
    "regex_problem",
    "translate_error",
]
