"""The pushdown backend: llguidance's Earley parser over token bytes, behind :class:`Grammar`.

llguidance (an Outlines backend) parses the token bytes of JSON schemas, Lark and EBNF grammars
with a lazily built lexer, so compiling takes milliseconds and nothing is unrolled; a mask costs
tens of microseconds. Three things are added so that its admissible sets are exactly the
language's, token by token:

- ``no_forcing``: llguidance normally restricts grammar-forced text to its canonical
  tokenization (after ``((`` in ``(())|()`` only ``))`` is allowed, not ``)``); every
  tokenization of a member is a distinct sequence of the language, so forcing is off.
- UTF-8: llguidance admits some overlong byte sequences (``E0 90``); masks are intersected with
  a UTF-8 validity automaton over the token bytes, so text is always valid UTF-8.
- Token bytes come from :class:`~hf_fvo.grammar.TokenVocabulary`, the same bytes the automaton
  backend uses; special tokens spell nothing, and EOS is allowed exactly at accepting states.

States are immutable :class:`PushdownState` values (a parser snapshot each); ``next_state`` copies
the parser (~15 µs) and never changes the state it is given.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    InvalidArgumentError,
    InvalidGrammarError,
    InvalidRegexError,
    UnsupportedSchemaError,
)
from hf_fvo.grammar.base import Grammar, bias_bits
from hf_fvo.grammar.cache import Memo, vocabulary_of
from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = [
    "PushdownGrammar",
    "PushdownState",
    "compile_ebnf",
    "compile_json_schema",
    "compile_lark",
    "compile_regex",
    "patterns_intersect",
]

_CACHE = Memo(64)
_TOKENIZERS = Memo(4)
_UTF8 = Memo(4)
_OPTIONS = '%llguidance {"no_forcing": true}\n'


def _limits() -> Any:
    import llguidance

    # Lexer fuel bounds the work of building a grammar (no hang on a pathological schema); the
    # default is raised so that large real schemas compile.
    return llguidance.LLParserLimits(initial_lexer_fuel=20_000_000, max_grammar_size=2_000_000)


class PushdownState:
    """A position in a :class:`PushdownGrammar`: an immutable parser snapshot.

    Compare states by identity only; equal texts reached by different token sequences are
    different states.
    """

    __slots__ = ("_accepting", "_bits", "_mask", "_matcher", "_owner", "_utf8", "_words")

    def __init__(self, owner: PushdownGrammar, matcher: Any, utf8: int) -> None:
        self._owner = owner
        self._matcher = matcher  # never consumed after construction
        self._utf8 = utf8
        self._words: np.ndarray | None = None  # admissible non-EOS ids, packed (uint32 words)
        self._bits: np.ndarray | None = None  # the same, one 0/1 byte per id, on first use
        self._mask: torch.Tensor | None = None  # the same, unpacked (non-EOS ids < n)
        self._accepting: bool | None = None

    def __repr__(self) -> str:
        return f"PushdownState(at 0x{id(self):x})"


class PushdownGrammar(Grammar):
    """A grammar enforced by llguidance's pushdown parser (JSON schema, Lark, EBNF, regex).

    Build one with :meth:`Grammar.from_json_schema` (the default backend for schemas),
    :meth:`Grammar.from_lark`, :meth:`Grammar.from_ebnf` or
    ``Grammar.from_regex(..., backend="pushdown")``.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, tok,
        ...                              whitespace="")
        >>> g.backend, g.is_accepting(g.walk(tok.encode("[1,22]"))), g.walk(tok.encode("[1,]"))
        ('pushdown', True, None)
    """

    backend = "pushdown"

    def __init__(
        self,
        definition: str,
        vocab: TokenVocabulary,
        vocab_size: int,
        source: str,
        notes: Sequence[str] = (),
        finite: bool | None = None,
    ) -> None:
        """Compile an llguidance grammar definition; use the ``Grammar.from_*`` constructors.
        ``finite=True`` states that the language is finite (shown from its JSON schema)."""
        self._definition = definition
        self._vocab = self._vocabulary = vocab
        self._vocab_size = int(vocab_size)
        self._source = source
        self._notes = tuple(notes)
        self._finite = True if finite else None
        self._setup()

    def _setup(self) -> None:
        import llguidance

        vocab = self._vocab
        self._n = len(vocab)
        self._eos = vocab.eos_token_ids
        self._tokenizer = _llg_tokenizer(vocab)
        self._ok, self._utf8_next = _utf8_tables(vocab)
        self._nwords = (self._n + 31) // 32
        self._ok_words = np.zeros((len(self._ok), self._nwords), dtype=np.uint32)
        for s, row in enumerate(self._ok):  # the UTF-8 filter packed like the parser's masks
            packed = np.packbits(row, bitorder="little")
            self._ok_words[s].view(np.uint8)[: len(packed)] = packed
            for e in self._eos:  # EOS is the grammar's business, not the parser's
                if e < self._n:
                    self._ok_words[s, e >> 5] &= ~np.uint32(1 << (e & 31))
        root = llguidance.LLMatcher(
            self._tokenizer, self._definition, log_level=0, limits=_limits()
        )
        if root.is_error():
            raise _translate(root.get_error(), self._source)
        self._initial = PushdownState(self, root, 0)
        self._terminal = PushdownState(self, None, 0)
        self._terminal._accepting = True
        if not self.is_accepting(self._initial) and not self._bits(self._initial).any():
            raise EmptyLanguageError(f"{self._source}: no token sequence spells a member")

    # -- the Grammar interface ------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    @property
    def source(self) -> str:
        return self._source

    @property
    def notes(self) -> tuple[str, ...]:
        """What the compiler dropped because it constrains nothing (e.g. a ``format`` the JSON
        Schema spec does not define, which the spec makes an annotation)."""
        return self._notes

    @property
    def definition(self) -> str:
        """The llguidance grammar this was compiled from."""
        return self._definition

    @property
    def initial_state(self) -> PushdownState:
        return self._initial

    @property
    def terminal_state(self) -> PushdownState:
        return self._terminal

    @property
    def is_finite(self) -> bool | None:
        # True where compile_json_schema showed it from the schema; else not known
        return self._finite

    @property
    def tokenizer_fingerprint(self) -> str:
        return self._vocab.fingerprint

    def allowed(self, state: PushdownState) -> torch.Tensor:
        self._check_state(state)
        mask = torch.zeros(self._vocab_size, dtype=torch.bool)
        if state is not self._terminal:
            self._bits(state)
            mask[: self._n] = state._mask
        if self.is_accepting(state):
            mask[list(self._eos)] = True
        return mask

    def next_state(self, state: PushdownState, token: int) -> PushdownState | None:
        self._check_state(state)
        token = int(token)
        if token in self._eos:
            return self._terminal if self.is_accepting(state) else None
        if state is self._terminal or not 0 <= token < self._n:
            return None
        if not (int(self._words(state)[token >> 5]) >> (token & 31)) & 1:
            return None
        matcher = state._matcher.deep_copy()
        if not matcher.consume_token(token):
            raise GrammarError(f"internal: llguidance refused token {token} its mask allowed")
        return PushdownState(self, matcher, int(self._utf8_next[state._utf8, token]))

    def is_accepting(self, state: PushdownState) -> bool:
        self._check_state(state)
        if state._accepting is None:
            state._accepting = bool(state._utf8 == 0 and state._matcher.is_accepting())
        return state._accepting

    def min_tokens_to_accept(self, state: PushdownState) -> int:
        return 0 if self.is_accepting(state) else 1

    def admissible(self, state: PushdownState, remaining: int | None) -> torch.Tensor:
        mask = self.allowed(state)
        if remaining is None or remaining > 1:
            return mask
        if remaining < 1 or not self.is_accepting(state):
            return torch.zeros_like(mask)
        only_eos = torch.zeros_like(mask)
        only_eos[list(self._eos)] = True
        return only_eos

    def admissible_bias(
        self, state: PushdownState, remaining: int | None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        # straight from the parser's packed mask: one table lookup per byte of it
        if state is self._terminal or (remaining is not None and remaining <= 1):
            return super().admissible_bias(state, remaining, dtype)
        self._check_state(state)
        uint, neg_inf = bias_bits(dtype)
        words = self._words(state)
        bias = np.take(_bias_table(uint, neg_inf), words.view(np.uint8), axis=0).reshape(-1)
        if len(bias) < self._vocab_size:  # ids past the parser's vocabulary: never admissible
            bias = np.concatenate([bias, np.full(self._vocab_size - len(bias), neg_inf, uint)])
        bias = bias[: self._vocab_size]
        if self.is_accepting(state):
            bias[list(self._eos)] = 0
        return torch.from_numpy(bias).view(dtype)

    # -- internals ------------------------------------------------------------------------------

    def _words(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, packed as the parser writes them (bit
        ``t & 31`` of word ``t >> 5``), UTF-8 filter applied; computed once per state."""
        if state._words is None:
            words = np.zeros(self._nwords, dtype=np.uint32)
            state._matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
            words &= self._ok_words[state._utf8]
            state._words = words
        return state._words

    def _bits(self, state: PushdownState) -> np.ndarray:
        """The admissible non-EOS tokens at ``state``, one 0/1 byte per id < n (the bool
        tensor ``state._mask`` shares its memory)."""
        if state._bits is None:
            words = self._words(state)
            state._bits = np.unpackbits(words.view(np.uint8), count=self._n, bitorder="little")
            state._mask = torch.from_numpy(state._bits.view(np.bool_))
        return state._bits

    def _check_state(self, state: Any) -> None:
        if not isinstance(state, PushdownState) or state._owner is not self:
            raise InvalidArgumentError(f"{state!r} is not a state of this grammar ({self._source})")

    def __getstate__(self) -> dict[str, Any]:
        return {
            "definition": self._definition,
            "vocab": self._vocab,
            "vocab_size": self._vocab_size,
            "source": self._source,
            "notes": self._notes,
            "finite": self._finite,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._definition = state["definition"]
        self._vocab = self._vocabulary = state["vocab"]
        self._vocab_size = state["vocab_size"]
        self._source = state["source"]
        self._notes = state["notes"]
        self._finite = state.get("finite")
        self._setup()

    def __repr__(self) -> str:
        return f"PushdownGrammar({self._source}, vocab_size={self._vocab_size})"


# -- compilation ------------------------------------------------------------------------------


def compile_json_schema(
    schema: Any,
    tokenizer: Any,
    *,
    whitespace: str | None = None,
    vocab_size: int | None = None,
    strict: bool = True,
    eos_token_id: int | Sequence[int] | None = None,
) -> PushdownGrammar:
    """A JSON schema as a pushdown grammar (see :meth:`Grammar.from_json_schema`)."""
    from hf_fvo.grammar.json_schema import has_finite_language, prepare_json_schema
    from hf_fvo.grammar.sources import check_whitespace

    check_whitespace(whitespace)
    prepared = prepare_json_schema(schema, strict=strict)
    body = prepared.schema
    if body is False:
        raise EmptyLanguageError("the schema is `false`: it admits nothing")
    if body is True:
        body = {}
    options: dict[str, Any] = {"whitespace_pattern": "[ ]?"}
    if whitespace == "":
        options = {"whitespace_flexible": False}
    elif whitespace is not None:
        options = {"whitespace_pattern": whitespace}
    text = json.dumps({**body, "x-guidance": options}, separators=(",", ":"))
    ws = "default" if whitespace is None else repr(whitespace)
    mode = "" if strict else " strict=False"
    source = f"json_schema {_shorten(prepared.text)} whitespace={ws}{mode}"
    notes = [
        f"{ptr}: {what} is not a JSON Schema format; ignored" for ptr, what in prepared.ignored
    ]
    # finitely many values and bounded whitespace ("[ ]?" or none): finitely many token strings
    finite = whitespace in (None, "") and has_finite_language(body)
    return _compiled(
        ("json_schema", text), f"{_OPTIONS}start: %json {text}", tokenizer, vocab_size,
        eos_token_id, source, notes, finite,
    )  # fmt: skip


def compile_regex(
    pattern: str,
    tokenizer: Any,
    *,
    vocab_size: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> PushdownGrammar:
    """A regex (matched in full) as a pushdown grammar."""
    import llguidance

    body = llguidance.regex_to_lark(pattern, "")
    return _compiled(
        ("regex", pattern), f"{_OPTIONS}start: /{body}/", tokenizer, vocab_size,
        eos_token_id, f"regex {_shorten(pattern)}",
    )  # fmt: skip


def compile_lark(
    grammar: Any,
    tokenizer: Any,
    *,
    vocab_size: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> PushdownGrammar:
    """A Lark grammar (llguidance's dialect) as a pushdown grammar."""
    definition = getattr(grammar, "definition", grammar)  # outlines.types.CFG
    if not isinstance(definition, str):
        raise InvalidGrammarError(f"a Lark grammar must be a str, got {type(grammar).__name__}")
    return _compiled(
        ("lark", definition), _OPTIONS + definition, tokenizer, vocab_size, eos_token_id,
        f"lark {_shorten(' '.join(definition.split()))}",
    )  # fmt: skip


def compile_ebnf(
    grammar: str,
    tokenizer: Any,
    *,
    vocab_size: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
) -> PushdownGrammar:
    """A GBNF (llama.cpp EBNF) grammar, converted to Lark by llguidance."""
    from llguidance.gbnf_to_lark import any_to_lark

    if not isinstance(grammar, str):
        raise InvalidGrammarError(f"an EBNF grammar must be a str, got {type(grammar).__name__}")
    try:
        lark = any_to_lark(grammar)
    except Exception as exc:  # the converter raises plain exceptions on syntax errors
        raise InvalidGrammarError(f"cannot read the EBNF grammar: {exc}") from exc
    return _compiled(
        ("ebnf", grammar), _OPTIONS + lark, tokenizer, vocab_size, eos_token_id,
        f"ebnf {_shorten(' '.join(grammar.split()))}",
    )  # fmt: skip


def _compiled(
    key: tuple[str, str],
    definition: str,
    tokenizer: Any,
    vocab_size: int | None,
    eos_token_id: int | Sequence[int] | None,
    source: str,
    notes: Sequence[str] = (),
    finite: bool = False,
) -> PushdownGrammar:
    from hf_fvo.grammar.compile import resolve_vocab_size

    vocab = vocabulary_of(tokenizer, eos_token_id)
    size = resolve_vocab_size(vocab, vocab_size)
    return _CACHE.get_or_build(
        (*key, vocab.fingerprint, size),
        lambda: PushdownGrammar(definition, vocab, size, source, notes, finite),
    )


def _translate(message: str, source: str) -> GrammarError:
    text = " ".join(message.split())
    head = text.split(" | ")[0][:400]
    if "Unsatisfiable" in text or ("is empty" in text and "Unable" not in text):
        return EmptyLanguageError(f"{source}: the grammar admits no text ({head})")
    if "too big" in text or "too large" in text or "limit" in text:
        return GrammarTooLargeError(f"{source}: {head}")
    if source.startswith("json_schema"):
        return UnsupportedSchemaError(f"{source}: {head}")
    if source.startswith("regex"):
        return InvalidRegexError(f"{source}: {head}")
    return InvalidGrammarError(f"{source}: {head}")


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.lru_cache(maxsize=4096)
def patterns_intersect(patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether some string matches every JSON-Schema ``pattern`` (unanchored, ECMA-style) in
    ``patterns``; ``True`` when llguidance cannot decide.

    Example:
        >>> from hf_fvo.grammar.pushdown import patterns_intersect
        >>> patterns_intersect(("^a", "b$")), patterns_intersect(("^[a-z]+$", "[0-9]"))
        (True, False)
    """
    import llguidance

    schema = {"type": "string", "allOf": [{"pattern": p} for p in patterns]}
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    message = llguidance.LLMatcher.validate_grammar(grammar, None, limits=_limits())
    return "Unsatisfiable" not in message


def _llg_tokenizer(vocab: TokenVocabulary) -> Any:
    """An llguidance tokenizer over exactly the vocabulary's token bytes (cached)."""
    import llguidance

    def build() -> Any:
        wrapper = llguidance.TokenizerWrapper(_VocabularyWrapper(vocab))
        return llguidance.LLTokenizer(
            wrapper, n_vocab=len(vocab), eos_token=list(vocab.eos_token_ids)
        )

    return _TOKENIZERS.get_or_build(vocab.fingerprint, build)


class _VocabularyWrapper:
    """What ``llguidance.TokenizerWrapper`` reads: token bytes, special ids and a tokenize
    function (used only for canonical forcing, which is off)."""

    def __init__(self, vocab: TokenVocabulary) -> None:
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        # ids that spell nothing get a placeholder name; they are listed as special, so they
        # never match grammar text
        self.tokens = [b if b else f"<[{i}]>".encode() for i, b in enumerate(vocab.token_bytes)]
        self.special_token_ids = [i for i, b in enumerate(vocab.token_bytes) if not b]
        self._greedy = {b: i for i, b in enumerate(vocab.token_bytes) if b and len(b) == 1}

    def __call__(self, text: bytes) -> list[int]:
        return [self._greedy[bytes([b])] for b in text if bytes([b]) in self._greedy]


@functools.cache
def _bias_table(uint: type, neg_inf: Any) -> np.ndarray:
    """``table[b, i]``: bit i of byte b as a bias, 0 where set and −inf's bits where clear."""
    byte, bit = np.arange(256)[:, None], np.arange(8)[None, :]
    return np.where((byte >> bit) & 1, uint(0), neg_inf).astype(uint)


# UTF-8 validity: state 0 is a character boundary; the others await continuation bytes.
def _utf8_byte_table() -> np.ndarray:
    table = np.full((8, 256), -1, dtype=np.int8)
    table[0, 0x00:0x80] = 0
    table[0, 0xC2:0xE0] = 1
    table[0, 0xE0] = 4
    table[0, 0xE1:0xED] = 2
    table[0, 0xED] = 5
    table[0, 0xEE:0xF0] = 2
    table[0, 0xF0] = 6
    table[0, 0xF1:0xF4] = 3
    table[0, 0xF4] = 7
    table[1, 0x80:0xC0] = 0
    table[2, 0x80:0xC0] = 1
    table[3, 0x80:0xC0] = 2
    table[4, 0xA0:0xC0] = 1  # E0: no overlong 3-byte forms
    table[5, 0x80:0xA0] = 1  # ED: no surrogates
    table[6, 0x90:0xC0] = 2  # F0: no overlong 4-byte forms
    table[7, 0x80:0x90] = 2  # F4: nothing above U+10FFFF
    return table


def _utf8_tables(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """``ok[s, t]``: token t keeps the text valid UTF-8 from state s; ``next[s, t]``: the state
    after it. Tokens that spell nothing are never ok."""
    return _UTF8.get_or_build(vocab.fingerprint, lambda: _build_utf8_tables(vocab))


def _build_utf8_tables(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    table = _utf8_byte_table()
    n = len(vocab)
    lengths = np.array([len(b) if b else 0 for b in vocab.token_bytes], dtype=np.int64)
    width = int(lengths.max())
    padded = np.zeros((n, width), dtype=np.uint8)
    for i, b in enumerate(vocab.token_bytes):
        if b:
            padded[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    nxt = np.zeros((8, n), dtype=np.int8)
    for start in range(8):
        state = np.full(n, start, dtype=np.int8)
        for pos in range(width):
            live = (pos < lengths) & (state >= 0)
            state[live] = table[state[live], padded[live, pos]]
        nxt[start] = state
    ok = ((nxt >= 0) & (lengths > 0)[None, :]).astype(np.uint8)
    return ok, np.maximum(nxt, 0)
