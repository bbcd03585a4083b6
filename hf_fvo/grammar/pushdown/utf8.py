"""Byte automata over token bytes that the pushdown backend intersects llguidance's masks with:
which tokens keep the text in the automaton's language from each of its states (state 0, at a
character boundary, is the only accepting one).

- UTF-8 validity (:func:`utf8_tables`): llguidance admits some overlong byte sequences
  (``E0 90``); eight states of a UTF-8 decoder.
- JSON text (:func:`json_text_tables`): UTF-8 validity and, in strings, only the escapes
  llguidance's JSON strings are built from (``\\" \\\\ \\b \\f \\n \\r \\t``,
  ``\\u00XX`` for control characters and U+007F). llguidance 1.9.1 admits every ``\\uXXXX``
  and ``\\/`` in the key of an object's extra properties where it excludes the listed names,
  so ``{"\\u0061": 1}`` passed as an extra key when ``"a"`` is listed with another schema; six
  more states (inside an escape) close that.
"""

from __future__ import annotations

import numpy as np

from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = ["STRING_STATES", "content_state", "json_text_tables", "string_content", "utf8_tables"]

STRING_STATES = 20  # of the string-content automaton (_string_byte_table)


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


_HEX = b"0123456789abcdefABCDEF"


def _json_byte_table() -> np.ndarray:
    """UTF-8 validity (states 0–7) and the canonical JSON escapes: 8 after a backslash, 9 after
    ``\\u``, 10 after ``\\u0``, 11 after ``\\u00``, 12 after ``\\u00[01]``, 13 after
    ``\\u007`` (JSON text has a backslash only inside strings)."""
    table = np.full((14, 256), -1, dtype=np.int8)
    table[:8] = _utf8_byte_table()
    table[0, ord("\\")] = 8
    for c in b'"\\bfnrt':
        table[8, c] = 0
    table[8, ord("u")] = 9
    table[9, ord("0")] = 10
    table[10, ord("0")] = 11
    table[11, ord("0")] = table[11, ord("1")] = 12
    table[11, ord("7")] = 13
    for c in _HEX:
        table[12, c] = 0
    table[13, ord("f")] = table[13, ord("F")] = 0
    return table


def _string_byte_table() -> np.ndarray:
    """The characters of hf_fvo's free JSON string (``schema.lark.CHAR_REGEX``): UTF-8 (states
    0–7) without ``"``, the backslash and the controls, and its escapes: 8 after a backslash,
    9 after ``\\u``, 10 after ``\\u[dD]``, 11–13 with 3–1 hex digits to go, 14–16 a high
    surrogate with 2–0 to go, then its low one's 17 ``\\``, 18 ``u``, 19 ``[dD]``."""
    table = np.full((STRING_STATES, 256), -1, dtype=np.int8)
    table[:8] = _utf8_byte_table()
    table[0, :0x20] = table[0, ord('"')] = -1
    table[0, ord("\\")] = 8
    for c in b'"\\/bfnrt':
        table[8, c] = 0
    table[8, ord("u")] = 9
    for c in _HEX:
        table[9, c] = 11
        table[11, c], table[12, c], table[13, c] = 12, 13, 0
        table[14, c], table[15, c] = 15, 16
    table[9, ord("d")] = table[9, ord("D")] = 10
    for c in b"01234567":
        table[10, c] = 12
    for c in b"89abAB":
        table[10, c] = 14
    table[16, ord("\\")], table[17, ord("u")] = 17, 18
    table[18, ord("d")] = table[18, ord("D")] = 19
    for c in b"cdefCDEF":
        table[19, c] = 12
    return table


_STRING_TABLE = _string_byte_table()


def _escape_fills(
    table: np.ndarray, lengths: np.ndarray, padded: np.ndarray, token_bytes: list
) -> dict[int, bytes]:
    """Per escape state of ``table`` (8 and up), the text of the fewest tokens that finish the
    escape and nothing more (every byte but the last inside it, the last back on a character
    boundary); among as few, fewer bytes, then the lower ids. Where no tokens finish it, the
    fewest bytes that do (:data:`_FILLS`)."""
    escapes = range(8, len(table))
    # only tokens spelled wholly of bytes an escape reads can stay inside one (exact, and it
    # takes the search from the whole vocabulary to a few hundred tokens)
    inside = np.zeros(256, dtype=bool)
    inside[list(_ESCAPE_BYTES)] = True
    short = np.flatnonzero((lengths > 0) & (lengths <= _LONGEST_ESCAPE))
    sub_padded = padded[short, :_LONGEST_ESCAPE]
    cols = np.arange(sub_padded.shape[1])
    kept = short[(inside[sub_padded] | (cols >= lengths[short, None])).all(1)]
    sub_lengths, sub_padded = lengths[kept], padded[kept, :_LONGEST_ESCAPE]
    edges: dict[int, dict[int, int]] = {}  # state → {state after: its token with fewest bytes}
    for begin in escapes:
        state = np.full(len(kept), begin, dtype=np.int8)
        for pos in range(sub_padded.shape[1]):
            live = (pos < sub_lengths) & (state >= 0)
            state[live & (state == 0)] = -1  # (a boundary before its last byte: more written)
            live &= state > 0
            state[live] = table[state[live], sub_padded[live, pos]]
        ids = kept[(state == 0) | (state >= 8)]
        ids = ids[np.lexsort((ids, lengths[ids]))]  # (fewer bytes, then lower ids, first)
        after = state[np.searchsorted(kept, ids)]
        edges[begin] = {int(to): int(ids[np.argmax(after == to)]) for to in np.unique(after)}
    # fewest tokens to a boundary, then fewest bytes (rounds: an escape is 12 bytes at most)
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {0: (0, 0, ())}  # state → (n, bytes, ids)
    for _ in escapes:
        for begin in escapes:
            for to, y in edges[begin].items():
                if to in best:
                    n, size, rest = best[to]
                    found = (n + 1, size + int(lengths[y]), (y, *rest))
                    if begin not in best or found[:2] < best[begin][:2]:
                        best[begin] = found
    found = {state: b"".join(token_bytes[t] for t in ids)
             for state, (_, _, ids) in best.items() if state}  # fmt: skip
    return {**_FILLS, **found}


_LONGEST_ESCAPE = 11  # bytes after the backslash: ``ud83d\\ude00``
_ESCAPE_BYTES = b'\\"/bfnrtu' + _HEX  # every byte an escape reads after its backslash
_LOW = b"\\udc00"
# the fewest bytes that finish each escape state (where a vocabulary's tokens do not)
_FILLS = {8: b"n", 9: b"0000", 10: b"000", 11: b"000", 12: b"00", 13: b"0", 14: b"00" + _LOW,
          15: b"0" + _LOW, 16: _LOW, 17: _LOW[1:], 18: _LOW[2:], 19: _LOW[3:]}  # fmt: skip


def string_content(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray, dict[int, bytes]]:
    """Per token, read from a character boundary inside one of hf_fvo's JSON string lexemes:
    the state of :func:`_string_byte_table` after its bytes (−1 where they cannot stand there:
    a ``"``, a control, a bad escape, broken UTF-8; 0: it ends on a boundary) and how many
    characters it begins; and per escape state a text that finishes the escape in the fewest
    of the vocabulary's tokens (SmolLM2 writes ``ffff`` in one, ``0000`` in four).

    Example:
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.grammar.pushdown.utf8 import string_content
        >>> vocab = TokenVocabulary([b"a\\\\n", b"b\\\\", b'"', None], [3])
        >>> after, chars, fills = string_content(vocab)
        >>> after.tolist(), chars.tolist(), fills[8]  # "a\\n": two characters; "b\\": open;
        ... # (\\" finishes an escape begun)
        ([0, 8, -1, -1], [2, 2, 0, 0], b'"')
    """
    table = _STRING_TABLE
    lengths, padded = _padded(vocab)
    fills = _escape_fills(table, lengths, padded, vocab.token_bytes)
    state = np.zeros(len(vocab), dtype=np.int8)
    chars = np.zeros(len(vocab), dtype=np.int64)
    for pos in range(padded.shape[1]):
        live = (pos < lengths) & (state >= 0)
        chars[live & (state == 0)] += 1  # a byte read at a boundary begins a character
        state[live] = table[state[live], padded[live, pos]]
    after = np.where((state >= 0) & (lengths > 0), state.astype(np.int64), -1)
    return after, np.where(after >= 0, chars, 0), fills


def content_state(data: bytes) -> int:
    """The state of :func:`_string_byte_table` after ``data`` read from a character boundary
    inside a string lexeme (−1 where it cannot stand there), as :func:`string_content` reads
    a token.

    Example:
        >>> from hf_fvo.grammar.pushdown.utf8 import content_state
        >>> content_state(b"ab"), content_state(rb"\\u"), content_state(b'"')
        (0, 9, -1)
    """
    table, state = _STRING_TABLE, 0
    for byte in data:
        state = int(table[state, byte])
        if state < 0:
            break
    return state


def json_text_tables(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """:func:`utf8_tables` for JSON text: UTF-8 validity and canonical string escapes.

    Example:
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.grammar.pushdown.utf8 import json_text_tables
        >>> spelled = [b'"\\\\n"', b'"\\\\u0061"', b"\\\\u001f", None]
        >>> ok, nxt = json_text_tables(TokenVocabulary(spelled, [3]))
        >>> ok[0].tolist()  # \\n and \\u001f are llguidance's spellings, \\u0061 is not
        [1, 0, 1, 0]
    """
    return _tables(vocab, _json_byte_table())


def utf8_tables(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """``ok[s, t]``: token t keeps the text valid UTF-8 from state s; ``next[s, t]``: the state
    after it. Tokens that spell nothing are never ok.

    Example:
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> from hf_fvo.grammar.pushdown.utf8 import utf8_tables
        >>> ok, nxt = utf8_tables(TokenVocabulary([b"a", b"\\xc3", b"\\xa9", None], [3]))
        >>> ok[0].tolist(), int(nxt[0, 1]), ok[nxt[0, 1]].tolist()  # "é" split over two tokens
        ([1, 1, 0, 0], 1, [0, 0, 1, 0])
    """
    return _tables(vocab, _utf8_byte_table())


def _padded(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Each token's length and its bytes, zero-padded to the longest."""
    spelled = [b or b"" for b in vocab.token_bytes]
    lengths = np.array([len(b) for b in spelled], dtype=np.int64)
    width = max(int(lengths.max()), 1)
    # (one buffer of every token padded to the width: ~10× faster than a copy per row)
    joined = b"".join(b.ljust(width, b"\x00") for b in spelled)
    padded = np.frombuffer(joined, dtype=np.uint8).reshape(len(spelled), width).copy()
    return lengths, padded


def _tables(vocab: TokenVocabulary, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths, padded = _padded(vocab)
    nxt = np.zeros((len(table), len(vocab)), dtype=np.int8)
    for start in range(len(table)):
        state = np.full(len(vocab), start, dtype=np.int8)
        for pos in range(padded.shape[1]):
            live = (pos < lengths) & (state >= 0)
            state[live] = table[state[live], padded[live, pos]]
        nxt[start] = state
    ok = ((nxt >= 0) & (lengths > 0)[None, :]).astype(np.uint8)
    return ok, np.maximum(nxt, 0)
