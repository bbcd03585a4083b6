"""The grammar interface: a compiled, immutable grammar and a cheap per-sequence matcher.

Two backends implement :class:`Grammar` (the XGrammar split: compile once, match per sequence),
each depending on this module only:

- :class:`~hf_fvo.grammar.TokenAutomaton` (:mod:`hf_fvo.grammar.automaton`) — a finite automaton
  over token ids whose states are ints (regex, choices, bounded Dyck, token tables, and JSON
  schemas on request). Exact Φ by token tries, Markov products and grouped OneStep sums are
  built on it.
- :class:`~hf_fvo.grammar.PushdownGrammar` (:mod:`hf_fvo.grammar.pushdown`) — llguidance's
  Earley parser over token bytes, for what an automaton cannot hold or not cheaply: JSON schemas
  (the default), recursion, context-free grammars. States are opaque, immutable values.

Either way a state is a value the caller holds; the grammar never changes after compilation.
:class:`GrammarMatcher` wraps one sequence's state for users who prefer ``consume``/``rollback``.
The ``Grammar.from_*`` front doors compile through the shared
:class:`~hf_fvo.grammar.GrammarCompiler` for the tokenizer, which :mod:`hf_fvo.grammar.compiler`
registers here when the package is imported: this module knows no backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from hf_fvo.errors import (
    BudgetTooSmallError,
    BudgetUndecidedError,
    GrammarError,
    InvalidArgumentError,
    TokenizerError,
    check_int,
)
from hf_fvo.grammar.bitmask import NEG_INF_BITS, pack
from hf_fvo.grammar.vocabulary import TokenVocabulary, vocabulary_of

if TYPE_CHECKING:
    from hf_fvo.grammar.trie import TokenTrie

__all__ = [
    "BIAS_DTYPES",
    "Grammar",
    "GrammarMatcher",
    "LazyAdmissible",
    "State",
    "bias_bits",
    "register_compiler",
    "require_grammar",
]

State = Hashable
"""A grammar state: an ``int`` for automata, an opaque immutable value for pushdown grammars."""


BIAS_DTYPES = frozenset(NEG_INF_BITS)
"""The dtypes :meth:`Grammar.admissible_bias` writes."""

# the GrammarCompiler class, registered by hf_fvo.grammar.compiler (see register_compiler)
_COMPILER: Any = None


def register_compiler(compiler: type) -> None:
    """Make ``compiler`` the class the ``Grammar.from_*`` front doors compile with (its
    ``shared(tokenizer, vocab_size, eos_token_id)`` instance). :mod:`hf_fvo.grammar.compiler`
    registers :class:`~hf_fvo.grammar.GrammarCompiler` on import, which the package does, so the
    interface never imports a backend."""
    global _COMPILER
    _COMPILER = compiler


def _compiler(tokenizer: Any, vocab_size: int | None, eos_token_id: Any) -> Any:
    if _COMPILER is None:  # pragma: no cover - importing hf_fvo.grammar registers it
        raise GrammarError("internal: no grammar compiler is registered (import hf_fvo.grammar)")
    return _COMPILER.shared(tokenizer, vocab_size, eos_token_id=eos_token_id)


def bias_bits(dtype: torch.dtype) -> tuple[type, Any]:
    """(unsigned integer type of ``dtype``'s width, −inf's bit pattern in it) for the dtypes
    :meth:`Grammar.admissible_bias` supports.

    Raises:
        InvalidArgumentError: another dtype.
    """
    kind = NEG_INF_BITS.get(dtype)
    if kind is None:
        raise InvalidArgumentError(
            f"admissible_bias supports float32, bfloat16 and float16, not {dtype}"
        )
    return kind


@dataclass(frozen=True)
class LazyAdmissible:
    """A budget-admissible set decided token by token (:meth:`Grammar.lazy_admissible`).

    Attributes:
        superset: A bool mask over the vocabulary holding every member (the parser's A_t).
        admits: ``admits(token)``: whether the token is a member.
        resolve: ``resolve()``: the whole set as a bool mask, token for token what ``admits``
            says (it may cost what the lazy check saves: for rare fallbacks).
    """

    superset: torch.Tensor
    admits: Callable[[int], bool]
    resolve: Callable[[], torch.Tensor]


class Grammar(ABC):
    """A compiled, immutable grammar over one tokenizer's token ids.

    Build one with :meth:`from_json_schema`, :meth:`from_regex`, :meth:`from_choices`,
    :meth:`dyck`, :meth:`from_lark`, :meth:`from_ebnf`, :meth:`from_transitions` or
    :meth:`budget`; compiled grammars are cached by (grammar, tokenizer, options).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tokenizer = load_default_tokenizer()
        >>> g = Grammar.from_choices(["ok", "error"], tokenizer)
        >>> state = g.walk(tokenizer.encode("ok"))
        >>> g.is_accepting(state), bool(g.allowed(state)[g.eos_token_id])
        (True, True)
        >>> g.walk(tokenizer.encode("okay")) is None
        True
    """

    backend: ClassVar[str]
    states_kept: ClassVar[int | None] = None
    """How many states a per-sequence cache should keep at most (``None``: as many as it
    likes): a pushdown state holds a parser snapshot of up to a few MB, an automaton's is an
    int. A cache serving n rows at once keeps at least 4·n."""
    _final_check: Callable[[str], str | None] | None = None  # set by the compiler, if any
    _checked: tuple[Any, ...] = ()

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_json_schema(
        cls,
        schema: Any,
        tokenizer: Any,
        whitespace: str | None = None,
        vocab_size: int | None = None,
        *,
        strict: bool = True,
        backend: str = "pushdown",
        max_length: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        max_states: int | None = None,
        checks: bool = True,
        formats: str = "assert",
        key_order: str = "schema",
    ) -> Grammar:
        """Compile a JSON schema (draft-04 to 2020-12): exactly its language, or a refusal.

        What a grammar cannot say (``uniqueItems`` over unbounded items, ``unevaluated*``,
        ``contains`` counts, the complement of a pattern, look-around, IDNA formats…) is
        enforced by an exact check of the finished text: the masks enforce the tightest
        superset hf_fvo builds, and :attr:`checked` lists what the check decides. Free
        strings and unbounded integers admit every spelling JSON allows (``"\\u00e9"``,
        ``"\\/"``, surrogate pairs, ``1.0``, ``1e2``) where hf_fvo writes the grammar itself
        (:mod:`hf_fvo.grammar.schema.lark`); names, constants, patterned strings and bounded
        numbers are written as llguidance writes them.

        Args:
            schema: A dict, a JSON string, a Pydantic model class (or any type Pydantic
                describes), or an ``outlines.types.JsonSchema``.
            tokenizer: A Hugging Face fast tokenizer (or a :class:`TokenVocabulary`).
            whitespace: The whitespace allowed at each place JSON allows it, matched at most
                once there: ``None`` is ``[ ]?`` (one optional space, as in Outlines), ``""``
                gives compact JSON, ``"pretty"`` admits one space or one newline and at most 24
                spaces of indentation (what ``json.dumps`` writes with or without ``indent``,
                to depth 12 at indent 2), and any other string is a regex over space, tab,
                newline and carriage return.
            vocab_size: Length of the masks, normally ``model.config.vocab_size``.
            strict: Objects whose schema lists properties admit no other keys unless the
                schema says otherwise (Outlines' and XGrammar's convention); ``False`` is the
                spec's language, where they admit any extra key.
            backend: ``"pushdown"`` (llguidance: every schema, milliseconds to compile) or
                ``"automaton"`` (a token automaton for regular schemas: exact Markov DPs and
                grouped OneStep sums; compiling can take seconds).
            max_length, eos_token_id, max_states: As in :meth:`from_regex` (``max_length`` and
                ``max_states`` apply to the automaton backend).
            checks: ``False`` refuses what the masks cannot enforce exactly instead of leaving
                it to the final check (the automaton backend always refuses).
            formats: ``"assert"`` (default: a ``format`` is a constraint, exact for every
                format the spec defines) or ``"annotation"`` (2019-09/2020-12's default
                language: ``format`` constrains nothing).
            key_order: ``"schema"`` (default: an object's keys in the schema's order, as
                Outlines and XGrammar write them) or ``"any"``: any order, each key at most
                once, required ones present (small closed objects exactly in the grammar, others
                by the check; see :mod:`hf_fvo.grammar.schema.order`).

        Raises:
            UnsupportedSchemaError: an invalid schema, a reference outside the document (and
                the shipped meta-schemas), or (``checks=False``) a keyword the masks cannot
                enforce exactly, named with its JSON pointer.
            EmptyLanguageError: no JSON text satisfies the schema.
            InvalidArgumentError: a ``whitespace`` regex that matches more than JSON's
                whitespace (a misspelt name, say).
            TokenizerError: the tokenizer cannot be mapped to bytes.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tokenizer = load_default_tokenizer()
            >>> schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
            ...           "required": ["ok"]}
            >>> g = Grammar.from_json_schema(schema, tokenizer, whitespace="")
            >>> g.backend, g.is_accepting(g.walk(tokenizer.encode('{"ok":true}')))
            ('pushdown', True)
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).json_schema(
            schema, whitespace, strict=strict, backend=backend, max_length=max_length,
            max_states=max_states, checks=checks, formats=formats, key_order=key_order,
        )  # fmt: skip

    @classmethod
    def from_regex(
        cls,
        pattern: Any,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        backend: str = "automaton",
        max_length: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        max_states: int | None = None,
    ) -> Grammar:
        """Compile a regular expression (Rust ``regex`` syntax, matched in full).

        Args:
            pattern: The regular expression (a ``str`` or an ``outlines.types.Regex``); the
                whole generated text must match it.
            tokenizer: A Hugging Face fast tokenizer (or a :class:`TokenVocabulary`).
            vocab_size: Length of the masks, normally ``model.config.vocab_size`` (which can
                exceed ``len(tokenizer)``); defaults to ``len(tokenizer)``.
            backend: ``"automaton"`` (default) or ``"pushdown"`` (no state limit; for
                patterns whose automaton would be huge, such as ``[a-z]{10000}``).
            max_length: Optional bound on the number of characters of the text (automaton).
            eos_token_id: Overrides ``tokenizer.eos_token_id``; may list several ids.
            max_states: Refuse patterns whose byte automaton has more states than this.

        Raises:
            InvalidRegexError: the pattern is malformed or uses an unsupported feature.
            EmptyLanguageError: no token sequence spells a member (within ``max_length``).
            GrammarTooLargeError: the automaton would exceed ``max_states``.
            TokenizerError: the tokenizer cannot be mapped to bytes.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_regex(r"[0-9]{4}", load_default_tokenizer())
            >>> g.is_finite, g.min_tokens_to_accept(g.initial_state)  # SmolLM2 splits digits
            (True, 4)
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).regex(
            pattern, backend=backend, max_length=max_length, max_states=max_states
        )

    @classmethod
    def from_lark(
        cls,
        grammar: Any,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> Grammar:
        """Compile a context-free grammar in Lark syntax (llguidance's dialect: ``start`` rule,
        lowercase rules, uppercase terminals, ``/regex/`` terminals, ``%json {…}`` sub-schemas).

        Args:
            grammar: The grammar text, or an ``outlines.types.CFG``.
            tokenizer, vocab_size, eos_token_id: As in :meth:`from_regex`.

        Raises:
            InvalidGrammarError: the grammar is malformed.
            EmptyLanguageError: it generates no text.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_lark('start: "(" start ")" | "x"', tok)
            >>> g.is_accepting(g.walk(tok.encode("((x))"))), g.walk(tok.encode("(x))")) is None
            (True, True)
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).lark(grammar)

    @classmethod
    def from_ebnf(
        cls,
        grammar: str,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> Grammar:
        """Compile a context-free grammar in GBNF (llama.cpp's EBNF: ``root ::= …``).

        Raises:
            InvalidGrammarError: the grammar is malformed.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_ebnf('root ::= "a" root "b" | "c"', tok)
            >>> g.is_accepting(g.walk(tok.encode("aacbb")))
            True
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).ebnf(grammar)

    @classmethod
    def from_choices(
        cls,
        choices: Iterable[str],
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> Grammar:
        """Compile a finite language: the text must equal one of ``choices``.

        Raises:
            EmptyLanguageError: ``choices`` is empty (or no choice can be spelled).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_choices(["ok", "error"], load_default_tokenizer())
            >>> g.token_trie().num_sequences >= 2
            True
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).choices(choices)

    @classmethod
    def dyck(
        cls,
        depth: int,
        max_length: int,
        tokenizer: Any,
        brackets: str = "()",
        vocab_size: int | None = None,
        *,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> Grammar:
        """Bounded Dyck D_{d,L}: balanced brackets, nesting depth ≤ d, at most L characters.

        The empty string is a member (D_{3,16} has 988 members with one bracket pair).

        Args:
            depth: Maximum nesting depth d ≥ 0.
            max_length: Maximum number of characters L ≥ 0.
            brackets: Opening/closing pairs, e.g. ``"()"`` or ``"()[]"``.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tokenizer = load_default_tokenizer()
            >>> g = Grammar.dyck(3, 16, tokenizer)
            >>> g.is_accepting(g.walk(tokenizer.encode("(()())")))
            True
        """
        return _compiler(tokenizer, vocab_size, eos_token_id).dyck(depth, max_length, brackets)

    @classmethod
    def from_transitions(
        cls,
        transitions: Any,
        accepting: Iterable[int],
        *,
        vocab_size: int,
        eos_token_id: int | Sequence[int],
        initial_state: int = 0,
        source: str = "token automaton",
    ) -> Grammar:
        """An automaton over token ids given as ``{state: {token_id: next_state}}``; see
        :func:`hf_fvo.grammar.automaton.from_transitions`.

        Example:
            >>> from hf_fvo import Grammar
            >>> g = Grammar.from_transitions({0: {0: 1}, 1: {}}, [1], vocab_size=2,
            ...                              eos_token_id=1)
            >>> g.walk([0]) is not None and g.is_accepting(g.walk([0]))
            True
        """
        if _COMPILER is None:  # pragma: no cover - importing hf_fvo.grammar registers it
            raise GrammarError("internal: no grammar compiler is registered")
        return _COMPILER.transitions(
            transitions, accepting, vocab_size=vocab_size, eos_token_id=eos_token_id,
            initial_state=initial_state, source=source,
        )  # fmt: skip

    @classmethod
    def budget(
        cls, n: int, k: int, *, zero: int, one: int, eos_token_id: int, vocab_size: int
    ) -> Grammar:
        """The budget language L_{n,K} = {x ∈ {0,1}^n : Σx ≤ K} over two token ids; see
        :func:`hf_fvo.grammar.automaton.budget_language`.

        Example:
            >>> from hf_fvo import Grammar
            >>> Grammar.budget(20, 10, zero=0, one=1, eos_token_id=2, vocab_size=3).num_states
            177
        """
        if _COMPILER is None:  # pragma: no cover - importing hf_fvo.grammar registers it
            raise GrammarError("internal: no grammar compiler is registered")
        return _COMPILER.budget(
            n, k, zero=zero, one=one, eos_token_id=eos_token_id, vocab_size=vocab_size
        )

    # -- the interface ------------------------------------------------------------------------

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Length of every mask returned by :meth:`allowed`."""

    @property
    @abstractmethod
    def eos_token_ids(self) -> tuple[int, ...]:
        """All end-of-sequence token ids."""

    @property
    @abstractmethod
    def source(self) -> str:
        """A short description of what was compiled."""

    @property
    @abstractmethod
    def initial_state(self) -> State:
        """The state before any token."""

    @property
    @abstractmethod
    def terminal_state(self) -> State:
        """The absorbing state after EOS; only EOS is allowed there (EOS stays legal)."""

    @property
    @abstractmethod
    def is_finite(self) -> bool | None:
        """Whether the language has finitely many token sequences (``None``: not known)."""

    @property
    @abstractmethod
    def tokenizer_fingerprint(self) -> str:
        """Digest of the token bytes this grammar was compiled for."""

    @property
    def vocabulary(self) -> TokenVocabulary | None:
        """The token bytes this grammar was compiled for (``None`` for grammars given as token
        tables, e.g. :meth:`from_transitions`)."""
        return getattr(self, "_vocabulary", None)

    @abstractmethod
    def allowed(self, state: State) -> torch.Tensor:
        """The admissible set A_t as a ``torch.bool`` mask of length :attr:`vocab_size`; EOS is
        ``True`` exactly at accepting states."""

    @abstractmethod
    def next_state(self, state: State, token: int) -> State | None:
        """The state after ``token``, or ``None`` when the token is not allowed at ``state``."""

    @abstractmethod
    def is_accepting(self, state: State) -> bool:
        """True where the text so far is a complete member of the language."""

    @abstractmethod
    def min_tokens_to_accept(self, state: State) -> int:
        """A lower bound on the tokens (EOS not counted) from ``state`` to acceptance: exact on
        automata; 0 or 1 on pushdown grammars (0 exactly at accepting states)."""

    def tokens_to_accept(self, state: State) -> int | None:
        """Tokens (EOS not counted) of a shortest completion from ``state`` that the grammar can
        vouch for: exact on automata; on pushdown grammars the length of a completion the
        parser verified, an upper bound (``None`` if none was found).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_regex("[0-9]{4}", load_default_tokenizer())
            >>> g.tokens_to_accept(g.initial_state)
            4
        """
        return self.min_tokens_to_accept(state)

    def shortest_bounds(self, state: State, enough: int | None = None) -> tuple[int, int | None]:
        """(lower, upper): bounds on the fewest tokens (EOS not counted) from ``state`` to
        acceptance. ``lower`` is proven (a refusal stands on it); ``upper`` is the length of a
        completion the grammar verified (``None``: none found). Equal on automata; on pushdown
        grammars of JSON schemas the initial state's come from the schema (a member built and
        parsed; the literal text every member writes, the automaton of a regular superset).
        ``enough``: a lower bound that reaches it is all the caller needs (a refusal of budget
        B needs B), so the slower bounds are skipped once one does.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_json_schema({"enum": ["yes", "no"]}, load_default_tokenizer())
            >>> g.shortest_bounds(g.initial_state)  # the automaton's distance, a member's tokens
            (3, 3)
        """
        if enough is not None:
            check_int("enough", enough)
        return self.min_tokens_to_accept(state), self.tokens_to_accept(state)

    def budget_refusal(
        self, state: State, budget: int, what: str = "the budget", remedy: str = ""
    ) -> GrammarError | None:
        """``None`` when a completion from ``state`` fits ``budget`` tokens (EOS included) by
        the budget rule (:meth:`admissible`), else the error to raise, naming the budget as
        ``what`` (and ending with ``remedy``, if given): :class:`~hf_fvo.errors.BudgetTooSmallError`
        where the lower bound proves that no member fits,
        :class:`~hf_fvo.errors.BudgetUndecidedError` (both bounds named) where it does not.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_json_schema({"enum": ["yes", "no"]}, load_default_tokenizer())
            >>> g.budget_refusal(g.initial_state, 4) is None
            True
            >>> print(g.budget_refusal(g.initial_state, 3, "max_new_tokens=3"))
            max_new_tokens=3 is below the shortest member of json_schema ...: it needs 3 tokens...
        """
        budget = check_int("budget", budget)
        if budget >= 1 and bool(self.admissible(state, budget).any()):
            return None
        lower, upper = self.shortest_bounds(state, enough=budget)
        below = f"{what} is below the shortest member of {self.source}"
        if lower + 1 > budget:  # (lower may stop at the budget: the proof needs no more)
            needs = f"{lower} tokens plus EOS"
            if lower != upper:
                found = "" if upper is None else f" (the shortest member found has {upper})"
                needs = f"at least {needs}{found}"
            return BudgetTooSmallError(f"{below}: it needs {needs}{remedy}")
        found = ("no completion was found within the search's limits" if upper is None
                 else f"the shortest member hf_fvo found has {upper} tokens")  # fmt: skip
        return BudgetUndecidedError(
            f"{what} may not fit a member of {self.source}: a member needs at least {lower} "
            f"tokens plus EOS, which fits, but {found}; hf_fvo cannot show that one fits"
            + ("" if upper is None else f" (raise the budget to {upper + 1})") + remedy,
            lower, upper,
        )  # fmt: skip

    @abstractmethod
    def admissible(self, state: State, remaining: int | None) -> torch.Tensor:
        """A_t restricted to candidates y whose completion fits in ``remaining`` tokens (EOS
        counted; ``None``: unbounded): y is kept when its next state accepts within
        ``remaining - 2`` more tokens, and EOS only at accepting states, so no output is ever
        cut off. Exact on automata; pushdown grammars keep y when a completion of its next
        state, verified by the parser, fits (:meth:`tokens_to_accept`)."""

    # -- what the masks leave to a check -------------------------------------------------------

    @property
    def checked(self) -> tuple[Any, ...]:
        """The constraints this grammar's masks only over-approximate and an exact check of the
        finished text decides (:class:`~hf_fvo.grammar.schema.Checked`: JSON pointer, keyword,
        why); empty when the masks alone decide membership. The language is the masks' language
        intersected with the check: :func:`hf_fvo.generate` redraws an output that fails it
        (bounded tries), particles give it weight 0, exact Φ counts only the completions that
        pass it.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_json_schema({"type": "array", "uniqueItems": True},
            ...                              load_default_tokenizer())
            >>> [c.keyword for c in g.checked]
            ['uniqueItems']
        """
        return self._checked

    def check(self, token_ids: Iterable[int]) -> str | None:
        """``None`` when the text these tokens spell (EOS and special tokens spell nothing)
        passes the grammar's final check — always, for a grammar without one — else what
        failed, naming the keyword by its JSON pointer.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_json_schema({"type": "array", "uniqueItems": True}, tok)
            >>> g.check(tok.encode("[1, 2]")) is None, g.check(tok.encode("[1, 1]"))[:14]
            (True, '#/uniqueItems:')
        """
        if self._final_check is None:
            return None
        vocab = self.vocabulary
        if vocab is None:  # pragma: no cover - checks come only with a tokenizer's grammars
            raise GrammarError("internal: a grammar with a check has no vocabulary")
        return self.check_text(vocab.decode(int(t) for t in token_ids).decode("utf-8", "replace"))

    def check_text(self, text: str) -> str | None:
        """:meth:`check` of a text (``None``: it passes, or there is no check).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_json_schema({"type": "string", "format": "hostname"},
            ...                              load_default_tokenizer())
            >>> g.check_text('"xn--bcher-kva.example"') is None, g.check_text('"xn--X"')[:9]
            (True, '#/format:')
        """
        return None if self._final_check is None else self._final_check(text)

    def _attach_check(self, check: Callable[[str], str | None], checked: tuple[Any, ...]) -> None:
        """Give a grammar being compiled its exact final check (the compiler calls this before
        anyone holds the grammar; compiled grammars never change)."""
        self._final_check = check
        self._checked = tuple(checked)

    # -- derived ------------------------------------------------------------------------------

    def lazy_admissible(self, state: State, remaining: int | None) -> LazyAdmissible | None:
        """:meth:`admissible`'s set asked one token at a time, where the grammar can answer
        some tokens more cheaply than the whole set (pushdown grammars where the state's
        witness fits the room: a token that begins it is a member at once); ``None`` where it
        cannot (the default). The set is :meth:`admissible`'s token for token, whichever
        tokens are asked first. A sampler draws from the superset and checks its draw.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_json_schema({"type": "string", "pattern": "^a+$"}, tok)
            >>> lazy = g.lazy_admissible(g.walk(tok.encode('"a')), 10)  # below the closing bound
            >>> lazy.admits(tok.encode("aa")[0]), lazy.admits(tok.encode('"')[0])
            (True, True)
            >>> bool((lazy.resolve() <= lazy.superset).all())
            True
        """
        return None

    def admissible_bias(
        self, state: State, remaining: int | None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """:meth:`admissible` as an additive mask: 0.0 on A_t, −inf elsewhere, a CPU tensor of
        ``dtype`` (float32, bfloat16 or float16). ``scores + bias`` masks a row in one pass,
        without the float arithmetic of building it (the values are bit patterns).

        Example:
            >>> import torch
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_choices(["yes", "no"], tok)
            >>> bias = g.admissible_bias(g.initial_state, None)
            >>> torch.equal(bias == 0, g.admissible(g.initial_state, None)), bias.min().item()
            (True, -inf)
        """
        uint, neg_inf = bias_bits(dtype)
        off = np.subtract(1, self.admissible(state, remaining).numpy().view(np.uint8), dtype=uint)
        off *= neg_inf  # 1 → −inf's bits, 0 → 0.0's
        return torch.from_numpy(off).view(dtype)

    def admissible_words(
        self, states: Sequence[State], remaining: Sequence[int | None]
    ) -> np.ndarray:
        """:meth:`admissible` for a batch of rows, packed: row i is the set at ``states[i]``
        with ``remaining[i]`` tokens left, 32 ids a word (id t is bit ``t & 31`` of word
        ``t >> 5``, XGrammar's and llguidance's layout), int32, shape (rows, ⌈vocab/32⌉). Each
        distinct (state, remaining) is computed once; pushdown grammars compute their parsers'
        masks for the distinct states together, in parallel threads.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.grammar.bitmask import unpack
            >>> from hf_fvo.models import load_default_tokenizer
            >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
            >>> s = g.initial_state
            >>> words = g.admissible_words([s, s, g.walk([105])], [None, 1, None])
            >>> words.shape == (3, (g.vocab_size + 31) // 32)
            True
            >>> bool((unpack(words, g.vocab_size)[0] == g.admissible(s, None)).all())
            True
        """
        _same_rows(states, remaining)
        found: dict[tuple[Any, int | None], np.ndarray] = {}
        out = np.empty((len(states), (self.vocab_size + 31) // 32), dtype=np.int32)
        for i, (state, left) in enumerate(zip(states, remaining, strict=True)):
            key = (state if isinstance(state, Hashable) else id(state), left)
            if key not in found:
                found[key] = self._packed(state, left)
            out[i] = found[key]
        return out

    def _packed(self, state: State, remaining: int | None) -> np.ndarray:
        """One row of :meth:`admissible_words`: :meth:`admissible`, packed (a backend may pack
        its set without building the mask)."""
        return pack(self.admissible(state, remaining).numpy())

    @property
    def eos_token_id(self) -> int:
        """The (first) end-of-sequence token id."""
        return self.eos_token_ids[0]

    def walk(self, token_ids: Iterable[int], state: State | None = None) -> State | None:
        """The state after consuming ``token_ids`` from ``state`` (default: initial), or None.

        Raises:
            GrammarError: ``token_ids`` is not a sequence of ints.
        """
        if isinstance(token_ids, (str, bytes)):
            raise InvalidArgumentError("walk takes token ids (ints), not text; encode it first")
        s: State | None = self.initial_state if state is None else state
        for t in token_ids:
            s = self.next_state(s, _token_id(t))
            if s is None:
                return None
        return s

    def can_accept_within(self, state: State, n: int) -> bool:
        """Whether acceptance may be reachable within ``n`` more tokens (EOS not counted);
        exact on automata, a necessary condition on pushdown grammars."""
        return self.min_tokens_to_accept(state) <= n

    def max_tokens_to_accept(self, state: State) -> int | None:
        """Most tokens (EOS not counted) on a path from ``state`` to acceptance; ``None`` when
        unbounded or unknown."""
        return None

    def matcher(self, state: State | None = None) -> GrammarMatcher:
        """A per-sequence matcher starting at ``state`` (default: initial).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> m = Grammar.from_choices(["yes", "no"], tok).matcher()
            >>> m.consume(tok.convert_tokens_to_ids("no")), m.is_accepting()
            (True, True)
        """
        return GrammarMatcher(self, state)

    def token_trie(
        self,
        max_new_tokens: int | None = None,
        *,
        state: State | None = None,
        max_nodes: int = 1_000_000,
    ) -> TokenTrie:
        """Enumerate every token sequence from ``state`` to EOS as a trie (token automata only).

        Raises:
            GrammarError: this grammar is not a token automaton.
        """
        raise GrammarError(
            f"token tries are built on token automata; {self.source} is a {self.backend} "
            "grammar (compile it with backend='automaton' if its language is regular)"
        )

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Raise :class:`~hf_fvo.grammar.TokenizerError` unless ``tokenizer`` spells every token
        as this grammar was compiled for.

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> Grammar.from_choices(["a"], tok).check_tokenizer(tok)
        """
        vocab = vocabulary_of(tokenizer, self.eos_token_ids)
        if vocab.fingerprint != self.tokenizer_fingerprint:
            raise TokenizerError(
                f"{self.source} was compiled for another tokenizer (its token bytes differ); "
                "compile the grammar with this model's tokenizer"
            )


def _same_rows(states: Sequence[Any], remaining: Sequence[Any]) -> None:
    if len(states) != len(remaining):
        raise InvalidArgumentError(
            f"admissible_words needs one remaining budget per state: {len(states)} states, "
            f"{len(remaining)} budgets"
        )


def require_grammar(grammar: Any) -> Grammar:
    """``grammar`` itself when it is a compiled :class:`Grammar`.

    Raises:
        InvalidArgumentError: anything else (a schema dict, a regex string…), saying how to
            compile one.

    Example:
        >>> from hf_fvo.grammar.interface import require_grammar
        >>> require_grammar({"type": "string"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_fvo.errors.InvalidArgumentError: grammar must be an hf_fvo.Grammar (...), got dict
    """
    if not isinstance(grammar, Grammar):
        raise InvalidArgumentError(
            "grammar must be an hf_fvo.Grammar (compile one with Grammar.from_json_schema, "
            f"from_regex, …), got {type(grammar).__name__}"
        )
    return grammar


def _token_id(token: Any) -> int:
    if isinstance(token, bool) or not isinstance(token, int):
        try:
            import numpy as np

            if isinstance(token, np.integer):
                return int(token)
        except ImportError:  # pragma: no cover
            pass
        if isinstance(token, torch.Tensor) and token.numel() == 1 and not token.is_floating_point():
            return int(token)
        raise InvalidArgumentError(f"a token id must be an int, got {token!r}")
    return token


class GrammarMatcher:
    """One sequence's position in a compiled grammar: consume tokens, roll back, read A_t.

    The grammar is shared and never changes; the matcher holds the states along the sequence,
    so rolling back is free. This is the per-sequence half of the compile/match split.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> m = Grammar.from_regex("[0-9]+", tok).matcher()
        >>> [m.consume(t) for t in tok.encode("12a")]
        [True, True, False]
        >>> tok.decode(m.tokens), m.is_accepting()
        ('12', True)
        >>> m.rollback(1); tok.decode(m.tokens)
        '1'
    """

    def __init__(self, grammar: Grammar, state: State | None = None) -> None:
        self.grammar = grammar
        self._states: list[State] = [grammar.initial_state if state is None else state]
        self._tokens: list[int] = []

    @property
    def state(self) -> State:
        """The current grammar state."""
        return self._states[-1]

    @property
    def tokens(self) -> tuple[int, ...]:
        """Tokens consumed so far."""
        return tuple(self._tokens)

    def consume(self, token: int) -> bool:
        """Advance by ``token`` if it is allowed; return whether it was (nothing changes if not)."""
        nxt = self.grammar.next_state(self.state, _token_id(token))
        if nxt is None:
            return False
        self._states.append(nxt)
        self._tokens.append(int(token))
        return True

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` consumed tokens."""
        n = check_int("n", n)
        if n > len(self._tokens):
            raise InvalidArgumentError(
                f"cannot roll back {n} of {len(self._tokens)} consumed tokens"
            )
        if n:
            del self._states[-n:]
            del self._tokens[-n:]

    def allowed(self) -> torch.Tensor:
        """The admissible set at the current position (see :meth:`Grammar.allowed`)."""
        return self.grammar.allowed(self.state)

    def is_accepting(self) -> bool:
        """Whether the consumed text is a complete member."""
        return self.grammar.is_accepting(self.state)

    def is_terminated(self) -> bool:
        """Whether EOS has been consumed."""
        return self.state == self.grammar.terminal_state

    def fork(self) -> GrammarMatcher:
        """An independent matcher at the same position (states are shared, never mutated)."""
        other = GrammarMatcher(self.grammar)
        other._states = list(self._states)
        other._tokens = list(self._tokens)
        return other
