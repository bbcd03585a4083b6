"""JSON Schema as the spec defines it, prepared for a grammar engine — pure logic, no engine.

A schema goes in as a dict and comes out as an exactly equivalent schema whose every keyword the
pushdown engine enforces (:func:`~.prepare.prepare_json_schema`), or is refused naming the
keyword. The modules: ``prepare`` (references, drafts, formats, annotations), ``formats``
(``format`` as exact regexes), ``facts`` (what a schema says), ``negation`` and ``disjoint``
(complements and disjointness), ``strict`` (the strict-object convention), ``rewrite`` (boolean
structure into ``anyOf``/``allOf``), ``order`` (``key_order="any"``), ``patterns`` (what the
engines compile of a pattern), ``finite`` (finite languages), ``lark`` (the pushdown grammar
with hf_fvo's own number and string lexemes, as text in llguidance's Lark dialect) and ``regex``
(regular schemas as one regex, for the automaton backend), ``check`` (the exact final check of
a text, for what the masks only over-approximate), ``closing`` and ``shortest`` (bounds in bytes
on how far any prefix is from acceptance and how short a member can be, for budgets) and
``instance`` (a short member built from the schema: the upper bound budgets stand on). Questions
about regex patterns go to an oracle the caller passes; :class:`~hf_fvo.grammar.GrammarCompiler`
passes the engine's.
"""

from hf_fvo.grammar.schema.check import SchemaCheck
from hf_fvo.grammar.schema.facts import Checked
from hf_fvo.grammar.schema.finite import has_finite_language
from hf_fvo.grammar.schema.lark import schema_lark
from hf_fvo.grammar.schema.prepare import PreparedSchema, load_json_schema, prepare_json_schema
from hf_fvo.grammar.schema.regex import schema_regex

__all__ = [
    "Checked",
    "PreparedSchema",
    "SchemaCheck",
    "has_finite_language",
    "load_json_schema",
    "prepare_json_schema",
    "schema_lark",
    "schema_regex",
]
