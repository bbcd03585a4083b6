"""UTF-8 validity over token bytes: which tokens keep the text valid UTF-8 from each of the
eight states of a UTF-8 decoder (0: at a character boundary; the others await continuation
bytes). llguidance admits some overlong byte sequences (``E0 90``), so the pushdown backend
intersects its masks with these tables.
"""

from __future__ import annotations

import numpy as np

from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = ["utf8_tables"]


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
