"""Shortest completions on the pushdown backend: how many tokens a parser state needs to accept.

llguidance answers "is this prefix viable?" and "is it accepting?", never "how far is
acceptance?" (nor does any other engine). A :class:`Completer` finds a *witness*: a token
sequence that takes a parser state to acceptance, verified by the parser itself, so its length
U(s) is a sound upper bound on d(s), the fewest tokens to acceptance:

1. a byte-level search from the state over the single-byte tokens every byte-level vocabulary
   has: breadth first (shortest in bytes) for a few dozen parser states, then depth first
   with closing brackets and quotes tried first, to 4096 bytes and then to 256
   (a first descent that closes what is open is linear in the completion's length); the
   search runs on a second parser of the same grammar over a 257-token vocabulary (the 256
   bytes and EOS, :data:`BYTE_EOS`), whose masks cost a few words instead of the model's
   vocabulary,
2. the fewest tokens that spell those bytes (a dynamic programme over the vocabulary);
3. the sequence walked through the parser (with EOS at the end) and the UTF-8 filter.

U(s) can exceed d(s) where the byte-shortest completion is not the token-shortest one (two
keys of different lengths, one a single token) or where a search class stands for several
bytes; docs/grammar.md reports how often on the development set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from hf_fvo.grammar.vocabulary import TokenVocabulary

__all__ = ["BYTE_EOS", "MAX_DEPTH", "Completer", "Work", "advanced", "spend"]

_CLOSERS = b"\"]})>'`"
_STRUCTURAL = set("\"\\{}[]()<>,:;-+.=/ '`")
_BFS_NODES = 24  # parser states the breadth-first pass may expand
_DFS_NODES = 8_000  # and each depth-first pass
MAX_DEPTH = 4096  # bytes
BYTE_EOS = 256  # EOS in the byte vocabulary the searches parse over (ids 0–255: the bytes)
_FEW = 6  # allowed bytes up to which a search walks them rather than its classes
_PICKED = 4096  # sets of allowed bytes whose search order a completer keeps
_BYTES = [bytes([b]) for b in range(256)]
_LONE_CUTS = b"-+ \t\n\r"  # bytes a depth-first completion may write where none is needed
_COMMA, _QUOTE, _BACKSLASH = b',"\\'  # (as ints)
_CUT_BYTES = 8192  # longest depth-first completion shortened
_CUT_TRIES = 512  # parses one shortening may spend
_IDLE = 32  # bytes leaving the allowed bytes unchanged after which a descent tries new classes
_SPELLED = 4  # bytes of a found text spelled in the fewest tokens per operation of the work


class Work:
    """A budget of parser operations that searches and certificates draw on: one advance of a
    parser (a copy that consumes a token or byte), one mask of the byte parser, one parse of a
    sequence (``validate_tokens``). Once spent, everything that shares it gives up (a search
    returns ``None``, a certificate is not tried), so the work behind one admissible set is
    bounded and the same on every run. A part (:meth:`part`) has a limit of its own and also
    spends its parent's: a phase of a check may take at most so much of the check's work.

    Example:
        >>> from hf_fvo.grammar.pushdown.completion import Work
        >>> work = Work(5)
        >>> part = work.part(2)
        >>> part.spend(), part.spend(), part.spend(), work.left
        (True, True, False, 3)
        >>> work.spend(3), work.spend(), work.spent
        (True, False, 5)
    """

    __slots__ = ("_parent", "left", "spent")

    def __init__(self, left: int, parent: Work | None = None) -> None:
        self.left, self.spent, self._parent = int(left), 0, parent

    def spend(self, n: int = 1) -> bool:
        """Take ``n`` operations; ``False`` (taking none) where fewer than ``n`` are left here
        or in the parent."""
        if self.left < n or (self._parent is not None and not self._parent.spend(n)):
            self.left = 0
            return False
        self.left -= n
        self.spent += n
        return True

    def part(self, most: int) -> Work:
        """A share of at most ``most`` operations, spent from this budget as it is used."""
        return Work(min(most, self.left), self)

    @property
    def done(self) -> bool:
        """Whether nothing is left (here or in the parent)."""
        return self.left <= 0 or (self._parent is not None and self._parent.done)


def spend(work: Work | None, n: int = 1) -> bool:
    """Whether ``n`` more operations may be spent from ``work`` (and spend them; ``None``:
    no bound).

    Example:
        >>> from hf_fvo.grammar.pushdown.completion import Work, spend
        >>> spend(None), spend(Work(1)), spend(Work(1), 2)
        (True, True, False)
    """
    return work is None or work.spend(n)


def _byte_class(b: int) -> str:
    if b < 128:
        c = chr(b)
        if c.isdigit():
            return "digit"
        if "a" <= c <= "z":
            return "lower"
        if "A" <= c <= "Z":
            return "upper"
        if c in _STRUCTURAL:
            return c  # brackets, quotes, separators, signs: each stands for itself
        return "punctuation" if c.isprintable() else "control"
    if b < 0xC0:
        return "continuation"
    return "lead2" if b < 0xE0 else "lead3" if b < 0xF0 else "lead4"


_SPACES = b" \t\n\r"  # JSON's whitespace: optional wherever a grammar spaces tokens out


def _search_rank(b: int) -> int:
    if b in _CLOSERS:
        return _CLOSERS.find(b)
    return 512 + b if b in _SPACES else 256 + b


# bytes in the order the searches try them: closers first, then ascending, whitespace last (a
# completion rarely needs it, and a layout such as "pretty" admits a run of it at every place)
_ORDER = sorted(range(256), key=_search_rank)
_CLASS = [_byte_class(b) for b in range(256)]


class Completer:
    """Witness completions for one tokenizer's pushdown grammars.

    Args:
        vocab: The token bytes.
        utf8_next: The UTF-8 automaton over token ids (``utf8_next[u, t]``; state 0 is "between
            characters", the only accepting one).
        ok_words: Per UTF-8 state, the packed mask of tokens it allows.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"},
        ...                               "minItems": 2}, tok, whitespace="")
        >>> tok.decode(g.completion(g.initial_state))
        '[0,0]'
    """

    def __init__(self, vocab: TokenVocabulary, utf8_next: np.ndarray, ok_words: np.ndarray):
        self._eos = vocab.eos_token_ids[0]
        self._utf8_next = utf8_next
        self._ok_words = ok_words
        self._byte_id = np.full(256, -1, dtype=np.int64)
        spelled: dict[bytes, int] = {}
        self.spellings: dict[bytes, list[int]] = {}  # every id that spells the bytes
        for i, b in enumerate(vocab.token_bytes):
            if not b:
                continue
            self.spellings.setdefault(b, []).append(i)
            if b not in spelled:
                spelled[b] = i
                if len(b) == 1:
                    self._byte_id[b[0]] = i
        self._spelled = spelled
        # by a token's first two bytes, the lengths (above 1) of the tokens that start so
        sizes: dict[bytes, set[int]] = {}
        for b in spelled:
            if len(b) > 1:
                sizes.setdefault(b[:2], set()).add(len(b))
        self._lengths = {head: tuple(sorted(found)) for head, found in sizes.items()}
        self._token_bytes = vocab.token_bytes
        self.longest = max((len(b) for b in spelled), default=1)
        # the searches' byte tables: per UTF-8 state the bytes it allows (an int, bit b) and the
        # state after each; per search class its bytes; each byte's place in the search order
        ok_bits = [0] * len(utf8_next)
        self._byte_next = [[0] * 256 for _ in range(len(utf8_next))]
        for b in range(256):
            t = int(self._byte_id[b])
            if t < 0:
                continue  # a byte no token spells alone: the searches never write it
            for u in range(len(utf8_next)):
                if self._utf8_ok(u, t):
                    ok_bits[u] |= 1 << b
                    self._byte_next[u][b] = int(utf8_next[u, t])
        self._byte_ok = ok_bits
        classes: dict[str, int] = {}
        for b in range(256):
            classes[_CLASS[b]] = classes.get(_CLASS[b], 0) | 1 << b
        self._classes = list(classes.values())
        self._class_of = _CLASS
        self._rank = [0] * 256
        for i, b in enumerate(_ORDER):
            self._rank[b] = i
        self._picked: dict[int, tuple[int, ...]] = {}  # _allowed_bytes's, by set and `every`
        # of those, the bytes that leave UTF-8 whole and may end a member, by (bytes, UTF-8
        # state, the grammar's ends)
        self._finals: dict[tuple[tuple[int, ...], int, int | None], tuple[int, ...]] = {}
        self.fill = self._fills()
        # per UTF-8 state, per token: the state after it, −1 where it breaks UTF-8 (lists:
        # utf8_after walks completions token by token)
        allowed = np.unpackbits(ok_words.view(np.uint8), axis=1, count=len(vocab),
                                bitorder="little")  # fmt: skip
        self._after = np.where(allowed == 1, utf8_next, -1).tolist()

    def _fills(self) -> dict[int, tuple[int, ...]]:
        """Per UTF-8 state, the fewest single-byte tokens that finish the character."""
        fill: dict[int, tuple[int, ...]] = {0: ()}
        frontier = [0]
        while frontier:  # backwards: which states reach a known one with one more byte
            grown = []
            for u in range(len(self._utf8_next)):
                if u in fill:
                    continue
                for b in range(0x80, 0xC0):
                    t = int(self._byte_id[b])
                    if t >= 0 and self._utf8_ok(u, t):
                        nxt = int(self._utf8_next[u, t])
                        if nxt in fill:
                            fill[u] = (t, *fill[nxt])
                            grown.append(u)
                            break
            frontier = grown
        return fill

    # -- the witness --------------------------------------------------------------------------

    def complete(
        self,
        matcher: Any,
        searcher: Any,
        utf8: int,
        nodes: int = _DFS_NODES,
        first: int | None = None,
        passes: str = "both",
        work: Work | None = None,
        texts: Sequence[bytes] = (),
        breadth: int = _BFS_NODES,
        ends: int | None = None,
    ) -> tuple[int, ...] | None:
        """A verified token sequence (EOS excluded) that takes the parser state to acceptance,
        or ``None`` when the searches' limits (``nodes`` parser states per depth-first pass)
        are reached first. ``searcher`` is a parser of the same grammar over the byte
        vocabulary at the same text (neither is changed). With ``first``, the completion is
        that of the state after token ``first`` (the result excludes it). ``passes``:
        ``"both"`` (breadth first, then depth first if that found nothing), ``"breadth"`` or
        ``"depth"`` alone (a completion, not the byte-shortest), or ``"none"``: only the empty
        completion, where the parser state accepts (no search). ``work``: the operations every
        pass and parse here draws on (``None``: only ``nodes`` bounds them). ``texts``: what the
        depth-first passes try to write where a byte changed nothing (:meth:`_dfs`).
        ``ends``: the bytes a member can end with (bit b: byte b; ``None``: any), where the
        grammar knows (a JSON schema's root object ends with ``}``, then perhaps whitespace:
        :func:`~hf_fvo.grammar.schema.literals.ending_bytes`): the breadth-first passes ask
        only whether those bytes end a completion."""
        head: tuple[int, ...] = ()
        after = utf8
        if first is not None:
            spelled = self._token_bytes[first]
            after = self.utf8_after(utf8, (first,))
            if not spelled or after < 0:
                return None
            searcher = searcher.deep_copy()
            if not searcher.consume_tokens(list(spelled)):
                return None
            head = (first,)
        if after == 0 and searcher.is_accepting():
            # asked of the parser itself: it may accept where validating a lone EOS says no
            return () if (advanced(matcher, first) if head else matcher).is_accepting() else None
        if passes == "none":
            return None
        text = None
        if passes != "depth":
            text = self._bytes_bfs(searcher, after, work=work, nodes=breadth, ends=ends)
        if text is None and passes != "breadth":
            text = self._bytes_dfs(searcher, after, nodes, work=work, texts=texts)
        if text is None and passes != "breadth":
            # one byte per class missed it: the grammar tells bytes of a class apart (after
            # "[ab]*" only "c" ends "[ab]*c"); search again writing every allowed byte
            text = self._bytes_bfs(searcher, after, every=True, work=work, ends=ends)
            if text is None:
                text = self._bytes_dfs(searcher, after, nodes, every=True, work=work,
                                       texts=texts)  # fmt: skip
        if text is None or not spend(work, len(text) // _SPELLED):  # (its spelling: ~1 µs a
            return None  # byte, a Python pass over the text)
        tokens = self.fewest_tokens(text)
        if (tokens is not None and spend(work)
                and self.accepts(matcher, utf8, (*head, *tokens))):  # fmt: skip
            return tokens
        singles = self.single_bytes(text)
        if singles is None or not spend(work):
            return None
        return singles if self.accepts(matcher, utf8, (*head, *singles)) else None

    def accepts(self, matcher: Any, utf8: int, tokens: tuple[int, ...]) -> bool:
        """Whether ``tokens`` take the parser state to acceptance (UTF-8 complete)."""
        return self.utf8_after(utf8, tokens) == 0 and self.parses(matcher, tokens)

    def parses(self, matcher: Any, tokens: Sequence[int]) -> bool:
        """Whether the parser accepts ``tokens`` then EOS (UTF-8 not checked)."""
        seq = [*tokens, self._eos]
        return matcher.validate_tokens(seq) == len(seq)

    def utf8_after(self, utf8: int, tokens: Sequence[int]) -> int:
        """The UTF-8 state after ``tokens`` (−1 where one breaks UTF-8)."""
        after = self._after
        for t in tokens:
            utf8 = after[utf8][t]
            if utf8 < 0:
                return -1
        return utf8

    def fewest_tokens(self, text: bytes) -> tuple[int, ...] | None:
        """The fewest vocabulary tokens that spell ``text`` (``None`` if none do); among
        equally few, the one whose last token starts earliest, recursively."""
        n = len(text)
        best = [0] + [n + 1] * n
        back: list[tuple[int, int] | None] = [None] * (n + 1)
        spelled, lengths = self._spelled, self._lengths
        for k in range(n):  # forward: best[k] is final once every start before k is done
            step = best[k] + 1
            if step > n:
                continue
            for size in (1, *lengths.get(text[k : k + 2], ())):
                j = k + size
                if j > n:
                    break
                t = spelled.get(text[k:j])
                if t is not None and step < best[j]:
                    best[j], back[j] = step, (k, t)
        if n and back[n] is None:
            return None
        out: list[int] = []
        j = n
        while j:
            k, t = back[j]  # type: ignore[misc]
            out.append(t)
            j = k
        return tuple(reversed(out))

    def single_bytes(self, text: bytes) -> tuple[int, ...] | None:
        """``text`` one single-byte token a byte (``None`` if a byte has no token of its own)."""
        out = tuple(int(self._byte_id[b]) for b in text)
        return None if any(t < 0 for t in out) else out

    def suffix_spellings(self, text: bytes) -> list[tuple[int, ...] | None]:
        """For every j, a spelling of ``text[j:]`` in the fewest tokens (``None`` where none
        spells it), all from one backward pass: the rests :meth:`fewest_tokens` would give
        one by one (ties may fall otherwise)."""
        n = len(text)
        best = [n + 1] * n + [0]
        step: list[tuple[int, int] | None] = [None] * (n + 1)
        spelled, lengths = self._spelled, self._lengths
        for j in range(n - 1, -1, -1):
            for size in (1, *lengths.get(text[j : j + 2], ())):
                k = j + size
                if k > n:
                    break
                t = spelled.get(text[j:k])
                if t is not None and best[k] + 1 < best[j]:
                    best[j], step[j] = best[k] + 1, (k, t)
        out: list[tuple[int, ...] | None] = [()] * (n + 1)
        for j in range(n - 1, -1, -1):
            taken = step[j]
            rest = None if taken is None else out[taken[0]]
            out[j] = None if rest is None else (taken[1], *rest)  # type: ignore[index]
        return out

    # -- searches over bytes (on the byte-vocabulary parser) ---------------------------------

    def _bits(self, searcher: Any, utf8: int) -> int:
        """The bytes the byte parser (and UTF-8) allow next, as an int (bit b: byte b)."""
        return int.from_bytes(searcher.compute_bitmask(), "little") & self._byte_ok[utf8]

    def _allowed_bytes(
        self, searcher: Any, utf8: int, every: bool = False, bits: int | None = None
    ) -> tuple[int, ...]:
        """One allowed byte per search class (its lowest), in search order (closers first);
        with ``every``, all of them (kept per set of allowed bytes: the searches meet the same
        few sets again and again). ``bits``: :meth:`_bits`, where known."""
        if bits is None:
            bits = self._bits(searcher, utf8)
        key = bits << 1 | every
        known = self._picked.get(key)
        if known is None:
            if len(self._picked) >= _PICKED:
                self._picked.clear()
            known = self._picked[key] = self._pick(bits, every)
        return known

    def _pick(self, bits: int, every: bool) -> tuple[int, ...]:
        if every:
            every_byte = (b for b in range(256) if bits >> b & 1)
            return tuple(sorted(every_byte, key=self._rank.__getitem__))
        out = []
        if bits.bit_count() <= _FEW:  # a few bytes (an enum's or a key's first letters):
            # every one of them, so the breadth-first pass meets the shortest alternative
            while bits:
                low = bits & -bits
                bits ^= low
                out.append(low.bit_length() - 1)
        else:
            for members in self._classes:
                hit = bits & members
                if hit:
                    out.append((hit & -hit).bit_length() - 1)
        out.sort(key=self._rank.__getitem__)
        return tuple(out)

    def _bytes_bfs(
        self,
        searcher: Any,
        utf8: int,
        every: bool = False,
        work: Work | None = None,
        nodes: int = _BFS_NODES,
        ends: int | None = None,
    ) -> bytes | None:
        # one copy of the parser, brought to each node expanded by rolling back to the text
        # it shares with the last one and consuming the rest (a sibling's: one byte each way;
        # a copy per node costs three to seven times that); whether a child accepts is asked
        # of its parent: the byte, then EOS. The queue holds each expanded node's children as
        # one group (its text, UTF-8 state, bytes, the next one's place), taken one by one:
        # most children are never expanded
        queue: deque[list[Any]] = deque()
        m, at = searcher.deep_copy(), b""  # (the caller's parser stays as it is)
        u, text = utf8, b""  # the node to expand: first the start
        left = nodes  # expansions
        finals = self._finals
        while left:
            if text is None:
                if not queue:
                    return None
                group = queue[0]
                parent, pu, kids, i = group
                if i + 1 == len(kids):
                    queue.popleft()
                else:
                    group[3] = i + 1
                b = kids[i]
                u, text = self._byte_next[pu][b], parent + _BYTES[b]
                if not _moved(m, at, text):  # the mask allowed a byte the parse refuses
                    # (`,` after `-0` where the number must be positive): a dead end, whose
                    # expansion finds nothing
                    m, at, text = _at(searcher, parent), parent, None
                    left -= 1
                    if not spend(work, 2):
                        return None
                    continue
                at = text
            if not queue:
                # a lone node whose next bytes the grammar forces: the search would expand
                # them one child each, none accepting before the last; walk them at once
                forced = m.compute_ff_bytes()
                if len(forced) > 1:
                    walk = forced[:-1]
                    if len(walk) >= left or not spend(work, len(walk)):
                        return None  # (the expansions would end inside them)
                    for f in walk:
                        if not self._byte_ok[u] >> f & 1:
                            return None  # (UTF-8 forbids it: the search would find no child)
                        u = self._byte_next[u][f]
                    m.consume_tokens(list(walk))
                    text += walk
                    at = text
                    left -= len(walk)
            left -= 1
            if not spend(work, 2):  # (the advance that made it, its mask)
                return None
            kids = self._allowed_bytes(m, u, every)
            key = (kids, u, ends)
            ending = finals.get(key)
            if ending is None:  # the children that may end a member (a byte no member ends
                # with cannot end this one: not asked), in order
                if len(finals) >= _PICKED:
                    finals.clear()
                ending = finals[key] = tuple(
                    b for b in kids if self._byte_next[u][b] == 0
                    and (ends is None or ends >> b & 1)
                )  # fmt: skip
            for b in ending:
                if not spend(work):
                    return None
                if m.validate_tokens([b, BYTE_EOS]) == 2:
                    return text + _BYTES[b]
            if kids:
                queue.append([text, u, kids, 0])
            text = None
        return None

    def _bytes_dfs(
        self,
        searcher: Any,
        utf8: int,
        nodes: int,
        every: bool = False,
        work: Work | None = None,
        texts: Sequence[bytes] = (),
    ) -> bytes | None:
        # first a long descent (closing what is open, writing what is required: linear in the
        # completion's length), then a shallow search with backtracking for the rest
        for limit in (MAX_DEPTH, 256):
            found = self._dfs(searcher, utf8, limit, [nodes], every, work, texts)
            if found is not None:
                return _shortened(searcher, *found, work=work)
        return None

    def _dfs(
        self,
        searcher: Any,
        utf8: int,
        limit: int,
        budget: list[int],
        every: bool = False,
        work: Work | None = None,
        texts: Sequence[bytes] = (),
    ) -> tuple[bytes, tuple[int, ...]] | None:
        """A completion's bytes, and the places of its idle bytes: those of each run of at
        least ``_IDLE`` bytes that each left the allowed bytes as they were (content of a
        string or pattern, or brackets), and the byte before each of ``texts`` written.

        Once the allowed bytes have stayed the same for ``_IDLE`` bytes, the classes written
        in that run are tried last: inside an unanchored pattern such as ``[0-9]+`` the
        closers (tried first elsewhere) are content, and writing them again never leads
        anywhere; the next class that changes what is allowed (a digit) is found in a few
        bytes, and :func:`_shortened` then drops the run.

        Where a byte first leaves the allowed bytes as they were, each of ``texts`` (the
        grammar's: its patterns' shortest matches) that the parser takes is written next, tried
        before anything else: inside ``\\d{4}-\\d{2}-\\d{2}`` unanchored, no byte changes what
        is allowed until a whole match is written, which one byte at a time a search never
        finds (the byte before the text counts as idle: the shortening drops it)."""
        # iterative, on one copy of the parser that consumes each byte as the descent writes
        # it and rolls back to the node it returns to (a copy per node costs three to seven
        # times a byte and its rollback, more the longer the text): per node (utf8, text,
        # untried bytes — None: not expanded yet —, allowed bits, the run's classes, where
        # the run starts (−1: none; a run's places are contiguous), earlier idle spans, and
        # the bytes it wrote after its parent's text, which the parser consumes when it is
        # first popped)
        m = searcher.deep_copy()
        at = b""  # what the copy has consumed past ``searcher``'s text: the current path
        stack: list[Any] = [(utf8, b"", None, -1, frozenset(), -1, (), b"")]
        while stack:
            u, text, todo, parent_bits, run, start, idle, piece = stack.pop()
            if todo is None:  # a node first reached: its parent's text, then its bytes
                if not _moved(m, at, text):  # the mask allowed bytes the parse refuses (`,`
                    # after `-0` where the number must be positive): a dead end
                    parent = text[: len(text) - len(piece)]
                    m, at = _at(searcher, parent), parent
                    if len(text) >= limit:
                        continue
                    budget[0] -= 1
                    if budget[0] <= 0 or not spend(work, 2):
                        return None
                    continue
                at = text
                if u == 0 and m.is_accepting():
                    if start >= 0 and len(text) - 1 - start >= _IDLE:  # (the byte just
                        # written is not judged yet)
                        idle = (*idle, (start, len(text) - 1))
                    return text, tuple(k for a, b in idle for k in range(a, b))
                if len(text) >= limit:
                    continue
                budget[0] -= 1
                if budget[0] <= 0 or not spend(work, 2):  # (the advance, the mask)
                    return None
                bits = self._bits(m, u)
                todo = self._allowed_bytes(m, u, every, bits)
                if bits != parent_bits:
                    if start >= 0 and len(text) - 1 - start >= _IDLE:
                        idle = (*idle, (start, len(text) - 1))
                    run, start = frozenset(), -1
                else:  # the byte just written changed nothing allowed
                    run = run | {self._class_of[text[-1]]}
                    start = len(text) - 1 if start < 0 else start
                    if len(text) - start >= _IDLE and len(todo) > 1:  # (closing brackets
                        # do not leave the same bytes allowed this often; content loops do)
                        todo = tuple(sorted(todo, key=lambda b: self._class_of[b] in run))
                    if start == len(text) - 1 and u == 0 and texts:
                        children = []
                        for text_piece in texts:
                            if not spend(work):
                                return None
                            if m.validate_tokens(list(text_piece)) == len(text_piece):
                                m.consume_tokens(list(text_piece))
                                changed = self._bits(m, u) != bits
                                m.rollback(len(text_piece))
                                if not spend(work):
                                    return None
                                if not changed:
                                    continue  # (it changed nothing allowed: inside an
                                    # unanchored pattern another pattern's match, written
                                    # again and again, never completes this one)
                                children.append((u, text + text_piece, None, -1, frozenset(),
                                                 -1, (*idle, (start, start + 1)),
                                                 text_piece))  # fmt: skip
                        if children:  # (tried before the node's own bytes, the first first)
                            stack.append((u, text, todo, bits, run, start, idle, b""))
                            stack.extend(reversed(children))
                            continue
                parent_bits = bits
            if not todo:
                continue
            b, rest = todo[0], todo[1:]
            if len(text) + 1 >= limit and not spend(work):  # (a child at the limit is
                return None  # only asked whether it accepts: its advance counts here)
            stack.append((u, text, rest, parent_bits, run, start, idle, b""))
            stack.append((self._byte_next[u][b], text + _BYTES[b], None, parent_bits, run,
                          start, idle, _BYTES[b]))  # fmt: skip
        return None

    def _utf8_ok(self, utf8: int, t: int) -> bool:
        return bool((int(self._ok_words[utf8, t >> 5]) >> (t & 31)) & 1)


def _moved(m: Any, at: bytes, text: bytes) -> bool:
    """Bring the parser ``m``, which has consumed ``at`` past the search's start, to ``text``
    (the same start): roll back to what they share, then consume the rest; ``False`` where
    the parser refuses a byte (``m`` is then unusable)."""
    shared = _shared(at, text)
    back = len(at) - shared
    return (not back or m.rollback(back)) and m.consume_tokens(list(text[shared:]))


def _at(searcher: Any, text: bytes) -> Any:
    """A copy of ``searcher`` that has consumed ``text`` (a prefix it accepted before)."""
    m = searcher.deep_copy()
    m.consume_tokens(list(text))
    return m


def _shared(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # (a[:lo] == b[:lo], a[:hi] != b[:hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _cuts(text: bytes) -> list[tuple[int, int]]:
    """Spans of ``text`` whose removal may leave a shorter completion: a sign or a space
    (``-0`` where ``0`` does), and a member of a list or object with its comma — from a comma
    to the next comma or closing bracket at its depth, or from an opening bracket through
    the next comma (an optional key the descent wrote first). By start, then longest first.

    Example:
        >>> from hf_fvo.grammar.pushdown.completion import _cuts
        >>> text = b'"a":-0,"b":[1,2]}'
        >>> [text[i:j] for i, j in _cuts(text)]
        [b'-', b',"b":[1,2]', b'1,', b',2']
    """
    cuts = [(i, i + 1) for i, b in enumerate(text) if b in _LONE_CUTS]
    for i, b in enumerate(text):
        if b != _COMMA and b not in b"[{":
            continue
        depth, quoted, k = 0, False, i + 1
        while k < len(text):  # the next delimiter at this depth (strings skipped)
            c = text[k]
            if quoted:
                if c == _BACKSLASH:  # (skip the escaped byte)
                    k += 1
                elif c == _QUOTE:
                    quoted = False
            elif c == _QUOTE:
                quoted = True
            elif c in b"[{":
                depth += 1
            elif c in b"]}" and depth:
                depth -= 1
            elif depth == 0 and (c == _COMMA or c in b"]}"):
                break
            k += 1
        if b == _COMMA:
            cuts.append((i, k))
        elif k < len(text) and text[k] == _COMMA:
            cuts.append((i + 1, k + 1))
    return sorted(cuts, key=lambda cut: (cut[0], cut[0] - cut[1]))


def _shortened(
    searcher: Any, text: bytes, idle: Sequence[int] = (), work: Work | None = None
) -> bytes:
    """A depth-first completion made shorter where removing a span (:func:`_cuts`) still
    completes from the byte parser ``searcher`` (unchanged), left to right, until a sweep
    removes none: the descent writes ``-0`` for ``0`` and optional members before required
    ones. First the ``idle`` bytes (:meth:`Completer._dfs`) all at once. At most
    ``_CUT_TRIES`` parses; texts over ``_CUT_BYTES`` are left as they are."""
    if idle and spend(work):
        gone = set(idle)
        cut = bytes(b for i, b in enumerate(text) if i not in gone)
        seq = [*cut, BYTE_EOS]
        if searcher.validate_tokens(seq) == len(seq):
            text = cut
    if len(text) > _CUT_BYTES:
        return text
    tries, start, removed = 0, 0, False
    while tries < _CUT_TRIES:
        for i, j in _cuts(text):
            if i < start:
                continue
            tries += 1
            if not spend(work):
                return text
            cut = text[:i] + text[j:]
            seq = [*cut, BYTE_EOS]
            if searcher.validate_tokens(seq) == len(seq):
                text, start, removed = cut, i, True
                break  # (the spans after it, anew)
            if tries >= _CUT_TRIES:
                return text
        else:  # a sweep from ``start`` removed nothing: once more from the start, if any did
            if not removed:
                return text
            start, removed = 0, False
    return text


def advanced(matcher: Any, token: int) -> Any:
    """A copy of an llguidance parser that has consumed ``token`` (the parser is unchanged)."""
    child = matcher.deep_copy()
    child.consume_token(token)
    return child
