"""What every member of a JSON schema spells, and the fewest tokens that can spell it: a lower
bound on a member's tokens that holds where no regular superset of the schema compiles.

A schema with many required properties in the schema's key order (a configuration file, an API
object) has members of hundreds of tokens, and a regular superset of it too many states for the
automaton backend. Its members still share text: every one writes ``{"name":`` for each required
name, in order, with the listed names spelled canonically (:mod:`.lark`, :mod:`.regex` and
llguidance's JSON mode all do). :func:`literal_blocks` lists such blocks — byte strings that occur
in every member's compact text, in this order, with anything (maybe nothing) between two blocks —
and :func:`fewest_tokens` the fewest tokens of any text that contains them so: a token that
covers a block's bytes either matches them exactly, or starts or ends in the free text beside
the block, and each case is bounded by what the vocabulary holds. It is a lower bound on every
member's tokens, never a claim that a member that short exists.

Only what holds for every member is read: required names of ``type: object`` nodes declared in
``properties``, brackets of arrays with ``minItems``, quotes of strings; a node with ``enum``,
``const``, combinators or a ``$ref`` beside other keywords counts as free text. Pure: no engine
import.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from hf_fvo.grammar.schema.facts import definitions_of, ref_target

__all__ = ["fewest_tokens", "literal_blocks"]

_MAX_BYTES = 1 << 16  # blocks read at most (a prefix of the blocks bounds as soundly)
# keywords that make a node free text here (several spellings, or an order merged from parts)
_FREE = ("enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "$ref", "dependentSchemas")
_GAP = None


def literal_blocks(schema: Any, compact: bool = True) -> list[bytes]:
    """Byte strings that every member of a prepared schema's language writes, in this order, with
    free text (maybe empty) between consecutive blocks; ``compact=False`` where whitespace may
    separate JSON's tokens.

    Example:
        >>> from hf_fvo.grammar.schema.literals import literal_blocks
        >>> literal_blocks({"type": "object", "properties": {"a": {"type": "string"},
        ...                 "b": {"type": "integer"}}, "required": ["a", "b"]})
        [b'{', b'"a":"', b'"', b'"b":', b'}']
        >>> literal_blocks({"type": "array", "items": {"type": "object"}, "minItems": 2})
        [b'[{', b'},{', b'}', b']']
    """
    reader = _Reader(schema, compact)
    reader.node(schema, 0)
    blocks: list[bytes] = []
    run: list[bytes] = []
    for item in [*reader.items, _GAP]:
        if item is _GAP:
            if run:
                blocks.append(b"".join(run))
            run = []
        else:
            run.append(item)
    return blocks


def fewest_tokens(blocks: Sequence[bytes], token_bytes: Iterable[bytes | None]) -> int:
    """The fewest tokens of any text that holds ``blocks`` in order (free text between them),
    at least: a lower bound on the tokens of every member that :func:`literal_blocks` reads.

    A token that covers block bytes from a position inside a block starts there, so it is those
    bytes exactly, or has the rest of the block as a prefix and then covers at most its
    remaining length of later blocks; one that covers a block's first byte may start in the free
    text before it (a suffix of the token, or the whole block inside the token). Relaxing where
    the token ends only lowers the count.

    Example:
        >>> from hf_fvo.grammar.schema.literals import fewest_tokens
        >>> vocab = [b"a", b"b", b"c", b"ab", b"xabc"]
        >>> fewest_tokens([b"abc"], vocab), fewest_tokens([b"abab"], vocab)
        (1, 2)
        >>> fewest_tokens([b"ccc", b"cc"], vocab)
        5
    """
    table = _Table.of(tuple(token_bytes))
    chain = b"".join(blocks)[:_MAX_BYTES]
    size = len(chain)
    ends: list[int] = []
    for block in blocks:
        ends.extend([min((ends[-1] if ends else 0) + len(block), size)] * len(block))
    ends = ends[:size]
    inf = size + 1
    best = [0] + [inf] * size
    for a in range(size):
        here = best[a] + 1
        if here > inf:
            continue
        end = ends[a]
        start = a == 0 or ends[a - 1] != end  # the block's first byte
        exact = table.suffixes if start else table.tokens
        for b in range(a + 1, min(end, a + table.longest + 1)):  # ends inside the block
            if chain[a:b] in exact and here < best[b]:
                best[b] = here
        reach = table.containing(chain[a:end]) if start else table.prefixed.get(chain[a:end], 0)
        for b in range(end, min(a + reach, size) + 1):  # covers the block's end, maybe more
            if reach and here < best[b]:
                best[b] = here
    return best[size] if best[size] <= size else 0


class _Reader:
    """Walks a prepared schema and writes its literal items (bytes, or a gap)."""

    def __init__(self, root: Any, compact: bool) -> None:
        self.defs = definitions_of(root)
        self.ws = () if compact else (_GAP,)
        self.items: list[bytes | None] = []
        self.size = 0

    def put(self, *items: bytes | None) -> None:
        for item in items:
            self.items.append(item)
            self.size += 0 if item is None else len(item)

    def node(self, s: Any, depth: int) -> None:
        if self.size > _MAX_BYTES or depth > 64 or not isinstance(s, dict):
            return self.put(_GAP)
        if set(s) == {"$ref"} and isinstance(s["$ref"], str):
            return self.node(ref_target(s, self.defs), depth + 1)
        kind = s.get("type")
        if any(k in s for k in _FREE) or not isinstance(kind, str):
            return self.put(_GAP)
        if kind == "string":
            return self.put(b'"', _GAP, b'"')
        if kind == "object":
            return self.object(s, depth)
        if kind == "array":
            return self.array(s, depth)
        return self.put(_GAP)  # numbers, true/false, null: short, and spelled several ways

    def object(self, s: dict, depth: int) -> None:
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        required = set(s.get("required") or ()) if isinstance(s.get("required"), list) else set()
        self.put(b"{")
        for name, sub in props.items():
            if name not in required:
                continue
            self.put(_GAP, *_key(name), *self.ws, b":", *self.ws)
            self.node(sub, depth + 1)
        self.put(_GAP, b"}")

    def array(self, s: dict, depth: int) -> None:
        need = s.get("minItems", 0)
        need = need if isinstance(need, int) and not isinstance(need, bool) else 0
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        items = s.get("items", True)
        if isinstance(items, list):  # draft 4–2019 tuple form
            prefix, items = items, s.get("additionalItems", True)
        self.put(b"[", *self.ws)
        for k in range(need):
            if k:
                self.put(*self.ws, b",", *self.ws)
            self.node(prefix[k] if k < len(prefix) else items, depth + 1)
            if self.size > _MAX_BYTES:
                break
        self.put(_GAP, b"]")


def _key(name: str) -> list[bytes | None]:
    """A listed name's canonical spelling as blocks: a control character or U+007F, which has
    two spellings, as a gap."""
    items: list[bytes | None] = [b'"']
    for c in name:
        if ord(c) < 0x20 or c == "\x7f":
            items.append(_GAP)
        else:
            items.append(json.dumps(c, ensure_ascii=False)[1:-1].encode())
    items.append(b'"')
    return items


class _Table:
    """One vocabulary's token strings as sets: whole, their suffixes, their prefixes with the
    longest token that starts so; built once per vocabulary."""

    def __init__(self, tokens: tuple[bytes | None, ...]) -> None:
        spelled = sorted({t for t in tokens if t}, key=len, reverse=True)
        self.by_length = spelled
        self.longest = len(spelled[0]) if spelled else 0
        self.tokens = set(spelled)
        self.suffixes = {t[i:] for t in spelled for i in range(len(t))}
        self.prefixed: dict[bytes, int] = {}
        for t in reversed(spelled):  # shortest first, so the longest wins
            for i in range(1, len(t) + 1):
                self.prefixed[t[:i]] = len(t)
        self._joined = b"\x00".join(spelled)  # a first test, in C, before the scan
        self._containing: dict[bytes, int] = {}

    @staticmethod
    @functools.lru_cache(maxsize=2)
    def of(tokens: tuple[bytes | None, ...]) -> _Table:
        return _Table(tokens)

    def containing(self, block: bytes) -> int:
        """The length of the longest token that holds ``block`` (0: none does)."""
        if block not in self._containing:
            held = len(block) <= self.longest and block in self._joined
            self._containing[block] = next(
                (len(t) for t in self.by_length if held and block in t), 0
            )
        return self._containing[block]
