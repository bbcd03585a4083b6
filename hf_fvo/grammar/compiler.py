"""The grammar compiler: one object per tokenizer that owns the tokenizer's facts and every cache.

XGrammar's split: a :class:`GrammarCompiler` compiles (JSON schemas, regexes, Lark and EBNF
grammars, choices, bounded Dyck languages) and keeps what it compiled, by grammar; each compiled
:class:`~hf_fvo.grammar.Grammar` is immutable and cheap to match per sequence. It picks the
backend (:mod:`~hf_fvo.grammar.automaton`, :mod:`~hf_fvo.grammar.pushdown`), prepares JSON
schemas with the pure logic of :mod:`~hf_fvo.grammar.schema` (asking the pushdown engine the
pattern questions), and holds each backend's per-tokenizer tables, built once. The
``Grammar.from_*`` front doors use the shared compiler of their tokenizer
(:meth:`GrammarCompiler.shared`), so a second call with the same grammar compiles nothing.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    InvalidArgumentError,
    InvalidGrammarError,
    InvalidRegexError,
    UnsupportedSchemaError,
    check_int,
)
from hf_fvo.grammar import schema as schema_logic
from hf_fvo.grammar.automaton import (
    AutomatonTokenizer,
    TokenAutomaton,
    budget_language,
    compile_automaton,
    from_transitions,
)
from hf_fvo.grammar.automaton.build import COMPILE_TIMEOUT_S, DEFAULT_MAX_STATES
from hf_fvo.grammar.budget import CertifiedBudget
from hf_fvo.grammar.interface import Grammar, register_compiler
from hf_fvo.grammar.pushdown import (
    PushdownGrammar,
    PushdownTokenizer,
    ebnf_definition,
    json_definition,
    json_lark_definition,
    lark_definition,
    patterns_intersect,
    regex_definition,
    regex_problem,
)
from hf_fvo.grammar.schema.closer import JsonCursor
from hf_fvo.grammar.schema.closing import closing_bound
from hf_fvo.grammar.schema.instance import pattern_texts, shortest_member
from hf_fvo.grammar.schema.lark import PRETTY_WHITESPACE
from hf_fvo.grammar.schema.literals import (
    ending_bytes,
    fewest_tokens,
    fewest_tokens_unordered,
    literal_blocks,
    unordered_blocks,
)
from hf_fvo.grammar.schema.patterns import marked_content
from hf_fvo.grammar.schema.shortest import relaxed, shortest_bound
from hf_fvo.grammar.sources import (
    GrammarSource,
    choices_source,
    dyck_source,
    regex_source,
    shorten,
)
from hf_fvo.grammar.vocabulary import TokenVocabulary, resolve_vocab_size, vocabulary_of
from hf_fvo.lru import LRU

__all__ = [
    "WHITESPACE_NAMES",
    "GrammarCompiler",
    "check_whitespace",
    "clear_cache",
    "json_schema_source",
    "prepare_json_schema",
]


class GrammarCompiler:
    """Compiles grammars for one tokenizer and keeps them (least recently used dropped first).

    Args:
        tokenizer: A Hugging Face fast tokenizer, or a :class:`~hf_fvo.grammar.TokenVocabulary`.
        vocab_size: Length of the masks, normally ``model.config.vocab_size`` (which can exceed
            ``len(tokenizer)``); defaults to the tokenizer's length.
        eos_token_id: Overrides ``tokenizer.eos_token_id``; may list several ids.
        cache_size: Compiled grammars kept.

    Raises:
        TokenizerError: the tokenizer cannot be mapped to bytes, or ``vocab_size`` would cut
            off ids that spell text.

    Example:
        >>> from hf_fvo.grammar import GrammarCompiler
        >>> from hf_fvo.models import load_default_tokenizer
        >>> compiler = GrammarCompiler(load_default_tokenizer(), vocab_size=49152)
        >>> g = compiler.json_schema({"enum": ["ok", "error"]}, whitespace="")
        >>> g is compiler.json_schema({"enum": ["ok", "error"]}, whitespace="")  # kept
        True
        >>> compiler.regex("[0-9]{4}").is_finite, compiler.choices(["yes", "no"]).backend
        (True, 'automaton')
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
        cache_size: int = 64,
    ) -> None:
        self.vocabulary: TokenVocabulary = vocabulary_of(tokenizer, eos_token_id)
        self.vocab_size: int = resolve_vocab_size(self.vocabulary, vocab_size)
        self._grammars: LRU[Hashable, Grammar] = LRU(check_int("cache_size", cache_size, minimum=1))
        self._automaton_tokenizer: AutomatonTokenizer | None = None  # built on first use
        self._pushdown_tokenizer: PushdownTokenizer | None = None

    @classmethod
    def shared(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> GrammarCompiler:
        """The compiler every ``Grammar.from_*`` call with this tokenizer (token bytes, EOS ids
        and mask length) shares.

        Example:
            >>> from hf_fvo.grammar import GrammarCompiler
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> GrammarCompiler.shared(tok) is GrammarCompiler.shared(tok)
            True
        """
        vocab = vocabulary_of(tokenizer, eos_token_id)
        size = resolve_vocab_size(vocab, vocab_size)
        return _SHARED.get_or_build((vocab.fingerprint, size), lambda: cls(vocab, size))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.vocabulary.eos_token_ids

    def clear_cache(self) -> None:
        """Forget every grammar this compiler compiled."""
        self._grammars.clear()

    # -- what users compile -----------------------------------------------------------------

    def json_schema(
        self,
        schema: Any,
        whitespace: str | None = None,
        *,
        strict: bool = True,
        backend: str = "pushdown",
        max_length: int | None = None,
        max_states: int | None = None,
        checks: bool = True,
        formats: str = "assert",
        key_order: str = "schema",
    ) -> Grammar:
        """A JSON schema's language, exactly, or a typed refusal; see
        :meth:`Grammar.from_json_schema <hf_fvo.grammar.Grammar.from_json_schema>`. A schema
        given as JSON data (a dict or its text) is compiled once per spelling and options:
        lowering it (closing bounds, the Lark text) costs tens of milliseconds, which a
        server would otherwise pay per request."""
        asked = _json_key(schema, whitespace, strict, backend, max_length, max_states, checks,
                          formats, key_order)  # fmt: skip
        if asked is None:
            return self._json_schema(schema, whitespace, strict, backend, max_length,
                                     max_states, checks, formats, key_order)  # fmt: skip
        return self._grammars.get_or_build(asked, lambda: self._json_schema(
            schema, whitespace, strict, backend, max_length, max_states, checks, formats,
            key_order))  # fmt: skip

    def _json_schema(
        self,
        schema: Any,
        whitespace: str | None,
        strict: bool,
        backend: str,
        max_length: int | None,
        max_states: int | None,
        checks: bool,
        formats: str,
        key_order: str,
    ) -> Grammar:
        whitespace = _outlines_whitespace(schema, whitespace)
        if backend == "automaton":
            if key_order != "schema":
                raise InvalidArgumentError("key_order='any' needs backend='pushdown'")
            source = json_schema_source(schema, whitespace, strict=strict, formats=formats)
            return self._automaton(source, max_length, max_states)
        _pushdown_only(backend, max_length, max_states)
        check_whitespace(whitespace)
        relaxed: dict[str, bool] = {}
        while True:
            try:
                return self._json_pushdown(
                    schema, whitespace, strict, checks, formats, relaxed, key_order
                )
            except (UnsupportedSchemaError, GrammarTooLargeError) as exc:
                # a limit of the engine that the check can take over: retry with it relaxed
                limit = next((name for key, name in _ENGINE_LIMITS.items()
                              if key in str(exc) and name not in relaxed), None)  # fmt: skip
                if not checks or limit is None:
                    raise
                relaxed[limit] = True

    def _json_pushdown(
        self,
        schema: Any,
        whitespace: str | None,
        strict: bool,
        checks: bool,
        formats: str,
        relaxed: dict[str, bool],
        key_order: str,
    ) -> Grammar:
        prepared = schema_logic.prepare_json_schema(
            schema, strict=strict, intersect=patterns_intersect, checks=checks,
            formats=formats, decimal_multiples="decimal_multiples" not in relaxed,
            inner_anchors="inner_anchors" not in relaxed, key_order=key_order,
            format_patterns="format_patterns" not in relaxed,
            complements="complements" not in relaxed,
        )  # fmt: skip
        body = prepared.schema
        if body is False:
            raise EmptyLanguageError("the schema is `false`: it admits nothing")
        if body is True:
            body = {}
        ws = "default" if whitespace is None else repr(whitespace)
        mode = ("" if strict else " strict=False") + (" key_order='any'" * (key_order == "any"))
        notes = [f"{ptr}: {what} is not a JSON Schema format; ignored"
                 for ptr, what in prepared.ignored]  # fmt: skip
        # finitely many values and whitespace of at most one character ("[ ]?" or none): few
        # enough strings to enumerate (a "pretty" language is finite but has 27 spellings at
        # every place, so it is not claimed finite)
        finite = whitespace in (None, "") and schema_logic.has_finite_language(body)
        # completions never need whitespace where every prefix of a match is a match ("[ ]?",
        # "pretty") or there is none
        reach = whitespace in (None, "", "pretty")  # (and each state's own, past a token)
        closing = closing_bound(body) if reach else None
        whitespace = WHITESPACE_NAMES.get(whitespace, whitespace)
        shortest = shortest_bound(body)
        source = f"json_schema {shorten(prepared.text)} whitespace={ws}{mode}"
        if math.isinf(shortest):
            raise EmptyLanguageError(
                f"{source} admits no text of finite length: a required part nests itself "
                "without end (a $ref cycle that never closes) or admits nothing"
            )
        check = None
        if prepared.checked:
            check = schema_logic.SchemaCheck(
                schema_logic.load_json_schema(schema), formats=formats == "assert"
            )
            notes += [f"{c}: left to the final check" for c in prepared.checked]
        # built when a budget asks; under key_order="any" in the schema's order, one of any
        # order's members that the check also passes (the masks' shortest may not: `{}`)
        member = functools.partial(shortest_member, body if prepared.ordered is None
                                   else prepared.ordered)  # fmt: skip
        texts = functools.partial(pattern_texts, body)  # (likewise: for the searches)
        # (likewise: the budget's certificates)
        closer = functools.partial(JsonCursor.start, body, any_order=key_order == "any")
        # fewest tokens of every member: proven, asked when a refusal needs it; under any key
        # order, what every member writes in any order (the masks leave required keys to the
        # check, so it may exceed the masks' shortest text: that text fails the check)
        lower = functools.partial(self._schema_lower, body, whitespace,
                                  prepared.integral_fractions)  # fmt: skip
        ends = sum(1 << b for b in ending_bytes(body))  # (what the searches ask to end a member)
        ordered = prepared.ordered is not None
        if ordered:
            lower = functools.partial(self._unordered_lower, prepared.ordered, whitespace)
        lark = schema_logic.schema_lark(  # hf_fvo's own lexemes, if lowered
            body, whitespace, integral_fractions=prepared.integral_fractions
        )
        if lark is not None:
            try:
                return self._pushdown("json_schema", json_lark_definition(lark), source, notes,
                                      finite, closing, check, prepared.checked,
                                      int(shortest), member, lower, texts,
                                      closer, marked_content, ordered, reach,
                                      ends=ends)  # fmt: skip
            except GrammarError:
                pass  # llguidance refused a part of it (an unsatisfiable leaf, say)
        # llguidance's JSON mode, which drops what admits nothing, decides (or names why)
        notes.append(f"written as llguidance's JSON mode writes it ({_CANONICAL})")
        return self._pushdown("json_schema", json_definition(body, whitespace), source, notes,
                              finite, closing, check, prepared.checked, int(shortest),
                              member, lower, texts, closer, marked_content, ordered,
                              reach, ends=ends)  # fmt: skip

    def regex(
        self,
        pattern: Any,
        *,
        backend: str = "automaton",
        max_length: int | None = None,
        max_states: int | None = None,
    ) -> Grammar:
        """A regex matched in full; see :meth:`Grammar.from_regex
        <hf_fvo.grammar.Grammar.from_regex>`."""
        source = regex_source(pattern)
        if backend == "automaton":
            return self._automaton(source, max_length, max_states)
        _pushdown_only(backend, max_length, max_states, "'automaton' or 'pushdown'")
        lower = functools.partial(self._distance, source)  # the same language's automaton
        return self._pushdown("regex", regex_definition(source.regex), source.description,
                              lower=lower)  # fmt: skip

    def lark(self, grammar: Any) -> Grammar:
        """A Lark grammar in llguidance's dialect (or an ``outlines.types.CFG``)."""
        definition = getattr(grammar, "definition", grammar)
        if not isinstance(definition, str):
            raise InvalidGrammarError(f"a Lark grammar must be a str, got {type(grammar).__name__}")
        source = f"lark {shorten(' '.join(definition.split()))}"
        return self._pushdown("lark", lark_definition(definition), source)

    def ebnf(self, grammar: str) -> Grammar:
        """A GBNF (llama.cpp EBNF) grammar."""
        if not isinstance(grammar, str):
            raise InvalidGrammarError(
                f"an EBNF grammar must be a str, got {type(grammar).__name__}"
            )
        source = f"ebnf {shorten(' '.join(grammar.split()))}"
        return self._pushdown("ebnf", ebnf_definition(grammar), source)

    def choices(self, choices: Iterable[str]) -> Grammar:
        """A finite language: the text equals one of ``choices``."""
        return self._automaton(choices_source(choices))

    def dyck(self, depth: int, max_length: int, brackets: str = "()") -> Grammar:
        """Balanced ``brackets`` nested at most ``depth`` deep, at most ``max_length``
        characters."""
        return self._automaton(dyck_source(depth, brackets), check_int("max_length", max_length))

    # -- grammars given as token tables (no tokenizer): the automaton backend's own ----------

    transitions = staticmethod(from_transitions)
    budget = staticmethod(budget_language)

    # -- internals --------------------------------------------------------------------------

    def _automaton(
        self,
        source: GrammarSource,
        max_length: int | None = None,
        max_states: int | None = None,
        timeout: float = COMPILE_TIMEOUT_S,
    ) -> TokenAutomaton:
        check_int("max_length", max_length, optional=True)
        limit = DEFAULT_MAX_STATES if max_states is None else check_int("max_states", max_states)

        def build() -> TokenAutomaton:
            if self._automaton_tokenizer is None:
                self._automaton_tokenizer = AutomatonTokenizer(self.vocabulary)
            return compile_automaton(
                source.regex, source.description, self._automaton_tokenizer, self.vocab_size,
                max_length=max_length, max_states=limit, diagnose=regex_problem,
                timeout=timeout,
            )  # fmt: skip

        key = ("automaton", source.kind, source.regex, max_length)
        return self._grammars.get_or_build(key, build)

    def _schema_lower(
        self, body: Any, whitespace: str | None, integral_fractions: bool, upper: int | None
    ) -> int:
        """Fewest tokens of every member of ``body``'s language, at least: those its literal text
        needs (:mod:`~hf_fvo.grammar.schema.literals`, in the schema's order and cut where
        members may move, the larger; fractions of a second), then, unless that
        already reaches ``upper``, a regular superset's exact distance (seconds where it is
        large)."""
        compact, vocab = whitespace == "", self.vocabulary.token_bytes
        floor = fewest_tokens(literal_blocks(body, compact), vocab)
        if upper is None or floor < upper:  # (members in any order include these: also a bound)
            floor = max(floor, fewest_tokens_unordered(unordered_blocks(body, compact), vocab))
        if upper is not None and floor >= upper:
            return floor
        return max(floor, self._superset_distance(body, whitespace, integral_fractions) or 0)

    def _unordered_lower(self, ordered: Any, whitespace: str | None, upper: int | None) -> int:
        """Fewest tokens of every member of ``ordered``'s language with each object's members in
        any order, at least (:func:`~hf_fvo.grammar.schema.literals.unordered_blocks`)."""
        segments = unordered_blocks(ordered, compact=whitespace == "")
        return fewest_tokens_unordered(segments, self.vocabulary.token_bytes)

    def _superset_distance(
        self, body: Any, whitespace: str | None, integral_fractions: bool
    ) -> int | None:
        """The fewest tokens of a member of a regular superset of ``body``'s language
        (:func:`~hf_fvo.grammar.schema.shortest.relaxed`, then the automaton's exact distance):
        a lower bound on every member's tokens; ``None`` where the superset is not regular
        (open objects, recursion…) or its automaton exceeds ``_SUPERSET_STATES``."""
        try:
            regex = schema_logic.schema_regex(
                relaxed(body), "[ ]?" if whitespace is None else whitespace,
                integral_fractions=integral_fractions,
            )  # fmt: skip
        except GrammarError:
            return None
        return self._distance(
            GrammarSource("json_schema", regex, f"a regular superset of {shorten(regex)}")
        )

    def _distance(self, source: GrammarSource, upper: int | None = None) -> int | None:
        """The fewest tokens to acceptance from the start of ``source``'s automaton, exact
        (``upper``, a member's tokens, is not needed); ``None`` where it does not compile
        within ``_SUPERSET_STATES`` and ``_SUPERSET_SECONDS``."""
        try:
            automaton = self._automaton(source, None, _SUPERSET_STATES, _SUPERSET_SECONDS)
        except GrammarError:
            return None
        return automaton.min_tokens_to_accept(automaton.initial_state)

    def _pushdown(
        self,
        kind: str,
        definition: str,
        source: str,
        notes: Sequence[str] = (),
        finite: bool = False,
        closing: int | None = None,
        check: schema_logic.SchemaCheck | None = None,
        checked: tuple[schema_logic.Checked, ...] = (),
        shortest: int = 0,
        member: Callable[[], str | None] | None = None,
        lower: Callable[[], int | None] | None = None,
        texts: Callable[[], tuple[str, ...]] | None = None,
        closer: Callable[[], JsonCursor] | None = None,
        raw: Callable[[str, str, str], str | None] | None = None,
        checked_lower: bool = False,
        reach: bool = False,
        ends: int | None = None,
    ) -> PushdownGrammar:

        def build() -> PushdownGrammar:
            if self._pushdown_tokenizer is None:
                self._pushdown_tokenizer = PushdownTokenizer(self.vocabulary)
            budget = CertifiedBudget(closing, shortest, member, lower, texts, closer, raw,
                                     checked_lower, reach, ends)  # fmt: skip
            grammar = PushdownGrammar(definition, self._pushdown_tokenizer, self.vocab_size,
                                      source, notes, finite, budget=budget)  # fmt: skip
            if check is not None:
                grammar._attach_check(check, checked)
            return grammar

        key = ("pushdown", kind, definition, None if check is None else check.key)
        return self._grammars.get_or_build(key, build)

    def __repr__(self) -> str:
        return (
            f"GrammarCompiler({self.vocabulary!r}, vocab_size={self.vocab_size}, "
            f"kept={len(self._grammars)})"
        )


_SHARED: LRU[tuple[str, int], GrammarCompiler] = LRU(8)

# a lower bound's automaton: states and seconds of its index build at most (a refusal waits)
_SUPERSET_STATES, _SUPERSET_SECONDS = 5_000, 10.0
# llguidance refusals the final check can take over, by a word of the message: the prepare
# option that leaves the construct to the check
_CANONICAL = "canonical string escapes, integers without a fraction"
_ENGINE_LIMITS = {
    "multipleOf": "decimal_multiples",  # more digits than its number grammar holds
    "lookarounds not supported": "inner_anchors",  # ^ or $ inside a pattern
    "Unable to determine if regex is empty": "format_patterns",  # a format ∩ a pattern
    "schema too large": "complements",  # llguidance's limits on a schema's size
    "u16::MAX": "complements",  # and on its grammar's symbols (GrammarTooLargeError)
}  # GrammarCompiler.shared's instances


def _json_key(schema: Any, *options: Any) -> tuple[Any, ...] | None:
    """The cache key of a schema given as JSON data, with its compile options (``None``
    for anything else: a class, an object whose JSON form may change)."""
    if isinstance(schema, str):
        return ("json_schema", schema, *options)
    if isinstance(schema, (dict, bool)):
        try:
            return ("json_schema", json.dumps(schema), *options)  # key order is meaning
        except (TypeError, ValueError):
            return None
    return None


def _pushdown_only(
    backend: str,
    max_length: int | None,
    max_states: int | None,
    choices: str = "'pushdown' or 'automaton'",
) -> None:
    if backend != "pushdown":
        raise InvalidArgumentError(f"backend must be {choices}, got {backend!r}")
    if max_length is not None or max_states is not None:
        raise InvalidArgumentError(
            "max_length and max_states apply to backend='automaton'; the pushdown "
            "backend has no state limit (bound the output with max_new_tokens)"
        )


def clear_cache() -> None:
    """Forget every compiled grammar and tokenizer table (the next ``Grammar.from_…`` call
    recompiles).

    Example:
        >>> from hf_fvo.grammar import clear_cache
        >>> clear_cache()
    """
    _SHARED.clear()
    patterns_intersect.cache_clear()


def prepare_json_schema(
    schema: Any, *, strict: bool = True, checks: bool = True, formats: str = "assert"
) -> schema_logic.PreparedSchema:
    """The rewrite of ``schema`` that the pushdown backend compiles (pattern questions
    answered by the engine), with what it leaves to the final check (``checks``); see
    :func:`hf_fvo.grammar.schema.prepare_json_schema`.

    Example:
        >>> from hf_fvo.grammar import prepare_json_schema
        >>> prepare_json_schema({"not": {"type": "string"}}).schema
        {'type': ['array', 'boolean', 'null', 'number', 'object']}
    """
    return schema_logic.prepare_json_schema(
        schema, strict=strict, intersect=patterns_intersect, checks=checks, formats=formats
    )


def json_schema_source(
    schema: Any, whitespace: str | None = None, *, strict: bool = True, formats: str = "assert"
) -> GrammarSource:
    """A regular JSON schema as one regex (the automaton backend's input); see
    :func:`hf_fvo.grammar.schema.schema_regex` for the subset lowered.

    Raises:
        UnsupportedSchemaError: an assertion that cannot be enforced exactly, or a construct
            the automaton lowering does not cover (compile those with the pushdown backend).
    """
    check_whitespace(whitespace)
    prepared = schema_logic.prepare_json_schema(
        schema, strict=strict, intersect=patterns_intersect, formats=formats
    )
    if prepared.schema is False:
        raise EmptyLanguageError("the schema is `false`: it admits nothing")
    ws_regex = "[ ]?" if whitespace is None else WHITESPACE_NAMES.get(whitespace, whitespace)
    regex = schema_logic.schema_regex(
        prepared.schema, ws_regex, integral_fractions=prepared.integral_fractions
    )
    ws = "default" if whitespace is None else repr(whitespace)
    mode = "" if strict else " strict=False"
    return GrammarSource(
        "json_schema", regex, f"json_schema {shorten(prepared.text)} whitespace={ws}{mode}"
    )


def _outlines_whitespace(schema: Any, whitespace: str | None) -> str | None:
    """An ``outlines.types.JsonSchema``'s ``whitespace_pattern`` is part of its language: used
    where ``whitespace`` is not given, refused where it says otherwise."""
    pattern = getattr(schema, "whitespace_pattern", None)
    if type(schema).__name__ != "JsonSchema" or pattern is None:
        return whitespace
    if whitespace is not None and whitespace != pattern:
        raise InvalidArgumentError(
            f"the outlines JsonSchema says whitespace_pattern={pattern!r} and the call says "
            f"whitespace={whitespace!r}; give one"
        )
    return pattern


#: ``whitespace`` values that name a layout rather than spell a regex
WHITESPACE_NAMES = {"pretty": PRETTY_WHITESPACE}


def check_whitespace(whitespace: str | None) -> None:
    """Refuse a ``whitespace`` argument that is not ``None``, a name in :data:`WHITESPACE_NAMES`
    or a valid regex over JSON's whitespace characters."""
    if whitespace is None or whitespace in WHITESPACE_NAMES:
        return
    if not isinstance(whitespace, str):
        raise InvalidArgumentError(f"whitespace must be a regex str or None, not {whitespace!r}")
    problem = regex_problem(whitespace)
    if problem:
        raise InvalidRegexError(f"whitespace={whitespace!r} is not a valid regex: {problem}")
    if whitespace and patterns_intersect((f"^(?:{whitespace})$", "[^ \t\n\r]")):
        raise InvalidArgumentError(
            f"whitespace={whitespace!r} matches characters JSON does not allow between its "
            "tokens (only space, tab, newline and carriage return); a layout is named "
            f"{sorted(WHITESPACE_NAMES)} or spelled as a regex over those four"
        )


register_compiler(GrammarCompiler)
