"""Token bytes: what text each token id spells, derived from a Hugging Face tokenizer.

Grammars constrain *text*, models emit *token ids*. The bridge is one byte string per id:
byte-level BPE tokens (GPT-2 alphabet, ``Ġhello``) are mapped back through the inverse byte
table, SentencePiece-style tokens (``▁hello``, byte-fallback ``<0x0A>``) through the
tokenizer's own decoder steps. Special and added tokens spell no grammar text (``None``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from hf_fvo.errors import TokenizerError, check_int

__all__ = [
    "BRACKETS",
    "TokenVocabulary",
    "gpt2_byte_decoder",
    "resolve_vocab_size",
    "vocabulary_of",
]

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table: printable stand-in character -> byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TokenVocabulary:
    """The byte string each token id spells, plus the end-of-sequence ids.

    Args:
        token_bytes: One entry per token id; ``None`` for ids that never spell grammar text
            (special tokens, added tokens, ids the decoder cannot express as bytes).
        eos_token_ids: Ids that end generation; they are ``None`` in ``token_bytes``.
        scheme: How token strings were mapped to bytes (``"byte_level"``, ``"decoder_steps"``,
            ``"utf8"``).

    Example:
        >>> from hf_fvo.grammar import TokenVocabulary
        >>> vocab = TokenVocabulary([b"a", b"b", None], eos_token_ids=[2])
        >>> vocab.decode([0, 1, 0])
        b'aba'
    """

    token_bytes: tuple[bytes | None, ...]
    eos_token_ids: tuple[int, ...]
    scheme: str
    fingerprint: str  # sha256 over scheme, EOS ids and every token's bytes

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_token_ids: Iterable[int],
        scheme: str = "explicit",
    ) -> None:
        token_bytes = tuple(token_bytes)
        eos = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        if not eos:
            raise TokenizerError("the vocabulary needs at least one end-of-sequence token id")
        for i in eos:
            if not 0 <= i < len(token_bytes):
                raise TokenizerError(
                    f"end-of-sequence id {i} is outside the vocabulary of {len(token_bytes)} ids"
                )
            if token_bytes[i] is not None:
                raise TokenizerError(f"end-of-sequence id {i} must not spell text")
        if not any(token_bytes):
            raise TokenizerError("no token of this tokenizer spells any text")
        digest = hashlib.sha256(scheme.encode())
        digest.update(repr(eos).encode())
        for b in token_bytes:
            digest.update(b"\xff\xfe" if b is None else len(b).to_bytes(4, "little") + b)
        object.__setattr__(self, "token_bytes", token_bytes)
        object.__setattr__(self, "eos_token_ids", eos)
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "fingerprint", digest.hexdigest())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TokenVocabulary is immutable")

    def __repr__(self) -> str:
        return (
            f"TokenVocabulary({len(self)} ids, eos={list(self.eos_token_ids)}, "
            f"scheme={self.scheme!r})"
        )

    def __len__(self) -> int:
        return len(self.token_bytes)

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenate the bytes of ``token_ids``; EOS ids spell nothing.

        Raises:
            TokenizerError: an id spells no text and is not an EOS id.
        """
        out = []
        for t in token_ids:
            t = int(t)
            if t in self.eos_token_ids:
                continue
            b = self.token_bytes[t] if 0 <= t < len(self.token_bytes) else None
            if b is None:
                raise TokenizerError(f"token id {t} spells no grammar text")
            out.append(b)
        return b"".join(out)

    def byte_map(self) -> dict[bytes, list[int]]:
        """``{token bytes: [ids]}``, the form outlines-core's ``Vocabulary`` takes."""
        table: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if b:
                table.setdefault(b, []).append(i)
        return table

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, eos_token_id: int | Sequence[int] | None = None
    ) -> TokenVocabulary:
        """Derive token bytes from a Hugging Face (fast) tokenizer; cached per tokenizer.

        Args:
            tokenizer: A ``transformers`` tokenizer backed by the ``tokenizers`` library.
            eos_token_id: Overrides ``tokenizer.eos_token_id``; may list several ids.

        Raises:
            TokenizerError: the tokenizer has no EOS id, no ``tokenizers`` backend, or a
                decoder whose tokens cannot be mapped to bytes (for example WordPiece).

        Example:
            >>> from hf_fvo.grammar import TokenVocabulary
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tokenizer = load_default_tokenizer()
            >>> vocab = TokenVocabulary.from_tokenizer(tokenizer)
            >>> vocab.decode(tokenizer.encode(' {"é": 1}'))
            b' {"\\xc3\\xa9": 1}'
        """
        if eos_token_id is None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
            if eos_token_id is None:
                raise TokenizerError(
                    "the tokenizer has no eos_token_id; pass eos_token_id= explicitly"
                )
        eos = (eos_token_id,) if isinstance(eos_token_id, int) else tuple(eos_token_id)
        key = (len(_safe_len(tokenizer)), eos)
        with _CACHE_LOCK:
            try:
                hit = _VOCAB_CACHE.get(tokenizer)
            except TypeError:  # not weak-referenceable: no caching
                hit = None
            if hit is not None and hit[0] == key:
                return hit[1]
        vocab = _build_from_tokenizer(tokenizer, eos)
        with _CACHE_LOCK, contextlib.suppress(TypeError):
            _VOCAB_CACHE[tokenizer] = (key, vocab)
        return vocab


def vocabulary_of(
    tokenizer: Any, eos_token_id: int | Sequence[int] | None = None
) -> TokenVocabulary:
    """The token bytes of ``tokenizer`` (:meth:`TokenVocabulary.from_tokenizer`), or
    ``tokenizer`` itself when it is a :class:`TokenVocabulary` already.

    Example:
        >>> from hf_fvo.grammar.vocabulary import BRACKETS, vocabulary_of
        >>> vocabulary_of(BRACKETS) is BRACKETS
        True
    """
    if isinstance(tokenizer, TokenVocabulary):
        return tokenizer
    if tokenizer is None or isinstance(tokenizer, (str, bytes)):
        raise TokenizerError(
            "pass a Hugging Face tokenizer (AutoTokenizer.from_pretrained(...)) or a "
            f"TokenVocabulary, not {type(tokenizer).__name__}"
        )
    return TokenVocabulary.from_tokenizer(tokenizer, eos_token_id)


def resolve_vocab_size(vocab: TokenVocabulary, vocab_size: int | None) -> int:
    """The mask length: ``vocab_size`` checked against the vocabulary (default: its length).

    Raises:
        TokenizerError: ``vocab_size`` would cut off ids that spell text, or an EOS id.

    Example:
        >>> from hf_fvo.grammar.vocabulary import BRACKETS, resolve_vocab_size
        >>> resolve_vocab_size(BRACKETS, None), resolve_vocab_size(BRACKETS, 8)
        (4, 8)
    """
    if vocab_size is None:
        return len(vocab)
    check_int("vocab_size", vocab_size, minimum=1)
    if vocab_size < len(vocab):
        cut = [i for i in range(vocab_size, len(vocab)) if vocab.token_bytes[i] is not None]
        if cut or any(e >= vocab_size for e in vocab.eos_token_ids):
            raise TokenizerError(
                f"vocab_size={vocab_size} is smaller than the tokenizer's {len(vocab)} ids "
                "and would cut off usable tokens; pass model.config.vocab_size"
            )
    return vocab_size


BRACKETS = TokenVocabulary([b"(", b")", None, None], eos_token_ids=[2])
"""The four-token world of the Markov oracles: ``(`` 0, ``)`` 1, EOS 2 and BOS 3 (Dyck
languages under :class:`~hf_fvo.models.MarkovLM`: benchmark suites, tests, learned-Φ labels)."""

_VOCAB_CACHE: weakref.WeakKeyDictionary[Any, tuple[Any, TokenVocabulary]] = (
    weakref.WeakKeyDictionary()
)
_CACHE_LOCK = threading.Lock()


def _safe_len(tokenizer: Any) -> range:
    try:
        return range(len(tokenizer))
    except TypeError as exc:
        raise TokenizerError(f"{type(tokenizer).__name__} is not a tokenizer (no len())") from exc


def _decoder_steps(tokenizer: Any) -> list[dict[str, Any]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerError(
            f"{type(tokenizer).__name__} has no `tokenizers` backend; load it with "
            "AutoTokenizer.from_pretrained(..., use_fast=True) or convert it to a fast tokenizer"
        )
    decoder = backend.decoder
    if decoder is None:
        return []
    spec = json.loads(decoder.__getstate__())
    if spec.get("type") == "Sequence":
        return list(spec.get("decoders", []))
    return [spec]


def _build_from_tokenizer(tokenizer: Any, eos: tuple[int, ...]) -> TokenVocabulary:
    steps = _decoder_steps(tokenizer)
    ids = _safe_len(tokenizer)
    strings = tokenizer.convert_ids_to_tokens(list(ids))
    kinds = {s.get("type") for s in steps}
    unsupported = kinds & {"WordPiece", "BPEDecoder", "CTC"}
    if unsupported:
        raise TokenizerError(
            f"tokenizer decoder {sorted(unsupported)} marks word boundaries in ways that have "
            "no byte form; only byte-level BPE and SentencePiece-style tokenizers are supported"
        )
    excluded = set(getattr(tokenizer, "all_special_ids", ())) | set(eos)
    excluded |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    if "ByteLevel" in kinds:
        scheme, to_bytes = "byte_level", _byte_level_mapper()
    elif steps:
        scheme, to_bytes = "decoder_steps", _steps_mapper(steps)
    else:
        scheme, to_bytes = "utf8", _utf8
    token_bytes: list[bytes | None] = []
    for i, s in zip(ids, strings, strict=True):
        token_bytes.append(None if i in excluded or s is None else to_bytes(s))
    for i in eos:
        if i >= len(token_bytes):
            raise TokenizerError(
                f"eos_token_id {i} is outside the tokenizer's {len(token_bytes)} ids"
            )
    return TokenVocabulary(token_bytes, eos, scheme)


def _utf8(s: str) -> bytes | None:
    return s.encode("utf-8") or None


def _byte_level_mapper():
    table = gpt2_byte_decoder()

    def to_bytes(s: str) -> bytes | None:
        try:
            return bytes(table[c] for c in s) or None
        except KeyError:  # a character outside the byte alphabet: not a byte-level token
            return None

    return to_bytes


def _steps_mapper(steps: list[dict[str, Any]]):
    replacements: list[tuple[str, str]] = []
    byte_fallback = False
    for step in steps:
        kind = step.get("type")
        if kind == "Replace":
            pattern = step.get("pattern", {})
            if "String" not in pattern:
                raise TokenizerError("a regex Replace step in the tokenizer decoder is unsupported")
            replacements.append((pattern["String"], step.get("content", "")))
        elif kind == "Metaspace":
            replacements.append((step.get("replacement", "▁"), " "))
        elif kind == "ByteFallback":
            byte_fallback = True
        elif kind not in {"Fuse", "Strip"}:
            # Strip removes characters at the very start of a decoded sequence only; it does not
            # change what a token spells in the middle of generated text.
            raise TokenizerError(f"unsupported tokenizer decoder step {kind!r}")

    def to_bytes(s: str) -> bytes | None:
        if byte_fallback and (m := _BYTE_TOKEN.match(s)):
            return bytes([int(m.group(1), 16)])
        for old, new in replacements:
            s = s.replace(old, new)
        return s.encode("utf-8") or None

    return to_bytes
