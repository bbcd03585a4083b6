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

__all__ = ["json_text_tables", "utf8_tables"]


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


def _tables(vocab: TokenVocabulary, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(vocab)
    lengths = np.array([len(b) if b else 0 for b in vocab.token_bytes], dtype=np.int64)
    width = int(lengths.max())
    padded = np.zeros((n, width), dtype=np.uint8)
    for i, b in enumerate(vocab.token_bytes):
        if b:
            padded[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    nxt = np.zeros((len(table), n), dtype=np.int8)
    for start in range(len(table)):
        state = np.full(n, start, dtype=np.int8)
        for pos in range(width):
            live = (pos < lengths) & (state >= 0)
            state[live] = table[state[live], padded[live, pos]]
        nxt[start] = state
    ok = ((nxt >= 0) & (lengths > 0)[None, :]).astype(np.uint8)
    return ok, np.maximum(nxt, 0)
