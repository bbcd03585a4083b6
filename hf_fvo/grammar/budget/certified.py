"""The budget rule of a pushdown grammar: which tokens keep a member of L_B in reach.

A token y is admitted at a state with ``remaining`` tokens left (EOS included) only where y's
next state has a completion, verified by the parser, of at most ``remaining − 2`` tokens (then
EOS); EOS only at accepting states. So no output is ever cut, and the rule may drop a member
(one that no certificate or bounded search reaches), never admit a prefix that cannot finish.

:class:`CertifiedBudget` is that rule over one
:class:`~hf_fvo.grammar.pushdown.PushdownGrammar` (the core: states, masks, next states): the
state's witness (a verified completion, inherited along it), the certificates (the witness's
spellings and splices, one probe mask for every token, the string and key certificates of the
marked grammar, the schema's closings) and the searches, under one bound on each set's work.
What it learns about a state it keeps beside it (:class:`BudgetMemo`, weakly keyed by the
state: the state itself is a value), the checks by room as :class:`RoomCheck`; the grammar's
lock covers every call. The compiler builds one per compiled grammar
(:meth:`~hf_fvo.grammar.GrammarCompiler.json_schema` and the other pushdown factories) and
the grammar answers :meth:`~hf_fvo.grammar.Grammar.admissible` through it.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from hf_fvo.errors import GrammarError, check_int
from hf_fvo.grammar.budget.memo import (
    UNKNOWN,
    BudgetMemo,
    Follower,
    Found,
    Loose,
    Opening,
    RoomCheck,
    SharedHeirs,
)
from hf_fvo.grammar.interface import LazyAdmissible
from hf_fvo.grammar.pushdown.completion import MAX_DEPTH as _MAX_DEPTH
from hf_fvo.grammar.pushdown.completion import Work, spend
from hf_fvo.grammar.pushdown.engine import (
    key_names,
    limits,
    marked_definition,
    plain_length,
    probe_definition,
)
from hf_fvo.grammar.pushdown.state import PushdownState
from hf_fvo.grammar.pushdown.utf8 import STRING_STATES, content_state

__all__ = ["CertifiedBudget"]

_STEP_WORK = 1 << 14  # parser operations a budgeted set may spend past a parse or two a candidate
_SPLICE_TRIES = 1024  # of which its splices (a parse each), before the closings and searches
_CONTINUED = 8  # completions found by a check's searches that later candidates may continue
_CHILD_BREADTH = 64  # and the breadth-first pass that follows where that found none to fit
_CHILD_NODES = 400  # parser states each of those searches may visit per depth-first pass
_LAZY_SLACK = 4  # tokens of room beyond a loose witness that make a shorter one not worth a search
_PROBE_FROM = 512  # candidates from which one probe mask beats a parser walk per token
_CERTIFY_FROM = 32  # and from which the free-string certificate is asked first
_CLASSES_FROM = 128  # and the string reader's classes (its cursor costs a feed)
_SPLICE = 8  # witness bytes a token may stand for before a search (see _spliced)
_TEXT_TRIES = 64  # parses _matched may spend finding which pattern text a string needs
_MATCH_CREDIT = 4096  # of which _matched's splices, before their successes pay for more
_MATCH_EARN = 3  # parses each success earns them (they go on while one try in three succeeds)
_SEARCH_WORK = 1 << 15  # parser operations a state's own witness search may spend (then: none)
_SHORTER_WORK = 1 << 13  # and its search for one shorter than a loose witness it inherited
_CLOSE_CREDIT = 2048  # and its closings (each success earns back what it cost, and 3 more)
_CLOSING = 16  # operations a closing written counts for (the schema cursor's Python: ~100 µs)
_TOKEN_MASK = 16  # and a parser copy's mask over the vocabulary (~40 µs: a byte mask's ~2)
_SPELLED = 4  # bytes of a text spelled in the fewest tokens per operation (~1 µs a byte)
_PREFIXES_FROM = 64  # candidates left from which the state's own closings' prefixes go first
_PREFIX_CLOSINGS = 16  # and how many of its closings they are read from
_MEMBER_BYTES = 1 << 16  # longest built member walked (a witness for budgets of ~10⁴ tokens)
_ROOMS = 256  # budget checks a state keeps, by room (only the shared initial state has many)
_CURSORS = 4096  # JSON cursors (and closing spellings) kept per grammar, by path (by text)
_PROBE_BYTES = 512  # longest witness probed (the vocabulary is split into parts whose tries
# llguidance can hold: about 70 bytes a part with SmolLM2's; beyond, the parser walks per token)


class _Check(NamedTuple):
    """One budget check in progress (:meth:`CertifiedBudget._within`): the state, the room
    after a token, what it keeps so far (0/1 per id) and the children's witnesses it found, by
    token; each certificate adds to the last two."""

    state: PushdownState
    room: int
    keep: np.ndarray
    heirs: dict[int, tuple[int, ...]]
    work: Work | None  # the parser operations it may still spend (None: no bound)


class CertifiedBudget:
    """The budget rule of one :class:`~hf_fvo.grammar.pushdown.PushdownGrammar` (see the
    module): built with what the compiler knows of the language, then attached to the grammar
    it answers for (:meth:`attach`), once.

    ``closing`` bounds, in bytes, the shortest completion of every prefix of a member (shown
    from its JSON schema; ``None``: not known); every member has at least ``shortest`` bytes
    (0: not known); ``member`` builds the text of a short member (from its JSON schema), which
    the parser verifies before it becomes the initial state's witness; ``lower(upper)`` gives
    a proven lower bound on the tokens of every member (0 or ``None``: not known; it may stop
    at ``upper``, the tokens of a member found), asked only when a budget needs it;
    ``texts()`` gives text that string contents may need (its patterns' shortest matches),
    which the completion searches try to write; ``closer()`` gives the schema's
    :class:`~hf_fvo.grammar.schema.closer.JsonCursor` before any text, whose closings certify
    tokens before a search is tried (each verified by a parse); ``raw(pattern, free, mark)``
    gives the content of a marked lexeme for a pattern's strings
    (:func:`~hf_fvo.grammar.schema.patterns.marked_content`), which the string certificate
    marks (:func:`~hf_fvo.grammar.pushdown.engine.marked_definition`); ``reach``: the closer's
    cursor also bounds what completes each state after one more token
    (:meth:`~hf_fvo.grammar.schema.closer.JsonCursor.reach`: compact JSON, or a layout no
    completion needs), so that a far budget keeps the parser's mask there without a check;
    ``ends``: the bytes a member can end with (bit b: byte b; ``None``: any), which the
    searches alone ask whether they end a completion
    (:func:`~hf_fvo.grammar.schema.literals.ending_bytes`: ``}`` then whitespace for an
    object).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_json_schema({"enum": ["yes", "no"]}, tok, whitespace="")
        >>> start = g.initial_state
        >>> rule = g.budget_rule
        >>> [tok.decode([t]) for t in rule.completion(start)]
        ['"', 'no', '"']
        >>> [tok.decode([t]) for t in g.admissible(start, 4).nonzero().flatten().tolist()]
        ['"']
        >>> bool(g.admissible(start, 3).any())  # 3 tokens, then EOS: no member is that short
        False
    """

    def __init__(
        self,
        closing: int | None = None,
        shortest: int = 0,
        member: Callable[[], str | None] | None = None,
        lower: Callable[[int | None], int | None] | None = None,
        texts: Callable[[], tuple[str, ...]] | None = None,
        closer: Callable[[], Any] | None = None,
        raw: Callable[[str, str, str], str | None] | None = None,
        checked_lower: bool = False,
        reach: bool = False,
        ends: int | None = None,
    ) -> None:
        # checked_lower: ``lower`` also counts what the final check decides (key_order="any":
        # the required keys), so it may exceed the masks' shortest text, which the check fails
        self.checked_lower = checked_lower
        self._checked_upper: int | object | None = UNKNOWN
        self._closer = closer
        self._raw = raw
        self._closing = closing
        self._reach = reach and closer is not None
        self._ends = ends
        self._depth: int | None = None  # (the most objects and arrays one token opens)
        self._shortest = int(shortest)
        self._member = member
        self._texts, self._pieces = texts, None
        self._lower, self._lower_value, self._lower_whole = lower, None, False
        self._grammar: Any = None

    def attach(self, grammar: Any) -> None:
        """Answer for ``grammar`` (a :class:`~hf_fvo.grammar.pushdown.PushdownGrammar` whose
        core is set up): read its parser's facts, compile the shadow parsers' grammars lazily,
        and give its initial and terminal states their memos."""
        if self._grammar is not None:
            raise GrammarError("internal: a budget rule answers for one grammar only")
        self._grammar = grammar
        grammar._budget = self
        tokenizer = grammar._tokenizer
        tokenizer.warm()  # (the per-token tables the rule reads: built here, not in a step)
        definition = grammar.definition
        self._tokenizer, self._vocab, self._n = tokenizer, grammar._vocab, grammar._n
        self._eos, self._vocab_size = grammar._eos, grammar._vocab_size
        self._utf8_next, self._completer = grammar._utf8_next, grammar._completer
        self._initial, self._terminal = grammar.initial_state, grammar.terminal_state
        self._lock = grammar._lock
        # the core's questions (its masks, its accepting states, its state check)
        self._bits, self.allowed = grammar._bits, grammar.allowed
        self.is_accepting, self._check_state = grammar.is_accepting, grammar._check_state
        self._memos: weakref.WeakKeyDictionary[PushdownState, BudgetMemo] = (
            weakref.WeakKeyDictionary()
        )
        self._cursors: dict[tuple[int, ...], Any] = {}  # JsonCursor by path (bounded)
        self._spellings: dict[bytes, tuple[int, ...] | None] = {}  # fewest tokens, by text
        self._probe_definition = probe_definition(definition)
        marker, key, pattern = tokenizer.marker, tokenizer.key_marker, tokenizer.pattern_marker
        marked = None if marker is None else marked_definition(
            definition, marker[0], None if key is None else key[0],
            None if pattern is None else pattern[0], self._raw)  # fmt: skip
        # the names the other keys' lexemes exclude (their marks certify only what cannot
        # become one), UTF-8
        self._key_names = (() if marked is None or key is None
                           else tuple(n.encode() for n in key_names(definition)))  # fmt: skip
        spelled = self._vocab.token_bytes
        self._bytewise = Follower(
            "bytewise",
            tokenizer.byte_llg,
            definition,
            lambda tokens: [b for t in tokens for b in spelled[t]],
        )
        self._marked = None if marked is None else Follower("marked", tokenizer.llg, marked, list)
        for follower in (self._bytewise, self._marked):  # (their grammars: here, not in a step)
            if follower is not None:
                follower.compile()
        # whether a marked lexeme counts its characters (then c markers stand for c of them)
        self._counted = marked is not None and re.search(r"^STRING_\d", marked, re.M) is not None
        self._memos[self._initial] = start = BudgetMemo(shadows=(Follower.START, Follower.START))
        self._memos[self._terminal] = BudgetMemo()
        # tokens every member needs, at least: its bytes over the longest token's
        self._start_tokens = -(-self._shortest // max(self._completer.longest, 1))
        if self._reach:
            self._depth = int(tokenizer.openers[: self._n].max(initial=0))
        self._ending: np.ndarray | None = None  # per id: whether it may end a member (0/1)
        self._key_refused: dict[int, np.ndarray] = {}  # (_key_lasts, by open containers)
        self._ending_ids: dict[int, np.ndarray] = {}  # those that hold n closers, by n
        if self._ends is not None:
            ends = np.array([self._ends >> b & 1 for b in range(257)], dtype=np.uint8)
            self._ending = ends[tokenizer.last_bytes[: self._n]]
        if self._shortest > (_MAX_DEPTH if self._member is None else _MEMBER_BYTES):
            start.witness = None  # neither the search nor a built member goes there

    def born(self, parent: PushdownState, token: int, child: PushdownState) -> None:
        """``child`` is ``parent``'s next state after ``token``: its memo starts from the
        parent's (the witness found for the token, or the rest of the parent's; the parent's
        checks as hints; the shadow parsers one token on)."""
        memo = self._memos[parent]
        self._memos[child] = BudgetMemo(
            self._inherited(parent, token),
            (Follower.child(memo.bytewise, token), Follower.child(memo.marked, token)),
            memo.rooms,
            memo.suffixes,  # (a witness inherited from it spells a suffix)
        )

    def min_tokens_to_accept(self, state: PushdownState) -> int:
        if self.is_accepting(state):
            return 0
        return max(self._start_tokens, 1) if state is self._initial else 1

    def shortest_bounds(
        self, state: PushdownState, enough: int | None = None
    ) -> tuple[int, int | None]:
        """At the initial state the lower bound is also the compiler's (``lower``: the tokens its
        literal text needs, a regular superset's fewest; computed once, where given, up to the
        smaller of ``enough`` and the upper bound); elsewhere :meth:`min_tokens_to_accept`."""
        if enough is not None:
            check_int("enough", enough)
        lower, upper = self.min_tokens_to_accept(state), self.tokens_to_accept(state)
        if state is not self._initial:
            return lower, upper
        goal = upper if enough is None else enough if upper is None else min(enough, upper)
        known = self._lower_value
        if self._lower is not None and (
            known is None or not (self._lower_whole or (goal is not None and known >= goal))
        ):
            known = self._lower(goal) or 0  # it stops early only once it reaches the goal
            self._lower_value, self._lower_whole = known, goal is None or known < goal
        return max(lower, known or 0), upper

    def tokens_to_accept(self, state: PushdownState) -> int | None:
        """Tokens (EOS not counted) of a verified completion from ``state``: an upper bound on
        the fewest (see :mod:`hf_fvo.grammar.pushdown.completion`); ``None`` if the search
        found none within its limits."""
        witness = self.completion(state)
        return None if witness is None else len(witness)

    def completion(self, state: PushdownState) -> tuple[int, ...] | None:
        """A token sequence (EOS excluded) that takes ``state`` to acceptance, verified by the
        parser; states along it inherit its rest, so their bounds only shrink."""
        self._check_state(state)
        if state is self._terminal:
            return ()
        memo = self._memos[state]
        witness = memo.witness
        if witness is UNKNOWN and state is self._initial and self._member is not None:
            built = self._built_member()  # then the cheap breadth-first pass may beat it
            if built is not None:
                found = self._completer.complete(
                    state._matcher, self._bytewise.parser(memo), state._utf8, passes="breadth",
                    ends=self._ends,
                )  # fmt: skip
                memo.witness = Found(built if found is None or len(built) <= len(found)
                                     else found)  # fmt: skip
                return memo.witness
        if witness is UNKNOWN and state is not self._initial:
            closed = self._closed(state, None, _MEMBER_BYTES)
            if closed is not None:  # then the cheap breadth-first pass may beat it
                found = self._completer.complete(
                    state._matcher, self._bytewise.parser(memo), state._utf8, passes="breadth",
                    ends=self._ends,
                )  # fmt: skip
                memo.witness = Found(closed if found is None or len(closed) <= len(found)
                                     else found)  # fmt: skip
                return memo.witness
        if witness is UNKNOWN or isinstance(witness, Loose):
            # (bounded past the initial state, which a refusal's bounds ask once: a
            # depth-first pass inside a date-time pattern made 1.6 million parser advances,
            # 51 s, looking for a shorter one than a Loose witness)
            work = (None if state is self._initial
                    else Work(_SEARCH_WORK if witness is UNKNOWN else _SHORTER_WORK))  # fmt: skip
            found = self._completer.complete(
                state._matcher, self._bytewise.parser(memo), state._utf8,
                texts=self._written(), work=work, ends=self._ends,
            )  # fmt: skip
            if witness is not UNKNOWN and (found is None or len(witness) < len(found)):
                found = witness  # the inherited one is shorter: keep it
            memo.witness = None if found is None else Found(found)
        return memo.witness

    def _written(self) -> tuple[bytes, ...]:
        """The bytes the completion searches try to write inside strings (``texts()``, once)."""
        if self._pieces is None:
            self._pieces = tuple(t.encode() for t in (self._texts() if self._texts else ()))
        return self._pieces

    def checked_upper(self, check: Callable[[tuple[int, ...]], str | None]) -> int | None:
        """Tokens of a member from the initial state that the parser and ``check`` (the final
        check of the finished tokens) both pass: the initial witness, else the built member;
        ``None`` where neither passes. Computed once."""
        if self._checked_upper is UNKNOWN:
            found = None
            for witness in (self.completion(self._initial), self._built_member()):
                if witness is not None and check(witness) is None:
                    found = len(witness)
                    break
            self._checked_upper = found
        return self._checked_upper  # type: ignore[return-value]

    def _built_member(self) -> tuple[int, ...] | None:
        """The built member's text in the fewest tokens that spell it, if the parser (and the
        UTF-8 filter) accept them from the initial state; else the tokens one byte each."""
        text = self._member() if self._member is not None else None
        if text is None:
            return None
        spelled = text.encode()
        if len(spelled) > _MEMBER_BYTES:
            return None
        matcher, completer = self._initial._matcher, self._completer
        for tokens in (completer.fewest_tokens(spelled), completer.single_bytes(spelled)):
            if tokens is not None and completer.accepts(matcher, self._initial._utf8, tokens):
                return tokens
        return None

    def admissible(self, state: PushdownState, remaining: int | None) -> torch.Tensor:
        keep = self.kept(state, remaining)
        if keep is not None:
            mask = torch.zeros(self._vocab_size, dtype=torch.bool)
            mask[: self._n] = torch.from_numpy(keep.view(np.bool_))
            if self.is_accepting(state):
                mask[list(self._eos)] = True
            return mask
        mask = self.allowed(state)
        if remaining is None:
            return mask
        if remaining <= 1 or state is self._terminal:
            return self._only_eos(mask, remaining >= 1 and self.is_accepting(state))
        if state is self._initial and self._start_tokens + 1 > remaining:
            return self._only_eos(mask, False)  # no member is that short
        return mask  # every prefix completes within `closing` single-byte tokens

    def kept(self, state: PushdownState, remaining: int | None) -> np.ndarray | None:
        """The budget check's admissible non-EOS tokens (0/1 per id < n) where one applies
        (computed once per state and room), else ``None``."""
        if remaining is None or remaining <= 1 or state is self._terminal:
            return None
        self._check_state(state)
        if state is self._initial and self._start_tokens + 1 > remaining:
            return None  # no member is that short
        room = remaining - 2  # after y: its completion, then EOS
        if self._far(state, room):
            return None  # every next state completes within so many single-byte tokens
        entry = self._room(state, room)
        if entry.keep is None:  # a caller may ask twice (a twist), requests share the start
            entry.keep = self._within(state, room)
        return entry.keep

    def lazy_admissible(self, state: PushdownState, remaining: int | None) -> LazyAdmissible | None:
        """:meth:`admissible`'s set decided per token where the room binds and the state's
        witness fits it (particles draw a token or two from the parser's set and check them;
        the whole set costs a check the draws mostly do not need). A token that begins the
        witness (its bytes, the rest in the fewest tokens fitting: the check's first test,
        run before any of its work is spent) is a member at once; any other token is
        answered from the whole check (:meth:`kept`), computed at the first such question
        under the same work bound as every decoder's. The set is :meth:`admissible`'s token
        for token, whichever tokens were asked first: it depends on (state, room) alone."""
        self._check_state(state)
        if remaining is None or remaining <= 1 or state is self._terminal:
            return None
        if state is self._initial and self._start_tokens + 1 > remaining:
            return None  # (no member is that short: admissible() says so at once)
        room = remaining - 2
        if self._far(state, room):
            return None  # admissible() is the parser's mask: nothing to save
        lock = self._lock
        with lock:
            witness, first = self._opening(state, room)
        if witness is None or room < len(witness):
            return None
        accepting = self.is_accepting(state)
        eos, n = self._eos, self._n

        def admits(token: int) -> bool:
            token = int(token)
            if token in eos:
                return accepting
            if not 0 <= token < n:
                return False
            if first[token]:
                return True
            with lock:
                return bool(self.kept(state, remaining)[token])

        def resolve() -> torch.Tensor:
            with lock:
                return self.admissible(state, remaining)

        return LazyAdmissible(self.allowed(state), admits, resolve)

    def _opening(self, state: PushdownState, room: int) -> tuple[Any, np.ndarray]:
        """The witness a check at ``room`` starts from and the tokens its first test keeps
        (:meth:`_witness_prefixes`: those that spell a beginning of the witness's bytes when
        the rest fits), computed once per (state, room): the whole check and the
        token-by-token rule read the same. Where a witness inherited for a larger room
        (evicted from the shared initial state's checks) does not fit, one search for a
        shorter one first."""
        entry = self._room(state, room)
        if entry.opening is None:
            witness = self._witness_at(state, room)
            if witness is not None and len(witness) > room + 1 and not isinstance(witness, Found):
                self._memos[state].witness = Loose(witness)
                witness = self.completion(state)
            keep = np.zeros(self._n, dtype=np.uint8)
            spent = Work(_STEP_WORK)
            if witness:
                self._witness_prefixes(_Check(state, room, keep, entry.heirs, spent), witness)
            entry.opening = Opening(witness, keep, spent.spent)
        return entry.opening[:2]

    def _witness_at(self, state: PushdownState, room: int) -> tuple[int, ...] | None:
        """The state's witness for a budget check with ``room``: a loose one that leaves
        ``_LAZY_SLACK`` tokens of room serves as it is (no search for a shorter one), else
        :meth:`completion`'s."""
        memo = self._memos[state]
        witness = memo.witness
        if isinstance(witness, Loose) and len(witness) + _LAZY_SLACK <= room:
            return witness
        if isinstance(witness, tuple) and len(witness) + _LAZY_SLACK > room:
            shorter = self._shortened(state, witness)
            if shorter is not None:  # (of the witness's kind: a search's stays a search's)
                memo.witness = witness = type(witness)(shorter)
                if isinstance(witness, Loose) and len(witness) + _LAZY_SLACK <= room:
                    return witness
        return self.completion(state)

    def _shortened(self, state: PushdownState, witness: tuple[int, ...]) -> tuple[int, ...] | None:
        """A completion of ``state`` in fewer tokens than ``witness``, if one of two is: its
        bytes in the fewest tokens (an inherited witness keeps its parent's spelling, ``"`` then
        ``}`` where ``"}`` is one token), or the schema's closing (:meth:`_closed`); verified."""
        if not witness:
            return None
        best = None
        respelled = self._fewest(self._text(witness))
        if (respelled is not None and len(respelled) < len(witness)
                and self._completer.accepts(state._matcher, state._utf8, respelled)):  # fmt: skip
            best = respelled
        closed = self._closed(state, None, len(best or witness) - 1)
        return tuple(closed) if closed is not None else best

    def _spelled_rest(
        self, state: PushdownState, y: int, text: bytes, j: int, room: int
    ) -> tuple[int, ...] | None:
        """y then ``text[j:]`` (the witness's bytes from j) in the fewest tokens: that rest, if
        it fits in ``room`` and the parser accepts y then it (where y spells ``text[:j]``)."""
        done = self._completer
        rest = self._suffixes(state, text)[j]
        if rest is None or len(rest) > room or not done.accepts(state._matcher, state._utf8,
                                                                 (y, *rest)):  # fmt: skip
            return None
        return rest

    def _suffixes(self, state: PushdownState, text: bytes) -> list[tuple[int, ...] | None]:
        """The fewest-token spellings of every suffix of ``text`` (the state's witness's
        bytes), computed once per state; where ``text`` ends the parent's witness text (a
        witness inherited from it), the parent's list from there: a suffix's spelling depends
        on the suffix only."""
        memo = self._memos[state]
        known = memo.suffixes
        if known is None or known[0] != text:
            if known is not None and len(known[0]) > len(text) and known[0].endswith(text):
                known = (text, known[1][len(known[0]) - len(text) :])
            else:
                known = (text, self._completer.suffix_spellings(text))
            memo.suffixes = known
        return known[1]

    def _spliced(
        self,
        state: PushdownState,
        y: int,
        room: int,
        text: bytes,
        splices: dict[int, tuple[int, ...]] | None = None,
        work: Work | None = None,
    ) -> tuple[int, ...] | None:
        """y then one of :meth:`_splices` (``splices``, if given), the first the parser
        accepts, the one that drops as many bytes as y spells first (y written in place of
        the witness's first bytes: a string's content, a digit for a digit): y often stands
        for the witness's first bytes (``{`` where it wrote `` {``, ``4`` where it wrote
        ``-``). A splice can be longer than what a search from y's next state finds, so the
        child also searches once asked for its completion and keeps the shorter
        (:class:`~hf_fvo.grammar.pushdown.state.Loose`). Each parse spends one of ``work``."""
        done = self._completer
        rests = self._splices(state, room, text) if splices is None else splices
        for i in self._splice_order(y, plain_length(text), rests):
            if not spend(work):
                return None
            if done.accepts(state._matcher, state._utf8, (y, *rests[i])):
                return Loose(rests[i])
        return None

    def _splices(self, state: PushdownState, room: int, text: bytes) -> dict[int, tuple[int, ...]]:
        """By i (1 ≤ i ≤ ``_SPLICE``, and the witness's leading plain bytes, :func:`plain_length`):
        the witness's bytes (``text``) less their first i, in the fewest tokens, where that
        fits in ``room``; the same for every token."""
        rests = self._suffixes(state, text) if text else ()
        cuts = [*range(1, min(len(text), _SPLICE) + 1), plain_length(text)]
        return {i: rest for i in cuts
                if i and (rest := rests[i]) is not None and len(rest) <= room}  # fmt: skip

    def _splice_order(self, y: int, plain: int, rests: dict[int, tuple[int, ...]]) -> list[int]:
        """The splices y tries, in order: y in place of as many of the witness's first bytes
        as it spells, then in place of its leading ``plain`` bytes (:meth:`_matched`), then
        the others."""
        first = [i for i in dict.fromkeys((len(self._vocab.token_bytes[y]), plain))
                 if i in rests]  # fmt: skip
        return [*first, *(i for i in rests if i not in first)]

    def _matched(
        self,
        check: _Check,
        text: bytes,
        cand: np.ndarray,
        tails: dict[int, tuple[int, ...]],
        probed: np.ndarray,
    ) -> None:
        """Keep the candidates y (``cand``) that the witness (``text``) still completes after
        (:meth:`_tails`: the bytes finishing y's last character first, where y ends inside
        one; not where the probe answered that, ``probed``) or that stand for a part of it: y
        written in place of the witness's first bytes, as many as y spells or as many as y has
        characters (a character for a character: a string of fixed length), or in place of
        its leading plain bytes (:func:`plain_length`: a lexeme's whole content, as a key's
        ``iversity`` stands for the witness's ``aa``), or y's own content then the witness's
        first bytes (``..."`` before the witness's ``"]}``); else y, then one of the schema's
        pattern texts (:meth:`_written`), then the witness past its plain bytes (inside an
        unanchored pattern: content, then a whole match, then what closes the string).

        What certified the previous candidate is tried first (content tokens are alike: one
        parse each), then the tail (one parse each, as every check takes): at most two parses
        a candidate, not drawn from the check's work. The splices and the texts (one a text
        until one is found that works, then that one) draw on a part of the check's work, a
        credit of ``_MATCH_CREDIT`` parses that each success renews by ``_MATCH_EARN``, so
        where they keep failing (nothing fits a small room) they stop after a few thousand:
        never a search."""
        state, room, keep, heirs, work = check
        done, tok, spelled = self._completer, self._tokenizer, self._vocab.token_bytes
        matcher = state._matcher
        rests, plain = (self._suffixes(state, text), plain_length(text)) if text else ([()], 0)
        made: dict[tuple[int, int], tuple[int, ...] | None] = {}

        def spliced(i: int, after: int, fill: tuple[int, ...]) -> tuple[int, ...] | None:
            """``fill`` then the witness less its first i bytes, where that fits and leaves
            UTF-8 whole after a token that leaves ``after`` (made once per pair)."""
            key = (i, after)
            if key not in made:
                rest = rests[i] if 0 < i <= len(text) else None
                seq = None if rest is None else Loose((*fill, *rest))
                made[key] = (seq if seq is not None and len(seq) <= room
                             and done.utf8_after(after, seq) == 0 else None)  # fmt: skip
            return made[key]

        inserted = []  # (a text then the witness past its plain bytes: whole characters)
        for piece in self._written() if plain else ():
            rest = done.fewest_tokens(piece + text[plain:])
            if rest is not None and len(rest) <= room and done.utf8_after(0, rest) == 0:
                inserted.append(Loose(rest))
        good, probes = None, _TEXT_TRIES  # the text that works, once found
        # the parses the splices and texts may spend (successes renew it), of the check's work
        credit = Work(_MATCH_CREDIT) if work is None else work.part(_MATCH_CREDIT)
        last, last_after = None, -2  # what certified the last candidate (content is alike)
        then: list[int] = []  # last, then EOS: what a parse after y asks first
        sizes, chars = tok.sizes[cand].tolist(), tok.characters[cand].tolist()
        afters, plains = self._utf8_next[state._utf8, cand].tolist(), tok.plain_lengths[cand]
        rows = zip(cand.tolist(), sizes, chars, afters, probed[cand].tolist(), strict=True)
        for j, (y, size, count, after, asked) in enumerate(rows):
            if after == last_after:  # the fast way: one parse, as alike content needs
                seq = [y, *then]
                if matcher.validate_tokens(seq) == len(seq):
                    keep[y] = 1
                    heirs.setdefault(y, last)
                    continue
            fill = done.fill.get(after)
            if fill is None:
                continue  # (y breaks UTF-8)
            # every try below leaves UTF-8 whole after y (checked once, where it is made)
            found, tail = None, None if asked else tails.get(after)
            if (tail is not None and (tail is not last or after != last_after)
                    and done.parses(matcher, (y, *tail))):  # fmt: skip
                found = tail  # the witness still completes after y
            tries = [] if credit.done else [spliced(i, after, fill) for i in (size, count, plain)]
            if tries and text and 0 < plains[j] < size:  # y's content, then the witness's
                end = spelled[y][plains[j] :]  # first bytes: the witness's rest
                if text.startswith(end):
                    tries.append(spliced(len(end), after, fill))
            if tries and after == 0 and good is not None:
                tries.append(good)
            for k, rest in enumerate(tries if found is None else ()):
                if (rest is None or any(rest is t for t in tries[:k])
                        or (rest is last and after == last_after)):  # fmt: skip
                    continue  # (asked already)
                if not credit.spend():
                    break
                if done.parses(matcher, (y, *rest)):
                    found, credit.left = rest, credit.left + _MATCH_EARN
                    break
            while found is None and good is None and probes and inserted and after == 0:
                if not credit.spend():
                    break
                probes -= 1
                rest = inserted[probes % len(inserted)]
                if done.parses(matcher, (y, *rest)):
                    found = good = rest
            if found is not None:
                if found is not last:
                    last, last_after, then = found, after, [*found, self._eos[0]]
                keep[y] = 1
                heirs.setdefault(y, found)

    def _string_classes(
        self, check: _Check, cand: np.ndarray, witness: tuple[int, ...]
    ) -> list[tuple[int, np.ndarray]]:
        """Inside a string value whose schemas say what finishes it from how it began (the
        cursor's :meth:`~hf_fvo.grammar.schema.closer.JsonCursor.string_reader`: a
        ``pattern`` alone, or no more than its length, in a value or a key), the candidates
        that write plain printable ASCII (no quote, no backslash: their JSON text is their
        characters; for a reader of lengths every token of whole content, escapes and other
        characters alike, by its number of characters), grouped by the reader's states after
        them. Two texts that leave the same states are finished by the same strings, and
        inside the string's lexeme the parser reads nothing else (the lexeme has not ended;
        on printable ASCII ECMA-262's reading of a pattern, the automaton's and the engine's
        agree; a lexeme bounded by its length alone counts characters, whichever they are),
        so a completion verified after the first of a group (one parse: the witness, else the
        schema's closing, :meth:`_closed`) is one after every member. o21390's ``base_path``
        (``^/((pchar|%HH)+…)?$``): 15,858 candidates, a parse each, ~0.6 s a step; a free
        string in llguidance's JSON mode (MaskBench o73817), where no marker certifies: a
        probe vocabulary built, 1.5 s.

        A group whose first member that parse does not certify is returned as its first
        member and the others (the followers): the rule's other tests try the first alone
        and the others take its answer (:meth:`_follow`)."""
        state, room, keep, _, work = check
        cursor = self._cursor(state)
        found = None if cursor is None else cursor.string_reader()
        if found is None:
            return []
        machine, states = found
        tok = self._tokenizer
        if getattr(machine, "counts_characters", False):
            # (a reader of lengths: every whole content token, escapes and non-ASCII
            # characters included, reads as its number of characters)
            # (not a surrogate pair's escape: one character here, perhaps two to the engine)
            whole = cand[(tok.content_after[cand] == 0) & (tok.surrogate_escaped[cand] == 0)]
            kinds, inverse = np.unique(tok.content_chars[whole], return_inverse=True)
            after = [machine.run(states, "a" * k) for k in kinds.tolist()]
        else:
            texts, spelled = tok.ascii_reading(machine, machine.representatives(), cand)
            whole = cand[spelled[cand] >= 0]
            kinds, inverse = np.unique(spelled[whole], return_inverse=True)
            after = [machine.run(states, texts[k]) for k in kinds.tolist()]
        group_of: dict[frozenset[int], int] = {}
        group = np.array([group_of.setdefault(a, len(group_of)) if a else -1 for a in after],
                         dtype=np.int64)[inverse]  # fmt: skip
        done, matcher = self._completer, state._matcher
        ids, keys, found_by = np.zeros(self._n, dtype=np.uint8), np.full(self._n, -1), {}
        followers = []
        for g in range(len(group_of)):
            members = whole[group == g]
            first = int(members[0])
            rest: tuple[int, ...] | None = witness
            if len(witness) > room or not (
                spend(work) and done.accepts(matcher, 0, (first, *witness))
            ):
                rest = self._closed(state, first, room, work)
            if rest is None:  # (left to the rule's other tests, by its first member)
                if len(members) > 1:
                    followers.append((first, members[1:]))
                continue
            keep[members], ids[members], keys[members], found_by[g] = 1, 1, g, rest
        self._room(state, room).classes = SharedHeirs(ids, found_by, keys)
        return followers

    def _searched(
        self, state: PushdownState, y: int, room: int, work: Work | None = None
    ) -> tuple[int, ...] | None:
        """A completion of y's next state that fits in ``room``, found by a bounded search:
        depth first (linear in its length), then — where that found none that fits — breadth
        first (the byte-shortest within a few dozen parser states); breadth first only where
        the room is below the state's witness. A depth-first one may be longer than the
        shortest: the child keeps it as :class:`~hf_fvo.grammar.pushdown.state.Loose`. Every
        expansion and parse spends one of ``work``."""
        memo = self._memos[state]
        done, searcher = self._completer, self._bytewise.parser(memo)
        if not spend(work):
            return None
        if room == 0:  # only the empty completion fits: whether y's next state accepts
            return done.complete(state._matcher, searcher, state._utf8, first=y, passes="none")
        if room == 1 and self._ending is not None:
            cursor = self._cursor(state)
            if cursor is not None:  # one token fits: which, exactly (no search)
                return self._one_more(state, y, cursor.open_containers, work)
        witness = memo.witness
        if not isinstance(witness, tuple) or len(witness) <= room:
            # (where not even the state's witness fits after y, y must shorten it: the
            # depth-first pass rarely finds that, the breadth-first one does)
            found = done.complete(state._matcher, searcher, state._utf8, _CHILD_NODES, first=y,
                                  passes="depth", work=work, texts=self._written())  # fmt: skip
            if found is not None and len(found) <= room:
                return Loose(found)
        found = done.complete(state._matcher, searcher, state._utf8, first=y, passes="breadth",
                              work=work, breadth=_CHILD_BREADTH, ends=self._ends)  # fmt: skip
        return found if found is not None and len(found) <= room else None

    def _key_lasts(self, open_: int) -> np.ndarray:
        """Inside a key, with ``open_`` containers open (a check with one token of room after
        y: y, then at most one token, then EOS): per token y (0/1), whether no single token
        can finish y's text. y that is string content (:attr:`PushdownTokenizer.content_after`)
        leaves the text inside the key: the token after it needs a quote then a colon; y that
        is plain content then the closing quote needs a colon after it; either needs as many
        closing brackets as y leaves open (``open_`` less y's, counted as if they closed) and
        to end with a byte a member ends with (``ends``). A proof without a parse: in SmolLM2's
        vocabulary no token holds both a colon and a closing bracket, so at ``{"`` with one
        token of room every key's first letters are refused at once (each took a mask over
        the vocabulary: ~400 of them)."""
        found = self._key_refused.get(open_)
        if found is None:
            tok, n = self._tokenizer, self._n
            closers = tok.closers[:n].astype(np.int64)
            kinds = tok.key_closers[:n]
            need = np.maximum(open_ - closers, 0)
            found = np.zeros(n, dtype=bool)
            for kind, ys in ((1, tok.content_after[:n] >= 0), (2, (kinds & 4) != 0)):
                finishers = (self._ending == 1) & ((kinds & kind) != 0)
                most = int(closers[finishers].max()) if finishers.any() else -1
                found |= ys & (need > most)
            found = self._key_refused[open_] = found.astype(np.uint8)
        return found

    def _one_more(
        self, state: PushdownState, y: int, open_: int, work: Work | None = None
    ) -> tuple[int, ...] | None:
        """A completion of y's next state of at most one token, exactly: nothing where it
        accepts, else a token z that the parser's mask allows after y, that ends with a byte a
        member ends with (``ends``) and that closes the containers y leaves open (``open_``
        before y, less y's closing brackets), and that y then z then EOS parses; ``None`` where
        no token does (a proof, not a search: at ``{"`` with one token of room a key's first
        letters took a failing 64-node search each). Spends ``_TOKEN_MASK`` of ``work`` for
        y's parser and its mask over the vocabulary, then one a parse."""
        done = self._completer
        after = done.utf8_after(state._utf8, (y,))
        if after < 0 or not spend(work, _TOKEN_MASK):
            return None
        if after == 0 and done.accepts(state._matcher, state._utf8, (y,)):
            return ()
        matcher = state._matcher.deep_copy()
        if not matcher.consume_token(y):
            return None
        closers = self._tokenizer.closers
        need = max(open_ - int(closers[y]), 0)
        ids = self._ending_ids.get(need)
        if ids is None:  # (a few hundred ids at most: SmolLM2 has 179 that end an object)
            ids = self._ending_ids[need] = np.flatnonzero(
                self._ending & (closers[: self._n] >= need)
            )
        words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        for z in ids[(words[ids >> 3] >> (ids & 7)) & 1 == 1].tolist():
            if not spend(work):
                return None
            if done.utf8_after(after, (z,)) == 0 and done.parses(state._matcher, (y, z)):
                return (z,)
        return None

    def _text(self, witness: tuple[int, ...] | None) -> bytes:
        """The witness's bytes."""
        return b"".join(self._vocab.token_bytes[t] for t in witness or ())

    def _tails(self, witness: tuple[int, ...] | None, room: int) -> dict[int, tuple[int, ...]]:
        """Per UTF-8 state after a token: the fewest bytes finishing its character, then the
        witness, where that fits in ``room``."""
        done = self._completer
        return {
            u: (*fill, *witness) for u, fill in done.fill.items()
            if witness is not None and len(fill) + len(witness) <= room
            and done.utf8_after(u, (*fill, *witness)) == 0
        }  # fmt: skip

    def _room(self, state: PushdownState, room: int) -> RoomCheck:
        """What the budget checks for ``room`` found at ``state`` so far. A child's witness is
        the first one found for its token (so it does not depend on which check found it), for
        the smallest room that found one: a row only admits a token whose witness fits its own
        room, and requests with other budgets share the initial state. The initial state keeps
        its last ``_ROOMS`` rooms."""
        rooms = self._memos[state].rooms
        entry = rooms.get(room)
        if entry is None:
            if len(rooms) >= _ROOMS:
                del rooms[next(iter(rooms))]
            entry = rooms[room] = RoomCheck()
        return entry

    def _only_eos(self, mask: torch.Tensor, accepting: bool) -> torch.Tensor:
        out = torch.zeros_like(mask)
        if accepting:
            out[list(self._eos)] = True
        return out

    def _within(self, state: PushdownState, room: int, work: int | None = _STEP_WORK) -> np.ndarray:
        """The admissible non-EOS tokens y whose next state has a verified completion of at
        most ``room`` tokens (one 0/1 byte per id); their witnesses are kept for the children.

        y is kept when it begins the state's witness (its bytes, the rest re-spelled in the
        fewest tokens), or when the witness still completes after it (finishing a character
        y leaves open first): for JSON grammars one probe mask answers that for every token,
        otherwise the parser walks each. Inside a string lexeme (:meth:`_inside_string`) a
        content token's completions are its character's or escape's end, then the string's
        own: a test per number of characters certifies those whose end, then the witness,
        fits, and the other content tokens are excluded without a search (from inside the
        same string it finds the witness's kind of completion, which does not fit). Every
        other token is tried with the witness's splices (:meth:`_spliced`: y standing for its
        first bytes, as a digit stands for a sign), up to ``_SPLICE_TRIES`` parses, then the
        rest have their next states searched (fewest bytes first, each continuing what an
        earlier one found where it can: :meth:`_continued`).

        Beyond a few parses per candidate, each with a completion found for an earlier one
        (the tail, alike content, an escape's end, the last closing that fitted, the parent's
        hint), every phase draws on one budget of ``work`` parser operations (:class:`Work`: each
        parse, advance, byte mask and closing written; ``None``: no bound): a phase stops
        where it is spent, and what it has not reached is excluded. The set is sound (the
        rule may drop a member, never admit one that cannot finish in time), the work behind
        it is bounded whatever the grammar, and it is the same on every run. Not counted: the
        state's own witness, found once per state under its own bound (``_SEARCH_WORK``), and
        the probe's masks."""
        done = self._completer
        entry = self._room(state, room)
        heirs = entry.heirs
        step = None if work is None else Work(work)  # every phase below draws on it
        witness, first = self._opening(state, room)  # (the witness's beginnings kept)
        keep = first.copy()
        if step is not None:
            step.spend(min(entry.opening.spent, step.left))
        check = _Check(state, room, keep, heirs, step)
        matcher, utf8 = state._matcher, state._utf8
        bits = self._bits(state)
        if room == 0 and (cursor := self._cursor(state)) is not None:
            # y alone must complete the text: it closes every open container (a test per
            # token over the vocabulary, not a parse: at the end of a budget most of ~49k
            # admissible tokens fail, one parse and a failed search each)
            bits = bits & (self._tokenizer.closers[: self._n] >= cursor.open_containers)
        elif (room == 1 and utf8 == 0 and self._ending is not None
                and (cursor := self._cursor(state)) is not None and cursor.in_key):  # fmt: skip
            # y then at most one token: what keeps the text inside the key needs a token
            # that ends it, writes a value and closes every container (_key_lasts: often none)
            bits = bits & (self._key_lasts(cursor.open_containers) ^ 1)
        tails = self._tails(witness, room)
        cand = bits & (keep ^ 1)  # admissible and not kept yet (0/1 per id)
        inside = None
        if witness and utf8 == 0 and self._counted:
            # content tokens written in place of the witness's first characters
            self._replaced(check, self._text(witness), cand)
            cand &= keep ^ 1
        if (witness and utf8 == 0 and self._marked is not None
                and np.count_nonzero(cand) >= _CERTIFY_FROM):  # fmt: skip
            # content tokens whose character- or escape-finishing tokens, then the witness,
            # fit (-1: none), and whose number of characters the string still takes
            tok = self._tokenizer
            table, fills, chars = tok.content_after, tok.content_fill, tok.content_chars
            ending: dict[tuple[int, ...], Any] = {}

            def ended(used: tuple[int, ...]) -> tuple[dict[int, tuple[int, ...]], np.ndarray]:
                """Per content state, its fill then ``used`` where that fits; per token,
                whether it is content whose fill then ``used`` fit."""
                if used not in ending:
                    ends = {s: (*fill, *used) for s, fill in fills.items()
                            if len(fill) + len(used) <= room}  # fmt: skip
                    has_tail = np.zeros(STRING_STATES + 1, dtype=np.uint8)  # + the -1 slot
                    has_tail[list(ends)] = 1
                    ending[used] = (ends, has_tail[tok.content_index] & cand)
                return ending[used]

            def counts(used: tuple[int, ...]) -> list[int]:
                return np.flatnonzero(np.bincount(chars[ended(used)[1] == 1])).tolist()

            inside = self._inside_string(state, tuple(witness), counts, room, step)
        if inside is not None:
            counted, unsafe, used, key = inside
            ends, fits = ended(used)
            # (a token with more characters than were asked for does not fit)
            content = fits & counted[np.minimum(chars, len(counted) - 1)]
            if unsafe is not None:  # (a key: what may still spell a listed name is tried on)
                content = content & (unsafe ^ 1)
            keep |= content
            entry.shared = SharedHeirs(content, ends, table)
            if unsafe is None:
                cand &= table < 0  # the other content tokens are not searched (docstring)
            else:  # (a key's witness may write a listed name: a shorter completion may exist)
                cand &= content ^ 1
                # what it does not speak for and ends inside an escape, which the tails below
                # do not finish: its completion, one parse each
                done = self._completer
                for y in np.flatnonzero(cand & unsafe & (table[: self._n] >= 8)).tolist():
                    end = ends.get(int(table[y]))
                    if end is not None and done.accepts(matcher, utf8, (y, *end)):
                        keep[y] = 1
                        heirs.setdefault(y, end)
                cand &= keep ^ 1
                alike = cand & (unsafe ^ 1) & (table[: self._n] == 0) if key else None
                if alike is not None and alike.any():
                    # whole characters that spell no listed name, not certified: one parser
                    # state after each (the docstring of _inside_string), so one completion
                    # found after the first is one after every one (most of the vocabulary
                    # at a key: 49k searches, or none)
                    first = int(np.argmax(alike))
                    found = self._closed(state, first, room, step)
                    if found is None:
                        found = self._searched(state, first, room, step)
                    if found is not None:
                        keep |= alike
                        shared = entry.shared
                        found_by = {**shared.witnesses, 0: found}
                        entry.shared = SharedHeirs(shared.ids | alike, found_by, shared.keys)
                    cand &= alike ^ 1
                if used is not witness:  # (the others: the completion it was asked with)
                    tails = self._tails(used, room)
        pool = cand.view(np.bool_).nonzero()[0]  # (a 0/1 byte array: as bool, ~6× faster)
        followers: list[tuple[int, np.ndarray]] = []
        if witness is not None and utf8 == 0 and len(pool) >= _CLASSES_FROM:
            # inside a string a pattern or its length bounds: one parse per reader state; a
            # group that parse does not certify is tested by its first member alone
            followers = self._string_classes(check, pool, witness)
            pool = pool[keep[pool] == 0]
            if followers:
                following = np.zeros(self._n, dtype=bool)
                for _, members in followers:
                    following[members] = True
                pool = pool[~following[pool]]
        # ^ what no test has certified yet: the candidates of what follows
        afters = self._utf8_next[utf8, pool]
        probed = np.zeros(self._n, dtype=bool)  # where the probe said whether y then the tail fits
        suffix = self._text(tails[0]) if 0 in tails and len(pool) >= _PROBE_FROM else None
        if (suffix is not None and len(suffix) <= _PROBE_BYTES
                and self._probe_definition is not None):  # fmt: skip
            neutral = self._probe(state, suffix, len(pool), len(tails[0]))
            if neutral is not None:  # (else: parsed one by one below)
                whole = pool[afters == 0]
                keep[whole[neutral[whole] == 1]] = 1
                probed[whole] = True
                entry.shared = SharedHeirs(neutral, {0: tails[0]}, self._utf8_next[utf8])
        text = self._text(witness)
        open_ = keep[pool] == 0
        uncertified = pool[open_]
        # escapes and tokens that end inside a character last (each writes in two tokens or
        # more what another writes in one: inside a key, hundreds of them came before the
        # rest of a listed name and spent the work), then whitespace (a layout admits many
        # spellings of it at each place, all optional: they rarely shorten a completion),
        # then the fewest bytes first (a bracket, a quote, a key's first letters: what
        # structure a token starts, before what it writes)
        tok = self._tokenizer
        partial = tok.backslashed[uncertified] | (afters[open_] != 0)
        uncertified = uncertified[np.lexsort((tok.sizes[uncertified],
                                              tok.spaces_only[uncertified], partial))]  # fmt: skip
        if len(uncertified):  # the tail, the splices that match y to the witness: a few parses
            self._matched(check, text, uncertified, tails, probed)
        hints = self._memos[state].hints
        parent = None if hints is None else hints.get(room + 1)
        for y, found in () if parent is None else parent.heirs.items():
            # what the parent's check one token earlier found for the same token (e.g. where
            # y closes a string: the content since changes nothing after it): one parse
            if (not keep[y] and bits[y] and len(found) <= room
                    and done.accepts(matcher, utf8, (y, *found))):  # fmt: skip
                keep[y] = 1
                heirs.setdefault(y, tuple(found))  # inherited, like a tail
        uncertified = uncertified[keep[uncertified] == 0]
        splices = self._splices(state, room, text)
        if splices and len(uncertified):  # a parse per splice, up to _SPLICE_TRIES a call
            tries = None if step is None else step.part(_SPLICE_TRIES)
            for y in uncertified.tolist():
                found = self._spliced(state, y, room, text, splices, tries)
                if found is not None:
                    keep[y] = 1
                    heirs.setdefault(y, found)
                elif tries is not None and not tries.left:
                    break
            uncertified = uncertified[keep[uncertified] == 0]
        if len(uncertified) > _PREFIXES_FROM and self._closer is not None:
            # more than the closings below reach: what begins one of the state's own first
            self._closing_prefixes(check, uncertified)
            uncertified = uncertified[keep[uncertified] == 0]
        if len(uncertified) and self._closer is not None:  # a closing each: a parse, no search
            tries = None if step is None else step.part(_CLOSE_CREDIT)
            last: tuple[int, ...] | None = None  # (alike tokens close alike: one parse first)
            for y in uncertified.tolist():
                if tries is not None and tries.done:
                    break
                before = 0 if tries is None else tries.spent
                if last is not None and done.accepts(matcher, utf8, (y, *last)):
                    keep[y] = 1
                    heirs.setdefault(y, last)
                    continue
                found = self._closed(state, y, room, tries)
                if found is not None:
                    last = found
                    keep[y] = 1
                    heirs.setdefault(y, found)
                    if tries is not None:
                        tries.left += tries.spent - before + _MATCH_EARN
            uncertified = uncertified[keep[uncertified] == 0]
        found_texts: list[bytes] = []  # what the searches below found, y's bytes included
        # by what a token writes after its leading content (`",` of `:",` and `)",`): what
        # the search from the first such token found, which the others try with one parse
        ends: dict[bytes, tuple[int, ...]] = {}
        spelled = self._vocab.token_bytes
        ended = self._ended_groups(state) if len(uncertified) else None
        failed: set[Any] = set()  # the groups whose first member found no completion
        for y in uncertified.tolist():  # in that order, until the work is spent
            if step is not None and step.done:
                break  # (the rest are excluded: sound, perhaps not every member)
            plain = int(self._tokenizer.plain_lengths[y])
            end = spelled[y][plain:] if plain else b""
            group = None if ended is None else ended(spelled[y][:plain], end)
            if group is not None and group in failed:
                continue  # (the same text after it as the first's: the same answer)
            found = None
            if (end in ends and spend(step)
                    and done.accepts(matcher, utf8, (y, *ends[end]))):  # fmt: skip
                found = ends[end]
            if found is None:
                found = self._continued(state, y, room, found_texts, step)
            if found is None:
                found = self._searched(state, y, room, step)
                if found is not None:
                    found_texts.append(spelled[y] + self._text(found))
                    if end:
                        ends.setdefault(end, found)
            if found is not None:
                keep[y] = 1
                heirs.setdefault(y, found)
            elif group is not None:
                failed.add(group)
        if followers:
            self._follow(check, entry, followers)
        return keep

    def _follow(
        self, check: _Check, entry: RoomCheck, followers: list[tuple[int, np.ndarray]]
    ) -> None:
        """Each string class that its first parse did not certify takes its first member's
        answer (:meth:`_string_classes`: the same states of the reader, the same strings
        finish them): kept with the completion found for it, else excluded."""
        keep, heirs = check.keep, check.heirs
        classes = entry.classes
        ids = np.zeros(self._n, dtype=np.uint8) if classes is None else classes.ids.copy()
        keys = np.full(self._n, -1) if classes is None else classes.keys.copy()
        found_by = {} if classes is None else dict(classes.witnesses)
        key = max(found_by, default=-1)
        for first, members in followers:
            found = heirs.get(first) if keep[first] else None
            shared = entry.shared
            if keep[first] and found is None and shared is not None and shared.ids[first]:
                found = shared.witnesses.get(int(shared.keys[first]))
            if found is None:
                continue  # (excluded with it)
            key += 1
            keep[members], ids[members], keys[members], found_by[key] = 1, 1, key, found
        entry.classes = SharedHeirs(ids, found_by, keys)

    def _ended_groups(self, state: PushdownState) -> Callable[[bytes, bytes], Any] | None:
        """Inside a string (a key or a value, at a character boundary) that the cursor's
        string reader reads (:meth:`~hf_fvo.grammar.schema.closer.JsonCursor.string_reader`:
        two texts that leave it the same states are finished by the same strings): per
        token that writes content (``content``: plain printable ASCII) then closes the
        string (``end``: its bytes from the quote on), a key naming what follows it — the
        reader's states after the content, and the end. Tokens of one key leave the text
        with the same continuations, so the completions the rule finds after one are those
        after every other; ``None`` for a token not of that kind, or where no reader applies.
        (At ``{"alternate`` in a free object, ``"``, ``."`` and ``)"`` are one group.)"""
        if state._utf8 != 0:
            return None
        cursor = self._cursor(state)
        read = None if cursor is None else cursor.string_reader()
        if read is None:
            return None
        reader, states = read
        counted = getattr(reader, "counts_characters", False)

        def group(content: bytes, end: bytes) -> Any:
            if not end.startswith(b'"'):
                return None
            text = content.decode("ascii")  # (plain: printable ASCII)
            after = reader.run(states, "a" * len(text) if counted else text)
            return (after, end) if after else None

        return group

    def _closed(
        self, state: PushdownState, y: int | None, room: int, work: Work | None = None
    ) -> tuple[int, ...] | None:
        """y (``None``: nothing) then a closing the schema writes
        (:meth:`~hf_fvo.grammar.schema.closer.JsonCursor.closings`: the lexeme finished, the
        required keys and items each open container still needs, then its close), in the
        fewest tokens, the first that fits in ``room`` and that the parser accepts: a
        completion built, not searched (after ``{"author`` in a schema whose ``author`` is a
        string or an object and whose other keys are free, a search finds none in 12 s; the
        schema writes ``":"a","manifest":{…}}``). Each call spends one of ``work`` (its
        closings, at most ``_CLOSINGS``, are written and parsed for that): one for the call,
        ``_CLOSING`` per closing written (the schema cursor's Python costs about as many
        parses) and one per ``_SPELLED`` bytes of it (its fewest tokens: ~1 µs a byte), and one
        per parse."""
        cursor = self._cursor(state)
        if cursor is None or not spend(work):
            return None
        head: tuple[int, ...] = ()
        if y is not None:
            head = (y,)
            cursor = cursor.feed(self._vocab.token_bytes[y])
            if cursor is None:
                return None
        done = self._completer
        for text in cursor.each_closing_bytes():
            if not spend(work, _CLOSING + len(text) // _SPELLED):  # (a closing written, spelled)
                return None
            rest = self._fewest(text)
            if rest is None or len(rest) > room:
                continue
            if not spend(work):
                return None
            if done.accepts(state._matcher, state._utf8, (*head, *rest)):
                return Loose(rest)
        return None

    def _cursor(self, state: PushdownState) -> Any:
        """The schema's :class:`~hf_fvo.grammar.schema.closer.JsonCursor` after ``state``'s
        text (``None``: no schema, or the text is not JSON): its parent's fed one token where
        that is kept, else read from the start; kept by path (a pure function of it)."""
        if self._closer is None:
            return None
        cursors, path = self._cursors, state._path
        if path in cursors:
            return cursors[path]
        if len(cursors) >= _CURSORS:
            cursors.clear()
        start = cursors.get(())
        if start is None:
            start = cursors[()] = self._closer(cost=self._cost, finish=self._finish)
        parent = cursors.get(path[:-1]) if path else None
        if parent is not None:
            cursor = parent.feed(self._vocab.token_bytes[path[-1]])
        else:
            spelled = self._vocab.token_bytes
            cursor = start.feed(b"".join(spelled[t] for t in path)) if path else start
        cursors[path] = cursor
        return cursor

    def _cost(self, text: str) -> int:
        """Tokens a closing's value takes (its fewest; unspellable: past any room)."""
        found = self._fewest(text.encode())
        return len(text) + (1 << 16) if found is None else len(found)

    def _finish(self, escape: str) -> str | None:
        """The text that finishes a begun escape in the fewest tokens (in a free string: the
        string content automaton's fill; ``None`` where it has none)."""
        state = content_state(escape.encode())
        fill = self._tokenizer.content_fill.get(state) if state >= 8 else None
        return None if fill is None else self._text(fill).decode()

    def _fewest(self, text: bytes) -> tuple[int, ...] | None:
        """:meth:`fewest_tokens` of ``text``, kept (closings share their texts)."""
        known = self._spellings
        if text not in known:
            if len(known) >= _CURSORS:
                known.clear()
            known[text] = self._completer.fewest_tokens(text)
        return known[text]

    def _continued(
        self, state: PushdownState, y: int, room: int, texts: list[bytes], work: Work | None
    ) -> tuple[int, ...] | None:
        """The rest of a completion an earlier search of this check found (``texts``: the
        searched token's bytes, then its completion's), where y spells a beginning of it and
        the rest fits: the searches go from the fewest bytes up, so `` t`` is searched and
        `` tr``, `` tru``, `` true`` follow it with one parse each. Each parse spends one of
        ``work``."""
        head = self._vocab.token_bytes[y]
        done = self._completer
        for text in reversed(texts[-_CONTINUED:]):
            if len(text) <= len(head) or not text.startswith(head):
                continue
            if not spend(work):
                return None
            rest = done.fewest_tokens(text[len(head) :])
            if (rest is not None and len(rest) <= room
                    and done.accepts(state._matcher, state._utf8, (y, *rest))):  # fmt: skip
                return Loose(rest)
        return None

    def _witness_prefixes(self, check: _Check, witness: tuple[int, ...]) -> None:
        """Keep the tokens that spell a beginning of the witness's bytes when the rest, in the
        fewest tokens, fits."""
        state, room, keep, heirs, work = check
        if len(witness) - 1 <= room:
            keep[witness[0]] = 1
            heirs.setdefault(witness[0], witness[1:])
        text = self._text(witness)
        for j, y in self._beginnings(text, self._bits(state), keep):
            if not spend(work):
                return
            rest = self._spelled_rest(state, y, text, j, room)
            if rest is not None:
                keep[y] = 1
                heirs.setdefault(y, rest)

    def _beginnings(
        self, text: bytes, among: np.ndarray, keep: np.ndarray
    ) -> Iterator[tuple[int, int]]:
        """(j, y) for each token y < n that spells ``text[:j]`` exactly, is among ``among``
        (0/1 per id) and is not kept yet, shortest beginnings first."""
        done = self._completer
        for j in range(1, min(len(text), done.longest) + 1):
            for y in done.spellings.get(text[:j], ()):
                if y < self._n and among[y] and not keep[y]:
                    yield j, y

    def _closing_prefixes(self, check: _Check, cand: np.ndarray) -> None:
        """Keep the candidates (``cand``, in order) that spell a beginning of one of the state's
        own closings (the schema's, nothing written first: :meth:`_closed`) when the rest, in
        the fewest tokens, fits: where the witness closes a key the schema allows, the tokens
        that go on to another (``meta`` after ``{"_``, where ``_meta`` is a pattern's key and
        ``^\\w$`` takes ``_``), an enum's other values. Each closing written spends
        ``_CLOSING`` of the check's work, each parse one."""
        state, room, keep, heirs, work = check
        cursor = self._cursor(state)
        if cursor is None:
            return
        done = self._completer
        among = np.zeros(self._n, dtype=np.uint8)
        among[cand] = 1  # (the candidates are admissible: a subset of the parser's mask)
        for n, text in enumerate(cursor.each_closing_bytes()):
            if n >= _PREFIX_CLOSINGS or not spend(work, _CLOSING):
                return
            for j, y in self._beginnings(text, among, keep):
                rest = self._fewest(text[j:])
                if rest is None or len(rest) > room:
                    continue
                if not spend(work):
                    return
                if done.accepts(state._matcher, state._utf8, (y, *rest)):
                    keep[y] = 1
                    heirs.setdefault(y, Loose(rest))

    def _probe(
        self, state: PushdownState, suffix: bytes, asked: int | None = None, tail: int = 1
    ) -> np.ndarray | None:
        """For every token y at once: whether y then ``suffix`` completes a member from
        ``state`` (one mask per part of the probe vocabulary, its parser replayed to
        ``state``); ``None`` where the vocabulary is not kept and ``asked`` candidates are
        cheaper to parse one by one (:meth:`PushdownTokenizer.probe`)."""
        import llguidance

        parts = self._tokenizer.probe(suffix, asked, tail)
        if parts is None:
            return None
        neutral = np.zeros(self._n, dtype=np.uint8)
        for vocab, ids, roots in parts:
            root = roots.get(self._probe_definition)
            if root is None:
                root = llguidance.LLMatcher(vocab, self._probe_definition, log_level=0,
                                            limits=limits())  # fmt: skip
                if root.is_error():
                    raise GrammarError(
                        f"internal: the probe grammar failed: {root.get_error()[:200]}"
                    )
                roots[self._probe_definition] = root
            matcher = root.deep_copy()
            if state._path and not matcher.consume_tokens(list(state._path)):
                raise GrammarError("internal: the probe parser refused a path the grammar allowed")
            width = self._n + len(ids)
            words = np.zeros((width + 31) // 32, dtype=np.uint32)
            matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
            bits = np.unpackbits(words.view(np.uint8), count=width, bitorder="little")
            neutral[ids] = bits[self._n :]
        return neutral

    def _inside_string(
        self,
        state: PushdownState,
        witness: tuple[int, ...],
        counts: Callable[[tuple[int, ...]], list[int]],
        room: int,
        work: Work | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None, tuple[int, ...], bool] | None:
        """Whether ``state`` is at a character boundary inside one of hf_fvo's string lexemes
        (``STRING``, ``STRING_m_M`` of an own-lexeme JSON grammar) in every reading that the
        marked grammar (:func:`marked_definition`) keeps after its marker byte, and the witness
        completes from there (the marked parser accepts marker, witness, EOS); if so, per
        number of characters c up to the largest of ``counts``, whether c markers then the
        witness complete (``None``: not inside one; without a counted lexeme ``counts`` is not
        needed: every number fits).

        Then every token y whose bytes are string content (:attr:`PushdownTokenizer.
        content_after`) that begin c such characters, and that the mask admits, has a
        completion: y, the tokens finishing its character or escape if it ends inside one
        (``fill``), then the witness. After the c markers only string readings live, each
        inside its content with c more characters; after y·fill the same readings live in the
        same lexer state (a lexeme's content loops on every character alike and counts them
        alike; no lexeme ends inside content), beside perhaps others, and more readings only
        add completions. The marked grammar says what the grammar says on text without the
        marker, so y·fill·witness is a member. Where only the uncounted ``STRING`` is marked,
        one marker stands for any number. Where the witness writes characters before it closes
        the string, the schema's closing (:meth:`_closed`) and the rest of it and of the
        witness from the closing quote (:meth:`_after_content`) are asked too (each verified
        by the marked parser), and the completion that certifies more numbers of characters
        is used.
        tests/grammar/test_budget.py checks certified tokens against a parse per token along
        the development set's valid instances.

        Where no string reading takes the marker, the lexemes of an object's other keys
        (``KEY_EXTRA``: a free string that is none of the listed names) are asked with their
        own marker (:attr:`PushdownTokenizer.key_marker`), and the second array says which
        content tokens that certifies nothing for (1: the rest of the rule tries them): those
        that may still spell a listed name from here (the key's text so far then y a prefix
        of one; any with a backslash). For the others the excluded names are out of reach
        (their part of the lexeme is in its dead state, as after the marker), so y·fill
        reaches the marker's lexer state, and the argument above holds (the lexeme is not
        counted: every number fits). Only the certified are settled there: a key's witness
        may finish a listed name, and a token it does not certify may close the key sooner.
        The last item says so (``True``: a key): every whole content token that the second
        array leaves out reaches the marker's lexer state, one parser state for all of them,
        so one completion found after one of them is a completion after each.

        Where neither takes its marker, a string leaf of a ``pattern`` alone is asked with a
        third (:attr:`PushdownTokenizer.pattern_marker`): the marked grammar also lexes such a
        string as free text, a raw match of the pattern, free text (none after a final ``$``),
        its free characters raw or the marker. If the markers then the witness complete, the
        witness's text holds a whole raw match after the markers (the marker is none of its
        characters), or the string's text before them did; the leaf matches the pattern
        anywhere in its text (llguidance's JSON mode, as JSON Schema reads a pattern), so y's
        raw characters in the markers' place leave that match, and the string, a member's.
        Tokens with a backslash or that end inside a character are not certified (the second
        array), and only the certified are settled (a token may finish the match sooner).
        Where the witness finishes a match the string began, the schema's closing within
        ``room`` (:meth:`_closed`: a whole match, then the rest) is asked instead; the third
        item is the completion the markers were asked with. A pattern anchored at the start
        is not marked: a token outside its characters would leave another reading than the
        one the markers were certified in (``anyOf`` of ``^[a-z]+$`` and ``^[0-9]{9}$``)."""
        if self._marked is None or state._utf8 != 0:
            return None
        matcher = self._marked.parser(self._memos[state], required=False)
        if matcher is None:
            return None
        tok, eos = self._tokenizer, self._eos[0]

        def completes(marker: int, c: int, used: tuple[int, ...]) -> bool:
            seq = [marker] * c + [*used, eos]
            return spend(work) and matcher.validate_tokens(seq) == len(seq)

        def by_count(marker: int, used: tuple[int, ...], counted: bool) -> np.ndarray:
            """Per number of characters c (up to the largest ``counts(used)``), whether c
            markers then ``used`` complete; every c ≥ 1 where nothing counts them."""
            asked = counts(used)
            fits = np.zeros(max(asked, default=1) + 1, dtype=bool)
            fits[1] = True  # (asked before)
            for c in asked:
                if c > 1:
                    fits[c] = not counted or completes(marker, c, used)
            return fits

        def takes(marker: Any) -> bool:  # (one token: whether such a lexeme is open here)
            return (marker is not None and spend(work)
                    and matcher.validate_tokens([marker[1]]) == 1)  # fmt: skip

        if takes(tok.marker) and completes(tok.marker[1], 1, witness):
            fits, used = by_count(tok.marker[1], witness, self._counted), witness
            if not self._text(witness).startswith(b'"'):
                # (a witness that writes characters first leaves fewer to a counted string's
                # tokens, and its characters make every token's completion longer: what
                # closes the string now, the schema's closing or the witness's own rest
                # after its characters, where it certifies more)
                closing = tuple(self._closed(state, None, room + 1, work) or ())
                best = fits[counts(witness)].sum()
                for other_used in (closing, self._after_content(closing),
                                   self._after_content(witness)):  # fmt: skip
                    if (other_used and self._text(other_used).startswith(b'"')
                            and completes(tok.marker[1], 1, other_used)):  # fmt: skip
                        other = by_count(tok.marker[1], other_used, self._counted)
                        certified = other[counts(other_used)].sum()
                        if certified > best or (certified == best and len(other_used) < len(used)):
                            # (as many counts, in fewer tokens: a token that ends inside a
                            # character, its fill, then this fit where the longer did not)
                            fits, used, best = other, other_used, certified
            return fits, None, used, False
        if self._key_names and takes(tok.key_marker) and completes(tok.key_marker[1], 1, witness):
            unsafe = self._unsafe_keys(state)
            if unsafe is None:
                return None
            return by_count(tok.key_marker[1], witness, False), unsafe, witness, True
        pattern = tok.pattern_marker
        if not takes(pattern):
            return None
        used = witness
        if not completes(pattern[1], 1, used):  # (the witness may finish a match begun)
            closing = tuple(self._closed(state, None, room, work) or ())
            used = closing if closing and completes(pattern[1], 1, closing) else None
            rest = b"" if used is not None else self._text(self._after_content(closing or witness))
            for piece in self._written() if rest else ():
                # (the closing finishes that match too: a whole match of one of the schema's
                # patterns, then the rest from the closing quote)
                found = self._fewest(piece + rest)
                if found is not None and len(found) <= room and completes(pattern[1], 1, found):
                    used = found
                    break
            if used is None:
                return None
        # (raw characters, whole: the marked lexeme's free text)
        return by_count(pattern[1], used, True), tok.not_raw_whole, used, False

    def _after_content(self, completion: tuple[int, ...]) -> tuple[int, ...]:
        """The rest of ``completion`` (which begins inside a string) from the quote that closes
        the string, in the fewest tokens (``()`` where it writes no character before it, or
        closes none): a completion after those characters, or others in their place, for
        :meth:`_inside_string` to verify."""
        text, i = self._text(completion), 0
        while i < len(text) and text[i] != 0x22:  # (an escape's second byte is never the end)
            i += 2 if text[i] == 0x5C else 1
        if i == 0 or i >= len(text):
            return ()
        return tuple(self._fewest(text[i:]) or ())

    def _unsafe_keys(self, state: PushdownState) -> np.ndarray | None:
        """Inside a key, per token id (0/1): whether y may still make the key one of the names
        the other keys' lexemes exclude: y has a backslash (an escape spells any character),
        or the key's text so far (its bytes since the opening quote, decoded) then y's bytes
        begin one of the names. ``None`` where that text is not read (it holds an escaped
        quote)."""
        spelled, tail, quote = self._vocab.token_bytes, b"", -1
        for t in reversed(state._path):  # (back to the last quote and the byte before it)
            tail = spelled[t] + tail
            quote = tail.rfind(b'"')
            if quote > 0:
                break
        if quote <= 0 or tail[quote - 1 : quote] == b"\\":
            return None  # (no byte before the quote read, or it may be escaped)
        try:
            written = json.loads(b'"' + tail[quote + 1 :] + b'"').encode()
        except ValueError:
            return None
        unsafe = self._tokenizer.backslashed.copy()
        done = self._completer
        for name in self._key_names:
            if not name.startswith(written):
                continue
            rest = name[len(written) :]
            for j in range(1, min(len(rest), done.longest) + 1):
                for y in done.spellings.get(rest[:j], ()):
                    if y < self._n:
                        unsafe[y] = 1
        return unsafe

    def _replaced(self, check: _Check, text: bytes, cand: np.ndarray) -> None:
        """Keep the content tokens that, written in place of the witness's first characters,
        leave the rest of the witness a completion: where the witness (``text``) begins with
        c plain characters inside a counted string lexeme (``STRING_m_M``), c markers then its
        bytes from c completing the marked grammar (:meth:`_inside_string`'s argument: the
        markers stand for any c characters of the string's content) certify every candidate
        in ``cand`` that spells c whole characters of content, with that rest as its
        witness. One parse per c: a string of exactly three characters whose witness wrote
        ``]]]`` admits ``USD`` (a fixed length leaves no room to add characters to the
        witness's, so :meth:`_inside_string` certifies none there)."""
        state, room, keep, heirs, work = check
        plain = plain_length(text)
        if not plain:
            return
        tok = self._tokenizer
        chars = tok.content_chars
        whole = (tok.content_after == 0) & (cand == 1) & (keep == 0) & (chars > 0)
        counts = np.bincount(chars[whole], minlength=plain + 1)[1 : plain + 1]
        if not counts.any():
            return
        matcher = self._marked.parser(self._memos[state], required=False)
        if matcher is None:
            return
        marker, rests = tok.marker[1], self._suffixes(state, text)
        for c in (np.flatnonzero(counts) + 1).tolist():
            rest = rests[c]
            if rest is None or len(rest) > room:
                continue
            if not spend(work):
                return
            seq = [marker] * c + [*rest, self._eos[0]]
            if matcher.validate_tokens(seq) != len(seq):
                continue
            hit = np.flatnonzero(whole & (chars == c))
            keep[hit] = 1
            for y in hit.tolist():
                heirs.setdefault(y, rest)

    def _inherited(self, state: PushdownState, token: int) -> Any:
        """The witness a child starts with: what an admissible() call found for it, else the
        rest of its parent's witness when ``token`` begins it."""
        memo = self._memos[state]
        for room in sorted(memo.rooms):
            entry = memo.rooms[room]
            if token in entry.heirs:
                return entry.heirs[token]
            for shared in (entry.shared, entry.classes):
                if shared is not None and shared.ids[token]:
                    found = shared.witnesses.get(int(shared.keys[token]))
                    if found is not None:
                        return found
        witness = memo.witness
        if witness and witness is not UNKNOWN and witness[0] == token:
            return witness[1:]
        return UNKNOWN

    def parser_only(self, state: PushdownState, remaining: int | None) -> bool:
        """Whether :meth:`admissible` is the parser's mask, unchanged, at ``state``."""
        if state is self._terminal:
            return False
        if remaining is None:
            return True
        if remaining <= 1 or (state is self._initial and self._start_tokens + 1 > remaining):
            return False
        return self._far(state, remaining - 2)

    def _far(self, state: PushdownState, room: int) -> bool:
        """Whether every token the parser admits at ``state`` leads to a state that completes
        within ``room`` single-byte tokens, shown without a check: the schema's closing bound
        (every prefix of a member), or where ``reach`` was asked, the state's own (its
        :class:`~hf_fvo.grammar.schema.closer.JsonCursor`'s
        :meth:`~hf_fvo.grammar.schema.closer.JsonCursor.reach` past one token)."""
        if self._closing is not None and room >= self._closing:
            return True
        if self._depth is None or room < 0:
            return False
        cursor = self._cursor(state)
        bound = None if cursor is None else cursor.reach(self._depth)
        return bound is not None and room >= bound

    def __getstate__(self) -> dict[str, Any]:
        if self._lower is not None and self._lower_value is not None and not self._lower_whole:
            # a bound that stopped at a budget's goal is not the whole one, which the copy
            # (without the compiler behind it) could not finish: finish it now
            self._lower_value, self._lower_whole = self._lower(None) or 0, True
        return {
            "closing": self._closing,
            "shortest": self._shortest,
            "member": self._member,
            "texts": self._written() if self._grammar is not None else (),
            "closer": self._closer,
            "raw": self._raw,
            "reach": self._reach,
            "ends": self._ends,
            "lower": self._lower_value,  # the bound if computed (not the compiler behind it)
            "checked_lower": self.checked_lower,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["closing"], state["shortest"], state["member"], None, None,
                      state["closer"], state["raw"],
                      checked_lower=state.get("checked_lower", False), reach=state["reach"],
                      ends=state.get("ends"))  # fmt: skip
        self._pieces = tuple(state["texts"])
        self._lower_value, self._lower_whole = state["lower"], True

    def __repr__(self) -> str:
        return f"CertifiedBudget({'unattached' if self._grammar is None else self._grammar!r})"
