"""Compile a regex into a :class:`TokenAutomaton` through outlines-core, exactly.

outlines-core 0.2.14 omits token t at state s when a proper prefix of t's bytes (the empty one
included) completes the regex while all of t leads to a live non-accepting state (fixed upstream,
not released). The workaround compiles ``(?:R)σ`` for a sentinel character σ, adds one fake token
spelling σ, and calls s accepting iff the fake token takes s to a final state: for any text w,
``wσ ∈ Rσ ⇔ w ∈ R``. A final state of ``Rσ`` is only ever passed through by a text containing σ,
so on σ-free texts the index is complete. σ is a Unicode noncharacter (reserved for internal use)
that no token contains, and the language is restricted to σ-free texts by a product with a KMP
automaton over σ's bytes (σ could otherwise be spelled by byte tokens, e.g. inside ``[^a]+``).
Dead states are then trimmed so every state can still accept.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from hf_fvo.errors import EmptyLanguageError, GrammarError, GrammarTooLargeError, InvalidRegexError
from hf_fvo.grammar.automaton.tables import TokenAutomaton
from hf_fvo.grammar.vocabulary import TokenVocabulary
from hf_fvo.lru import LRU

__all__ = ["DEFAULT_MAX_STATES", "AutomatonTokenizer", "assemble", "compile_automaton"]

DEFAULT_MAX_STATES = 20_000
PROBE_TIMEOUT_S = 30.0  # the byte-level probe of a sane grammar takes milliseconds
COMPILE_TIMEOUT_S = 300.0
_UNICODE_CLASS = re.compile(r"\\[pP](?:\{[^}]*\}|[A-Za-z])")
T = TypeVar("T")


class AutomatonTokenizer:
    """What the outlines-core build needs of one tokenizer, computed once and reused by every
    compile: the sentinel candidates (characters no token contains) and, per sentinel, the
    outlines-core ``Vocabulary`` with the sentinel's fake token, the σ-avoidance steps and the
    characters each token adds. A :class:`~hf_fvo.grammar.GrammarCompiler` holds one.

    Example:
        >>> from hf_fvo.grammar.automaton.build import AutomatonTokenizer
        >>> from hf_fvo.grammar.vocabulary import BRACKETS
        >>> sigma, _, _, lengths = AutomatonTokenizer(BRACKETS).for_regex("[()]*")
        >>> len(sigma.encode()), lengths[:2].tolist()  # a 3-byte noncharacter; 1 char each
        (3, [1, 1])
    """

    def __init__(self, vocab: TokenVocabulary) -> None:
        self.vocab = vocab
        self._candidates: list[str] | None = None
        self._per_sentinel: LRU[str, tuple[str, Any, np.ndarray, np.ndarray]] = LRU(4)

    def for_regex(self, regex: str) -> tuple[str, Any, np.ndarray, np.ndarray]:
        """(sentinel σ for ``regex``, outlines-core Vocabulary with σ's fake token, σ-avoidance
        steps, char lengths)."""
        from outlines_core import Vocabulary

        if self._candidates is None:
            self._candidates = _sentinels(self.vocab)
        sigma = _sentinel(self._candidates, regex)
        vocab = self.vocab

        def build() -> tuple[str, Any, np.ndarray, np.ndarray]:
            table = vocab.byte_map()
            table[sigma.encode()] = [len(vocab)]  # the fake token
            return (
                sigma,
                Vocabulary(vocab.eos_token_ids[0], table),
                _avoidance_steps(vocab, sigma),
                _char_lengths(vocab),
            )

        return self._per_sentinel.get_or_build(sigma, build)


@dataclass(frozen=True)
class _Source:
    """The regex being compiled, how errors name it, and who names what is wrong with it."""

    regex: str
    description: str
    diagnose: Callable[[str], str | None] | None = None


def compile_automaton(
    regex: str,
    description: str,
    tokenizer: AutomatonTokenizer,
    vocab_size: int,
    *,
    max_length: int | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    diagnose: Callable[[str], str | None] | None = None,
    timeout: float = COMPILE_TIMEOUT_S,
) -> TokenAutomaton:
    """The token automaton of ``regex`` (matched in full) over ``tokenizer``'s token bytes.

    Args:
        regex: Rust ``regex`` syntax.
        description: Names the grammar in errors and in :attr:`TokenAutomaton.source`.
        tokenizer: The tokenizer's build tables.
        vocab_size: Length of the masks (at least the vocabulary's length).
        max_length: Bound on the characters of the text.
        max_states: Refuse grammars whose byte automaton has more states.
        diagnose: Says what is wrong with a regex outlines-core refuses (outlines-core's own
            messages name no feature), or ``None``.
        timeout: Seconds the token-level index build may take (then GrammarTooLargeError).

    Raises:
        InvalidRegexError, EmptyLanguageError, GrammarTooLargeError: as the names say.

    Example:
        >>> from hf_fvo.grammar.automaton.build import AutomatonTokenizer, compile_automaton
        >>> from hf_fvo.grammar.vocabulary import BRACKETS
        >>> compile_automaton("(?:[(][)])*", "pairs", AutomatonTokenizer(BRACKETS), 4).num_states
        3
    """
    from outlines_core import Index, Vocabulary

    source = _Source(regex, description, diagnose)
    vocab = tokenizer.vocab
    sigma, outlines_vocab, avoid, lengths = tokenizer.for_regex(regex)
    wrapped = f"(?:{regex}){sigma}"
    fake_id = len(vocab)
    limit = max_states
    _check_repetition_size(source, limit)
    byte_vocab = Vocabulary(256, {bytes([b]): [b] for b in range(256)})
    # The byte-level automaton is cheap to build and bounds the token automaton's size, so a
    # blow-up (`a{100000}`, `(a|b)*a(a|b){20}`) is refused before the expensive build.
    probe = _outlines(lambda: Index(wrapped, byte_vocab), source, "probe", PROBE_TIMEOUT_S)
    n_byte_states = len(probe.get_transitions())
    if n_byte_states > limit:
        raise GrammarTooLargeError(
            f"{description} needs {n_byte_states} automaton states (limit {limit}); "
            "simplify the grammar or raise max_states"
        )
    index = _outlines(lambda: Index(wrapped, outlines_vocab), source, "index", timeout)
    edges, init, accepting = _edges_from_index(index, fake_id, vocab.eos_token_ids)
    # On texts free of σ the wrapped index is complete (no final state is ever passed through),
    # so the language is restricted to them: σ is a noncharacter, never legitimate output.
    edges, init, accepting = _product(
        edges, init, accepting, lambda p, toks: avoid[p, toks], limit, "excluding the sentinel"
    )
    if max_length is not None:

        def count(used: int, toks: np.ndarray) -> np.ndarray:
            total = used + lengths[toks]
            return np.where(total <= max_length, total, -1)

        edges, init, accepting = _product(
            edges, init, accepting, count, limit, f"bounding the length to {max_length}"
        )
        description += f" max_length={max_length}"
    bound = f" within max_length={max_length}" if max_length is not None else ""
    automaton = assemble(
        edges, init, accepting, vocab.eos_token_ids, vocab_size, description, sigma,
        empty_reason=f"no token sequence of this tokenizer spells a member{bound}",
        fingerprint=vocab.fingerprint,
    )  # fmt: skip
    automaton._vocabulary = vocab  # the token bytes, for drafts that propose spelled-out text
    return automaton


def _check_repetition_size(source: _Source, limit: int) -> None:
    """Refuse counted repetitions whose unrolled size alone exceeds the state limit.

    Determinising ``a{100000}`` takes minutes even on a byte vocabulary, so the count is read
    from Python's parse of the pattern first (Unicode classes ``\\p{..}``, which Python lacks,
    count as one character). Patterns Python still cannot parse skip this check.
    """
    pattern = _UNICODE_CLASS.sub("x", source.regex)
    try:
        tree = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, AttributeError, ValueError):
        return
    size = _unrolled_size(tree)
    if size > limit:
        raise GrammarTooLargeError(
            f"{source.description} unrolls to about {size} automaton states (limit {limit}); "
            "simplify the grammar or raise max_states"
        )


def _unrolled_size(tree: Any) -> int:
    total = 0
    for op, arg in tree:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            count = low + 1 if high == re._constants.MAXREPEAT else high  # type: ignore[attr-defined]
            total += max(count, 1) * _unrolled_size(sub)
        elif name == "SUBPATTERN":
            total += _unrolled_size(arg[-1])
        elif name == "BRANCH":
            total += sum(_unrolled_size(b) for b in arg[1])
        elif name in ("ASSERT", "ASSERT_NOT", "ATOMIC_GROUP"):
            total += _unrolled_size(arg[-1])
        else:
            total += 1
    return total


def _outlines(build: Callable[[], T], source: _Source, stage: str, timeout: float) -> T:
    """Run an outlines-core build off the main thread (it releases the GIL), with a timeout."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(build())
        except BaseException as exc:  # pyo3 PanicException derives from BaseException
            error.append(exc)

    worker = threading.Thread(target=target, daemon=True, name="hf_fvo-compile")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise GrammarTooLargeError(
            f"compiling {source.description} took longer than {timeout:.0f}s; simplify it "
            "(the background build is abandoned)"
        )
    if error:
        raise _translate(error[0], source, stage) from error[0]
    return result[0]


def _translate(exc: BaseException, source: _Source, stage: str) -> GrammarError:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "incompatible with the regex" in message:
        if stage == "probe":
            return EmptyLanguageError(f"{source.description} matches no string")
        return EmptyLanguageError(
            f"the tokenizer cannot spell some text that {source.description} requires "
            f"(outlines-core: {message[:160]})"
        )
    if "anchored universal start state" in message:
        return InvalidRegexError(
            f"{source.description}: anchors (^, $, \\A, \\z) are not supported; the whole "
            "text is always matched"
        )
    problem = source.diagnose(source.regex) if source.diagnose else None
    if problem:
        return InvalidRegexError(f"{source.description}: {problem}")
    return InvalidRegexError(f"{source.description} cannot be compiled by outlines-core: {message}")


_SENTINELS = (*range(0xFDD0, 0xFDF0), 0xFFFE, 0xFFFF, *range(0xE000, 0xF900))
_CODE_POINT_ESCAPE = re.compile(
    r"\\(?:x\{([0-9a-fA-F]+)\}|u\{([0-9a-fA-F]+)\}|u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2}))"
)


def _sentinels(vocab: TokenVocabulary) -> list[str]:
    """Characters no token contains, best first: Unicode noncharacters (reserved for internal
    use), then private-use characters."""
    found = []
    for cp in _SENTINELS:
        enc = chr(cp).encode()
        if not any(b and enc in b for b in vocab.token_bytes):
            found.append(chr(cp))
            if len(found) == 8:
                break
    return found


def _sentinel(candidates: Sequence[str], regex: str) -> str:
    """The first candidate the grammar's text does not name (literally or by a code-point
    escape), so that a choice or regex spelling a noncharacter keeps it."""
    named = set(regex)
    for m in _CODE_POINT_ESCAPE.finditer(regex):
        named.add(chr(int(next(g for g in m.groups() if g), 16)))
    for sigma in candidates:
        if sigma not in named:
            return sigma
    raise InvalidRegexError(
        "the grammar names every character hf_fvo can reserve as its internal sentinel "
        f"({', '.join(f'U+{ord(c):04X}' for c in candidates)}); use backend='pushdown'"
    )


def _avoidance_steps(vocab: TokenVocabulary, sigma: str) -> np.ndarray:
    """KMP automaton that forbids σ's bytes in the text: ``steps[p, t]`` is the matched-prefix
    length of σ after token t from progress p, or -1 where t would complete σ."""
    pattern = sigma.encode()
    k = len(pattern)
    fail = [0] * k
    for i in range(1, k):
        j = fail[i - 1]
        while j and pattern[i] != pattern[j]:
            j = fail[j - 1]
        fail[i] = j + 1 if pattern[i] == pattern[j] else 0
    steps = np.zeros((k, len(vocab) + 1), dtype=np.int64)
    touching = set(pattern)
    for t, b in enumerate(vocab.token_bytes):
        if not b:
            continue
        fast = not touching.intersection(b)
        for p in range(k):
            if fast:
                continue  # no byte of σ: progress resets to 0
            q = p
            for x in b:
                while q and x != pattern[q]:
                    q = fail[q - 1]
                if x == pattern[q]:
                    q += 1
                if q == k:
                    q = -1
                    break
            steps[p, t] = q
    return steps


Edges = dict[int, tuple[np.ndarray, np.ndarray]]


def _edges_from_index(
    index: Any, fake_id: int, eos_ids: Sequence[int]
) -> tuple[Edges, int, set[int]]:
    transitions = index.get_transitions()
    finals = set(index.get_final_states())
    skip = np.array(sorted({fake_id, *eos_ids}), dtype=np.int64)
    edges: Edges = {}
    accepting: set[int] = set()
    for s, row in transitions.items():
        if row.get(fake_id) in finals:
            accepting.add(s)
        toks = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
        dsts = np.fromiter(row.values(), dtype=np.int64, count=len(row))
        keep = ~np.isin(toks, skip)
        edges[s] = (toks[keep], dsts[keep])
    return edges, index.get_initial_state(), accepting


def _char_lengths(vocab: TokenVocabulary) -> np.ndarray:
    """Characters each token adds: its bytes that are not UTF-8 continuation bytes."""
    out = np.zeros(len(vocab) + 1, dtype=np.int64)
    for i, b in enumerate(vocab.token_bytes):
        if b:
            out[i] = sum(1 for x in b if x & 0xC0 != 0x80)
    return out


def _product(
    edges: Edges,
    init: int,
    accepting: set[int],
    step: Callable[[int, np.ndarray], np.ndarray],
    limit: int,
    what: str,
) -> tuple[Edges, int, set[int]]:
    """Product with a token-driven counter: state (s, aux) starts at aux 0 and moves to
    ``step(aux, tokens)``; a negative result drops the transition."""
    ids: dict[tuple[int, int], int] = {(init, 0): 0}
    queue = deque([(init, 0)])
    out: Edges = {}
    out_accepting: set[int] = set()
    while queue:
        s, aux = queue.popleft()
        here = ids[(s, aux)]
        if s in accepting:
            out_accepting.add(here)
        toks, dsts = edges.get(s, (np.empty(0, np.int64), np.empty(0, np.int64)))
        new_aux = step(aux, toks)
        ok = new_aux >= 0
        toks, dsts, new_aux = toks[ok], dsts[ok], new_aux[ok]
        pairs = np.stack([dsts, new_aux], axis=1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        mapped = np.empty(len(uniq), dtype=np.int64)
        for k, (d, a) in enumerate(uniq.tolist()):
            if (d, a) not in ids:
                ids[(d, a)] = len(ids)
                queue.append((d, a))
                if len(ids) > limit:
                    raise GrammarTooLargeError(f"{what} needs more than {limit} states")
            mapped[k] = ids[(d, a)]
        out[here] = (toks, mapped[inverse.reshape(-1)])
    return out, 0, out_accepting


def assemble(
    edges: Edges,
    init: int,
    accepting: set[int],
    eos_token_ids: Sequence[int],
    vocab_size: int,
    description: str,
    sigma: str | None = None,
    empty_reason: str = "no token sequence of this tokenizer spells a member",
    fingerprint: str | None = None,
) -> TokenAutomaton:
    """Trim dead and unreachable states, renumber breadth-first, and build the grouped tables.

    ``edges`` maps a state to (tokens, next states); EOS is implied at ``accepting`` states.
    """
    keep = _live_reachable(edges, init, accepting)
    if init not in keep:
        raise EmptyLanguageError(f"{description}: {empty_reason}")
    order = _bfs_order(edges, init, keep)
    max_old = max(max(edges, default=0), max(order))
    for _, dsts in edges.values():
        if len(dsts):
            max_old = max(max_old, int(dsts.max()))
    remap = np.full(max_old + 1, -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    n = len(order) + 1  # + terminal state (after EOS)
    state_ptr = np.zeros(n + 1, dtype=np.int64)
    group_ptr = np.zeros(n + 1, dtype=np.int64)
    token_parts, dst_parts, starts = [], [], []
    total = 0
    for i, old in enumerate(order):
        toks, dsts = edges.get(old, (np.empty(0, np.int64), np.empty(0, np.int64)))
        dsts = remap[dsts]
        ok = dsts >= 0  # drop transitions into trimmed (dead) states
        toks, dsts = toks[ok], dsts[ok]
        by = np.lexsort((toks, dsts))
        toks, dsts = toks[by], dsts[by]
        uniq, first = np.unique(dsts, return_index=True)
        token_parts.append(toks)
        dst_parts.append(uniq)
        starts.extend((total + first).tolist())
        total += len(toks)
        state_ptr[i + 1] = total
        group_ptr[i + 1] = group_ptr[i] + len(uniq)
    state_ptr[n] = total
    group_ptr[n] = group_ptr[n - 1]
    accepting_arr = np.zeros(n, dtype=bool)
    acc = [s for s in accepting if s in keep]
    accepting_arr[remap[acc]] = True
    accepting_arr[n - 1] = True
    empty = np.empty(0, np.int64)
    return TokenAutomaton(
        state_ptr=state_ptr,
        tokens=np.concatenate(token_parts) if token_parts else empty,
        group_ptr=group_ptr,
        group_dst=np.concatenate(dst_parts) if dst_parts else empty,
        group_start=np.asarray([*starts, total], dtype=np.int64),
        accepting=accepting_arr,
        vocab_size=vocab_size,
        eos_token_ids=eos_token_ids,
        source=description,
        reserved_character=sigma,
        tokenizer_fingerprint=fingerprint,
    )


def _live_reachable(edges: Edges, init: int, accepting: set[int]) -> set[int]:
    succ = {s: set(np.unique(d).tolist()) for s, (_, d) in edges.items()}
    reach = {init}
    queue = deque([init])
    while queue:
        for d in succ.get(queue.popleft(), ()):
            if d not in reach:
                reach.add(d)
                queue.append(d)
    preds: dict[int, list[int]] = {}
    for s in reach:
        for d in succ.get(s, ()):
            preds.setdefault(d, []).append(s)
    live = {s for s in accepting if s in reach}
    queue = deque(live)
    while queue:
        for p in preds.get(queue.popleft(), ()):
            if p not in live:
                live.add(p)
                queue.append(p)
    return live


def _bfs_order(edges: Edges, init: int, keep: set[int]) -> list[int]:
    """Deterministic numbering: BFS, successors ordered by the smallest token leading there."""
    order = [init]
    seen = {init}
    i = 0
    while i < len(order):
        toks, dsts = edges.get(order[i], (np.empty(0, np.int64), np.empty(0, np.int64)))
        i += 1
        if not len(toks):
            continue
        by = np.argsort(toks, kind="stable")
        for d in dict.fromkeys(dsts[by].tolist()):
            if d in keep and d not in seen:
                seen.add(d)
                order.append(d)
    return order
