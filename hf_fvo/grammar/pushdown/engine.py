"""llguidance, as the pushdown backend uses it: the tokenizer it parses over, the grammar
definitions hf_fvo hands it, its limits and error messages, and two questions it answers for
the rest of the grammar layer (do these patterns share a string? what is wrong with this regex?).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from hf_fvo.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    InvalidArgumentError,
    InvalidGrammarError,
    InvalidRegexError,
    UnsupportedSchemaError,
)
from hf_fvo.grammar.pushdown.completion import BYTE_EOS, Completer
from hf_fvo.grammar.pushdown.utf8 import json_text_tables, string_content, utf8_tables
from hf_fvo.grammar.vocabulary import TokenVocabulary
from hf_fvo.lru import LRU

__all__ = [
    "PushdownTokenizer",
    "ebnf_definition",
    "json_definition",
    "json_lark_definition",
    "key_names",
    "lark_definition",
    "limits",
    "marked_definition",
    "patterns_intersect",
    "probe_definition",
    "regex_definition",
    "regex_problem",
    "translate_error",
]

# every tokenization of a member is a distinct sequence of the language: canonical forcing off
_OPTIONS = '%llguidance {"no_forcing": true}\n'
_OWN_LEXEMES = "// a JSON schema with hf_fvo's lexemes\n"
_CHAR_START = '(?:[^"\\\\\\x00-\\x1f]|'  # how a character of hf_fvo's string lexemes begins
# a string lexeme's line: its name (free, or counted m to M times), character and count
_STRING_LEXEME = re.compile(
    r'(?P<name>STRING(?:_\d+_\d*)?): /"(?P<char>.*)(?P<count>\*|\{\d+,\d*\})"/$'
)
# the lexeme of an object's other keys: the free string less its listed names, each in every
# spelling (schema.lark: `"CHAR*"` & ~`"name"|…`, a name's character as (?:raw|\\uXXXX))
_KEY_LEXEME = re.compile(r'(?P<name>KEY_EXTRA\d+): /"(?P<char>.*)\*"/ & ~/(?P<names>.*)/$')
# a string leaf llguidance's JSON mode writes (schema.lark's `vN: %json {…}`), and a character
# a JSON string holds raw wherever that mode takes it (no quote, backslash, control, DEL,
# U+2028/9)
_PATTERN_LEAF = re.compile(r"(?P<rule>v\d+): %json (?P<node>\{.*\})$")
_RAW_CHAR = '[^"\\\\\\x00-\\x1f\\x7f\\x{2028}\\x{2029}]'
_HEX_DIGIT = r"(?:[0-9]|\[[a-f][A-F]\])"
_NAME_CHAR = re.compile(  # one character of such a name: its escape, last, gives it back
    r"\(\?:(?:(?:(?!\(\?:).)*?\|)?(?P<escape>(?:\\\\u" + _HEX_DIGIT + r"{4}){1,2})\)"
)
# bytes of token text one LLTokenizer may hold: llguidance's token trie panics a little past
# 4.5 million (measured with SmolLM2's vocabulary and suffixes of 78 and 85 bytes)
_PROBE_TRIE = 4_000_000
# probe vocabularies kept, one per suffix (20–190 MB each, by the suffix's length): 8 particles
# rarely need more; a server with many concurrent rows sets HF_FVO_PROBE_SUFFIXES higher
_PROBE_SUFFIXES = 8
# what a probe vocabulary costs to build, in µs per vocabulary token, by the suffix's bytes,
# and a candidate's parse, in µs, by its tail's tokens (SmolLM2's 49,152 tokens, measured
# 2026-11-29: a build 0.24 s at 2 bytes, 0.62 s at 40, 1.07 s at 80, 1.92 s at 150; a parse
# ~1.3 µs with a tail of 1 token, 6.8 µs with 7, 14.7 µs with 52): a long suffix costs more
# to build, but its tail's parses more still
_BUILD_US = (4.1, 0.23)  # + per byte
_PARSE_US = (2.0, 0.25)  # + per token
_PROBE_ASKED = 4096  # suffixes whose parses so far (µs) are counted toward a build


def limits() -> Any:
    """The parser limits hf_fvo compiles under: lexer fuel bounds the work of building a
    grammar (no hang on a pathological schema); the default is raised so that large real
    schemas compile."""
    import llguidance

    return llguidance.LLParserLimits(initial_lexer_fuel=20_000_000, max_grammar_size=2_000_000)


class PushdownTokenizer:
    """One tokenizer as llguidance parses over it: an ``LLTokenizer`` over exactly the
    vocabulary's token bytes (special tokens spell nothing), and the UTF-8 tables its masks are
    intersected with, packed like the parser's masks (bit ``t & 31`` of word ``t >> 5``; EOS
    clear: EOS is the grammar's business, not the parser's). Built once per tokenizer by the
    :class:`~hf_fvo.grammar.GrammarCompiler`.

    Example:
        >>> from hf_fvo.grammar.pushdown import PushdownTokenizer
        >>> from hf_fvo.grammar.vocabulary import BRACKETS
        >>> PushdownTokenizer(BRACKETS).ok_words.shape  # 8 UTF-8 states × one 32-bit word
        (8, 1)
    """

    def __init__(self, vocab: TokenVocabulary) -> None:
        import llguidance

        self.vocab = vocab
        wrapper = llguidance.TokenizerWrapper(_VocabularyWrapper(vocab))
        self.llg = llguidance.LLTokenizer(
            wrapper, n_vocab=len(vocab), eos_token=list(vocab.eos_token_ids)
        )
        self.words = (len(vocab) + 31) // 32
        # the completion searches parse over the 256 bytes (ids 0–255) and EOS (BYTE_EOS)
        self.byte_llg = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(_ByteWrapper()), n_vocab=BYTE_EOS + 1, eos_token=BYTE_EOS
        )
        self.ok, self.utf8_next, self.ok_words, self.completer = self._filter(utf8_tables)
        self._json_text: tuple[np.ndarray, np.ndarray, Completer] | None = None
        self._probes: LRU[bytes, Any] = LRU(_probe_suffixes())
        self._asked: LRU[bytes, int] = LRU(_PROBE_ASKED)  # candidates parsed, per suffix
        self._readings: LRU[Any, tuple[list[str], dict[bytes, int], np.ndarray, bytes]] = LRU(
            _READINGS
        )
        # a control byte no JSON text holds raw, spelled by one token: the free-string mark
        spellings = self.completer.spellings
        markers = [(b, ids[0]) for b in range(0x20) if (ids := spellings.get(bytes([b])))]
        self.marker = markers[0] if markers else None
        # another such byte: the mark of the other keys' lexemes (KEY_EXTRA: free less names)
        self.key_marker = markers[1] if len(markers) > 1 else None
        # and a third: the mark of the free text around a pattern's match
        self.pattern_marker = markers[2] if len(markers) > 2 else None
        self._content_table: tuple[np.ndarray, np.ndarray, dict[int, tuple[int, ...]]] | None = None
        self._spaces_only: np.ndarray | None = None
        self._content_index: np.ndarray | None = None

    def warm(self) -> None:
        """Build the per-token tables the budget rule reads (~0.15 s for a 49k vocabulary,
        once per tokenizer), so that no generation step pays for them."""
        tables = ("sizes", "characters", "closers", "openers", "plain_lengths", "last_bytes",
                  "surrogate_escaped", "not_raw_whole", "spaces_only", "content_index",
                  "key_closers")  # fmt: skip
        for table in tables:
            getattr(self, table)

    @property
    def spaces_only(self) -> np.ndarray:
        """Per token id, whether its bytes are JSON whitespace only (space, tab, newline,
        carriage return): the tokens a budget's searches try last."""
        if self._spaces_only is None:
            spaces = frozenset(b" \t\n\r")
            self._spaces_only = np.array(
                [bool(b) and spaces.issuperset(b) for b in self.vocab.token_bytes], dtype=bool
            )
        return self._spaces_only

    @functools.cached_property
    def backslashed(self) -> np.ndarray:
        """Per token id (0/1 bytes): whether its bytes hold a backslash (inside a JSON string:
        an escape, which may spell any character)."""
        return np.array([b"\\" in (b or b"") for b in self.vocab.token_bytes], dtype=np.uint8)

    @functools.cached_property
    def closers(self) -> np.ndarray:
        """Per token id, how many closing brackets (``}`` and ``]``) its bytes hold (at most
        255): a token that completes a JSON text must close every container still open."""
        spelled = self.vocab.token_bytes
        counts = [(b or b"").count(b"}") + (b or b"").count(b"]") for b in spelled]
        return np.minimum(np.array(counts, dtype=np.int64), 255).astype(np.uint8)

    @functools.cached_property
    def key_closers(self) -> np.ndarray:
        """Per token id, which of a JSON key's ends it can write (bits, 0 for none): 1 where
        its bytes hold a quote and a colon after it (it can end a key and begin its value);
        2 where they hold a colon (it can follow a key's closing quote); 4 where they are
        plain content (:attr:`plain_lengths`) then one quote (inside a key: they close it,
        nothing after)."""
        spelled, plain = self.vocab.token_bytes, self.plain_lengths

        def kinds(b: bytes, n: int) -> int:
            quote = b.find(b'"')
            ended = quote >= 0 and b.find(b":", quote + 1) >= 0
            return ended | (b":" in b) << 1 | (b[n:] == b'"') << 2

        return np.array([kinds(b or b"", int(n)) for b, n in zip(spelled, plain, strict=False)],
                        dtype=np.uint8)  # fmt: skip

    @functools.cached_property
    def last_bytes(self) -> np.ndarray:
        """Per token id, its last byte (256 where it spells nothing): a token that completes a
        text ends it."""
        return np.array([b[-1] if b else 256 for b in self.vocab.token_bytes], dtype=np.int16)

    @functools.cached_property
    def openers(self) -> np.ndarray:
        """Per token id, how many opening brackets (``{`` and ``[``) its bytes hold (at most
        255): no token opens more objects and arrays than that."""
        spelled = self.vocab.token_bytes
        counts = [(b or b"").count(b"{") + (b or b"").count(b"[") for b in spelled]
        return np.minimum(np.array(counts, dtype=np.int64), 255).astype(np.uint8)

    @functools.cached_property
    def surrogate_escaped(self) -> np.ndarray:
        """Per token id (0/1 bytes): whether its bytes may escape a UTF-16 surrogate
        (``\\ud…``, either case: one character to hf_fvo's count of a pair, perhaps two to an
        engine that counts each escape)."""
        return np.array([b"\\ud" in (b or b"").lower() for b in self.vocab.token_bytes],
                        dtype=np.uint8)  # fmt: skip

    @functools.cached_property
    def not_raw_whole(self) -> np.ndarray:
        """Per token id below the vocabulary's size (0/1 bytes): whether it is not whole raw
        string content (it has a backslash, or ends inside a character or an escape): what
        the pattern certificate does not speak for."""
        return self.backslashed | (self.content_after[: len(self.vocab)] != 0)

    @functools.cached_property
    def plain_lengths(self) -> np.ndarray:
        """Per token id, how many of its first bytes are plain (:func:`plain_length`)."""
        match = _PLAIN.match  # (the function's loop in C: ~15 ms for 49k tokens, not 0.2 s)
        return np.array([match(b or b"").end() for b in self.vocab.token_bytes], dtype=np.int64)

    def ascii_reading(
        self, key: Any, table: dict[int, int], ids: np.ndarray
    ) -> tuple[list[str], np.ndarray]:
        """The tokens that spell plain printable ASCII (:func:`plain_length`: no quote, no
        backslash) as ``str.translate(table)`` writes them: the distinct texts, and per token
        id the index of its text (−1: not such a token; −2: not read yet); read for ``ids``
        at least, each token once per key (a step asks a few hundred, the vocabulary is
        ~50k), kept for the last few keys (a pattern automaton: its table writes each
        character as one it cannot tell apart).

        Example:
            >>> import numpy as np
            >>> from hf_fvo.grammar.vocabulary import TokenVocabulary
            >>> from hf_fvo.grammar.pushdown.engine import PushdownTokenizer
            >>> vocab = TokenVocabulary([b"ab", b"ba", b'"', b"x", None], eos_token_ids=(4,))
            >>> alike = {ord(c): ord("a") for c in "ab"}
            >>> PushdownTokenizer(vocab).ascii_reading("ab", alike, np.array([0, 1, 2]))
            (['aa'], array([ 0,  0, -1, -2, -2]))
        """
        known = self._readings.get(key)
        if known is None:
            alike = bytearray(range(256))  # (bytes.translate: ~5× faster than str's)
            for code, to in table.items():
                if code < 0x80 and to < 0x80:
                    alike[code] = to
            known = ([], {}, np.full(len(self.sizes), -2, dtype=np.int64), bytes(alike))
            self._readings.put(key, known)
        texts, index, spelled, alike_bytes = known
        todo = ids[spelled[ids] == -2]
        if len(todo):
            sizes = self.sizes[todo]
            plain = (self.plain_lengths[todo] == sizes) & (sizes > 0)
            spelled[todo[~plain]] = -1
            token_bytes = self.vocab.token_bytes
            for y in todo[plain].tolist():
                text = token_bytes[y].translate(alike_bytes)
                k = index.get(text)
                if k is None:
                    k = index[text] = len(texts)
                    texts.append(text.decode("ascii"))
                spelled[y] = k
        return texts, spelled

    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """Per token id, how many bytes it spells (the order a budget's searches try tokens)."""
        return np.array([len(b or b"") for b in self.vocab.token_bytes], dtype=np.int64)

    @functools.cached_property
    def characters(self) -> np.ndarray:
        """Per token id, how many UTF-8 characters begin in its bytes (its bytes that are not
        continuation bytes)."""
        joined = b"".join(b or b"" for b in self.vocab.token_bytes)
        begins = (np.frombuffer(joined, dtype=np.uint8) & 0xC0) != 0x80
        counted = np.concatenate(([0], np.cumsum(begins, dtype=np.int64)))
        ends = np.cumsum(self.sizes)
        return counted[ends] - counted[ends - self.sizes]

    @property
    def content_after(self) -> np.ndarray:
        """Per token id, where its bytes can stand inside one of hf_fvo's JSON string lexemes
        from a character boundary, the state after them (:func:`~.utf8.string_content`: 0 on
        a boundary, 1–7 inside a UTF-8 character, 8–19 inside an escape); −1 elsewhere."""
        return self._content()[0]

    @property
    def content_index(self) -> np.ndarray:
        """:attr:`content_after` as array indices (a lookup by it is ~2× faster than by int8)."""
        if self._content_index is None:
            self._content_index = self.content_after.astype(np.intp)
        return self._content_index

    @property
    def content_chars(self) -> np.ndarray:
        """Per token id, the characters its bytes begin there (0 where it cannot stand)."""
        return self._content()[1]

    @property
    def content_fill(self) -> dict[int, tuple[int, ...]]:
        """Per state of :attr:`content_after`, the fewest tokens that take it back to a
        character boundary (0: none); a state no tokens finish is left out."""
        return self._content()[2]

    def _content(self) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, ...]]]:
        if self._content_table is None:
            after, chars, escapes = string_content(self.vocab)
            fill = dict(self.completer.fill)  # UTF-8: continuation bytes
            for state, text in escapes.items():  # (each the fewest tokens' text)
                spelled = self.completer.fewest_tokens(text)
                if spelled is not None:
                    fill[state] = spelled
            # small integer types: the budget rule reads them over the whole vocabulary
            self._content_table = (after.astype(np.int8), chars.astype(np.uint8), fill)
        return self._content_table

    def json_text(self) -> tuple[np.ndarray, np.ndarray, Completer]:
        """The byte filter of JSON text (:func:`~.utf8.json_text_tables`) as ``(next,
        ok_words, completer)``, like ``utf8_next``, ``ok_words`` and ``completer``."""
        if self._json_text is None:
            _, nxt, words, completer = self._filter(json_text_tables)
            self._json_text = (nxt, words, completer)
        return self._json_text

    def _filter(self, tables: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, Completer]:
        ok, nxt = tables(self.vocab)
        n = len(self.vocab)
        words = np.zeros((len(ok), self.words), dtype=np.uint32)
        for s, row in enumerate(ok):
            packed = np.packbits(row, bitorder="little")
            words[s].view(np.uint8)[: len(packed)] = packed
            for e in self.vocab.eos_token_ids:
                if e < n:
                    words[s, e >> 5] &= ~np.uint32(1 << (e & 31))
        return ok, nxt, words, Completer(self.vocab, nxt, words)

    def probe(
        self, suffix: bytes, asked: int | None = None, tail: int = 1
    ) -> tuple[tuple[Any, np.ndarray, dict[str, Any]], ...] | None:
        """Parts of a probe vocabulary: per part an ``LLTokenizer`` over the vocabulary plus one
        id per token of the part (``n + j`` spells token ``ids[j]``'s bytes followed by
        ``suffix`` and a NUL byte), ``ids``, and the parsers built over it, by definition
        (kept with it, so that one bound cache holds them all). Against a grammar that ends in NUL
        (:func:`probe_definition`), one mask per part says for every token y of it whether y
        then ``suffix`` completes a member. llguidance's token trie holds a few million bytes,
        so the tokens are split into as many parts as the suffix's length needs (one up to
        ~70 bytes); built in ~0.3 s and 20–110 MB a part, kept for the last 8 suffixes
        (``HF_FVO_PROBE_SUFFIXES``; particles, or a server's rows, in different states probe
        with different suffixes each step).

        ``asked``: how many candidates the caller would otherwise parse one by one, each with
        ``tail`` tokens after it. A vocabulary not kept is then built only once the parses
        asked with its suffix cost what building it costs (:data:`_PARSE_US` each against
        :data:`_BUILD_US` a vocabulary token), and ``None`` is returned until then: ski
        rental, so a suffix asked once (a server's rows mostly differ) costs its parses, never
        a build, and no suffix costs more than about twice the cheaper of the two."""
        if asked is not None:
            parts = self._probes.get(suffix)
            if parts is not None:
                return parts
            total = self._asked.get(suffix, 0) + asked * (_PARSE_US[0] + _PARSE_US[1] * tail)
            if total < self.build_cost(suffix):
                self._asked.put(suffix, total)
                return None
            self._asked.pop(suffix)
        return self._probes.get_or_build(suffix, lambda: self._probe(suffix))

    def build_cost(self, suffix: bytes) -> float:
        """What building ``suffix``'s probe vocabulary costs, in µs (:data:`_BUILD_US`)."""
        return len(self.vocab) * (_BUILD_US[0] + _BUILD_US[1] * len(suffix))

    def _probe(self, suffix: bytes) -> tuple[tuple[Any, np.ndarray, dict[str, Any]], ...]:
        import llguidance

        base = _VocabularyWrapper(self.vocab)
        n = len(base.tokens)
        room = _PROBE_TRIE - sum(len(t) for t in base.tokens)
        parts: list[list[int]] = [[]]
        used = 0
        for i, b in enumerate(self.vocab.token_bytes):
            if not b:
                continue  # spells nothing: never a candidate
            cost = len(b) + len(suffix) + 1
            if parts[-1] and used + cost > room:
                parts.append([])
                used = 0
            parts[-1].append(i)
            used += cost
        out = []
        for ids in parts:
            wrapper = _VocabularyWrapper(self.vocab)
            wrapper.tokens = base.tokens + [
                self.vocab.token_bytes[i] + suffix + b"\x00" for i in ids
            ]
            out.append((
                llguidance.LLTokenizer(
                    llguidance.TokenizerWrapper(wrapper), n_vocab=n + len(ids),
                    eos_token=list(self.vocab.eos_token_ids), slices=[],
                ),
                np.array(ids, dtype=np.int64),
                {},
            ))  # fmt: skip
        return tuple(out)


_READINGS = 16  # pattern automata whose reading of the vocabulary a tokenizer keeps


def plain_length(text: bytes) -> int:
    """How many of ``text``'s first bytes are plain printable ASCII other than a quote or a
    backslash: a lexeme's content (a key's or a string's letters), which content a token may
    replace.

    Example:
        >>> from hf_fvo.grammar.pushdown.engine import plain_length
        >>> plain_length(b'ab"}'), plain_length(b'"x')
        (2, 0)
    """
    found = _PLAIN.match(text)
    assert found is not None  # (the pattern matches the empty text)
    return found.end()


_PLAIN = re.compile(rb"[\x20\x21\x23-\x5b\x5d-\x7e]*")  # printable ASCII but a quote, a backslash


def _probe_suffixes() -> int:
    """How many probe vocabularies a tokenizer keeps: ``HF_FVO_PROBE_SUFFIXES``, else 8."""
    kept = os.environ.get("HF_FVO_PROBE_SUFFIXES", "").strip()
    if not kept:
        return _PROBE_SUFFIXES
    if not kept.isdigit() or int(kept) < 1:
        raise InvalidArgumentError(
            f"HF_FVO_PROBE_SUFFIXES must be a positive integer (probe vocabularies kept), got "
            f"{kept!r}"
        )
    return int(kept)


class _ByteWrapper:
    """What ``llguidance.TokenizerWrapper`` reads for the byte vocabulary: one token per byte,
    then EOS."""

    eos_token_id = BYTE_EOS
    bos_token_id = None

    def __init__(self) -> None:
        self.special_token_ids = [BYTE_EOS]
        self.tokens = [bytes([b]) for b in range(256)] + [b"<[eos]>"]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


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


# -- definitions ------------------------------------------------------------------------------


def json_definition(schema: Any, whitespace: str | None) -> str:
    """The llguidance grammar of a prepared JSON schema in llguidance's JSON mode
    (``whitespace`` as in :meth:`~hf_fvo.grammar.Grammar.from_json_schema`).

    Example:
        >>> from hf_fvo.grammar.pushdown import json_definition
        >>> json_definition({"type": "integer"}, "").splitlines()[1]
        'start: %json {"type":"integer","x-guidance":{"whitespace_flexible":false}}'
    """
    options: dict[str, Any] = {"whitespace_pattern": "[ ]?"}
    if whitespace == "":
        options = {"whitespace_flexible": False}
    elif whitespace is not None:
        options = {"whitespace_pattern": whitespace}
    text = json.dumps({**schema, "x-guidance": options}, separators=(",", ":"))
    return f"{_OPTIONS}start: %json {text}"


def json_lark_definition(grammar: str) -> str:
    """The llguidance grammar of a JSON schema lowered to Lark with hf_fvo's own lexemes
    (:func:`hf_fvo.grammar.schema.lark.schema_lark`): marked, so that its probes end in NUL
    and its masks are not held to llguidance's canonical escapes.

    Example:
        >>> from hf_fvo.grammar.pushdown.engine import json_lark_definition, probe_definition
        >>> probe_definition(json_lark_definition("start: INT\\nINT: /[0-9]+/")).splitlines()[2]
        'start: (INT) "\\\\u0000"'
    """
    return f"{_OPTIONS}{_OWN_LEXEMES}{grammar}"


def canonical_json(definition: str) -> bool:
    """Whether a definition is a JSON schema in llguidance's JSON mode (canonical escapes)."""
    _, sep, body = definition.partition("\nstart: %json ")
    return bool(sep) and "\n" not in body


def probe_definition(definition: str) -> str | None:
    """A JSON grammar's definition followed by one NUL byte (which JSON text never holds raw),
    for :meth:`PushdownTokenizer.probe`; ``None`` for other grammars."""
    if canonical_json(definition):
        head, _, body = definition.partition("\nstart: %json ")
        return f'{head}\nstart: value "\\u0000"\nvalue: %json {body}'
    if _OWN_LEXEMES in definition:
        head, _, rest = definition.partition("\nstart: ")
        start, _, rules = rest.partition("\n")
        return f'{head}\nstart: ({start}) "\\u0000"\n{rules}'
    return None


def marked_definition(
    definition: str,
    byte: int,
    key_byte: int | None = None,
    pattern_byte: int | None = None,
    raw: Callable[[str, str, str], str | None] | None = None,
) -> str | None:
    """An own-lexeme JSON grammar (:func:`json_lark_definition`) whose string lexemes — the free
    ``STRING`` and the bounded ``STRING_m_M`` — also admit the raw control byte ``byte`` as a
    character (counted like one), for the string certificate of
    :meth:`~hf_fvo.grammar.budget.CertifiedBudget.admissible`; ``None`` for grammars without
    such a lexeme. With ``key_byte``, the lexemes of an object's other keys (``KEY_EXTRA``: a
    free string that is none of the listed names, :func:`key_names`) admit that byte as a
    character too, where their names read back. With ``pattern_byte`` and ``raw`` (the
    content of such a lexeme for a pattern, given regexes of a free character and of the
    byte: :func:`~hf_fvo.grammar.schema.patterns.marked_content`), a string leaf of a
    ``pattern`` alone also takes that lexeme: free text, a raw match, free text (not after a
    final ``$``), the free characters raw or that byte. On text without those bytes both
    grammars say the same (that lexeme's texts are the leaf's).

    Example:
        >>> from hf_fvo.grammar.pushdown.engine import json_lark_definition, marked_definition
        >>> from hf_fvo.grammar.schema.lark import schema_lark
        >>> plain = json_lark_definition(schema_lark({"type": "string"}, ""))
        >>> marked_definition(plain, 0).splitlines()[-1].endswith('|\\\\x00)*"/')
        True
    """
    if _OWN_LEXEMES not in definition:
        return None
    lines = definition.split("\n")
    marked = False
    for i, line in enumerate(lines):
        # a string lexeme: characters (the first alternative every character but the quote,
        # the backslash and the controls: schema.lark's CHAR_REGEX), any number or bounded
        found = _STRING_LEXEME.match(line)
        if found is not None and found["char"].startswith(_CHAR_START):
            name, char, count = found["name"], found["char"], found["count"]
            lines[i] = f'{name}: /"(?:{char}|\\x{byte:02x}){count}"/'
            marked = True
        leaf = None if pattern_byte is None or raw is None else _PATTERN_LEAF.match(line)
        if leaf is not None:
            node = json.loads(leaf["node"])
            content = (raw(node["pattern"], _RAW_CHAR, f"\\x{pattern_byte:02x}")
                       if set(node) == {"type", "pattern", "x-guidance"}
                       and node["type"] == "string" and isinstance(node["pattern"], str)
                       else None)  # fmt: skip
            if content is not None:
                lexeme = f"PATTERN_{leaf['rule'][1:]}"
                lines[i] = f"{line} | {lexeme}"
                lines.append(f'{lexeme}: /"{content}"/')
                marked = True
        keyed = None if key_byte is None else _KEY_LEXEME.match(line)
        if (keyed is not None and keyed["char"].startswith(_CHAR_START)
                and spelled_names(keyed["names"]) is not None):  # fmt: skip
            name, char, names = keyed["name"], keyed["char"], keyed["names"]
            lines[i] = f'{name}: /"(?:{char}|\\x{key_byte:02x})*"/ & ~/{names}/'
            marked = True
    return "\n".join(lines) if marked else None


def key_names(definition: str) -> frozenset[str]:
    """Every name the ``KEY_EXTRA`` lexemes of an own-lexeme JSON grammar exclude (those whose
    names read back: the ones :func:`marked_definition` marks).

    Example:
        >>> from hf_fvo.grammar.pushdown.engine import json_lark_definition, key_names
        >>> from hf_fvo.grammar.schema.lark import schema_lark
        >>> sorted(key_names(json_lark_definition(schema_lark(
        ...     {"properties": {"a/b": {}, "é": {}}, "additionalProperties": {}}, ""))))
        ['a/b', 'é']
    """
    names: set[str] = set()
    for line in definition.split("\n"):
        keyed = _KEY_LEXEME.match(line)
        if keyed is not None:
            names.update(spelled_names(keyed["names"]) or ())
    return frozenset(names)


def spelled_names(regex: str) -> tuple[str, ...] | None:
    """The names of schema.lark's alternation of JSON string literals in every spelling
    (``"…"|"…"``, each character ``(?:raw|\\uXXXX)``), each character read back from its
    escape; ``None`` where ``regex`` is not one."""
    names, i = [], 0
    while True:
        if not regex.startswith('"', i):
            return None
        i, units = i + 1, []
        while (found := _NAME_CHAR.match(regex, i)) is not None:
            digits = re.sub(r"\[([a-f])[A-F]\]", r"\1", found["escape"]).replace("\\\\u", "")
            units += [int(digits[j : j + 4], 16) for j in range(0, len(digits), 4)]
            i = found.end()
        if not regex.startswith('"', i):
            return None
        try:
            names.append(b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be"))
        except UnicodeDecodeError:
            return None
        i += 1
        if i == len(regex):
            return tuple(names)
        if not regex.startswith("|", i):
            return None
        i += 1


def regex_definition(pattern: str) -> str:
    """The llguidance grammar of a regex matched in full."""
    import llguidance

    return f"{_OPTIONS}start: /{llguidance.regex_to_lark(pattern, '')}/"


def lark_definition(grammar: str) -> str:
    """The llguidance grammar of a Lark grammar in llguidance's dialect."""
    return _OPTIONS + grammar


def ebnf_definition(grammar: str) -> str:
    """The llguidance grammar of a GBNF (llama.cpp EBNF) grammar, converted to Lark.

    Raises:
        InvalidGrammarError: the grammar cannot be read.
    """
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        return _OPTIONS + any_to_lark(grammar)
    except Exception as exc:  # the converter raises plain exceptions on syntax errors
        raise InvalidGrammarError(f"cannot read the EBNF grammar: {exc}") from exc


def translate_error(message: str, source: str) -> GrammarError:
    """llguidance's error message as hf_fvo's typed error, naming ``source``."""
    text = " ".join(message.split())
    head = text.split(" | ")[0][:400]
    if "Unsatisfiable" in text or ("is empty" in text and "Unable" not in text):
        return EmptyLanguageError(f"{source}: the grammar admits no text ({head})")
    if "too big" in text or "too large" in text or "limit" in text or "u16::MAX" in text:
        return GrammarTooLargeError(f"{source}: {head}")
    if source.startswith("json_schema"):
        return UnsupportedSchemaError(f"{source}: {head}")
    if source.startswith("regex"):
        return InvalidRegexError(f"{source}: {head}")
    return InvalidGrammarError(f"{source}: {head}")


# -- questions answered with llguidance's parsers --------------------------------------------


@functools.lru_cache(maxsize=4096)
def patterns_intersect(patterns: tuple[str, ...]) -> bool:
    """Whether some string matches every JSON-Schema ``pattern`` (unanchored, ECMA-style) in
    ``patterns``; ``True`` when llguidance cannot decide. The oracle the JSON-schema rewrite
    asks (:data:`hf_fvo.grammar.schema.facts.Intersect`).

    Example:
        >>> from hf_fvo.grammar.pushdown import patterns_intersect
        >>> patterns_intersect(("^a", "b$")), patterns_intersect(("^[a-z]+$", "[0-9]"))
        (True, False)
    """
    import llguidance

    schema = {"type": "string", "allOf": [{"pattern": p} for p in patterns]}
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    message = llguidance.LLMatcher.validate_grammar(grammar, None, limits=limits())
    return "Unsatisfiable" not in message


def regex_problem(pattern: str) -> str | None:
    """What is wrong with ``pattern`` as a Rust-syntax regex (the ``regex-syntax`` parser's own
    words, via llguidance), or ``None`` if it parses.

    Example:
        >>> from hf_fvo.grammar.pushdown import regex_problem
        >>> regex_problem("a(?=b)")
        'look-around, including look-ahead and look-behind, is not supported'
        >>> regex_problem("[a-z]+") is None
        True
    """
    import llguidance

    try:
        body = llguidance.regex_to_lark(pattern, "")
        message = llguidance.LLMatcher.validate_grammar(f"start: /{body}/", None)
    except Exception as exc:  # the converter raises plain exceptions
        return str(exc) or type(exc).__name__
    if not message or "error" not in message.lower():
        return None
    found = re.search(r"error: ([^\n|]*)", message)
    return (found.group(1) if found else " ".join(message.split())).strip()[:300]
