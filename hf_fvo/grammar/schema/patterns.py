"""What the grammar engines compile of a JSON-Schema ``pattern``, and the superset they can.

The engines hf_fvo builds on (llguidance, outlines-core) read Rust regex syntax: no look-around,
no backreferences, and llguidance no ``^``/``$`` inside a pattern. A pattern using them is left
to the final check, the masks keeping :func:`without_assertions` (a superset).

Example:
    >>> from hf_fvo.grammar.schema.patterns import without_assertions
    >>> without_assertions("^(?!x)[a-z]{1,6}$")
    '^[a-z]{1,6}$'
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "inner_anchor",
    "marked_content",
    "python_tree",
    "raw_matches",
    "regex_problem",
    "without_assertions",
]

_LOOKAROUND = re.compile(r"\(\?<?[=!]")
_BACKREFERENCE = re.compile(r"\\[1-9]|\\k<")
_BACKREFERENCE_AT = re.compile(r"\\(?:[1-9][0-9]*|k<[^>]*>)")


def regex_problem(pattern: str, what: str) -> str | None:
    """Why the grammar engines cannot compile ``pattern`` (look-around, backreferences), if so."""
    if _LOOKAROUND.search(pattern):
        return (
            f"{what} {pattern!r} uses look-around, which the regex engines hf_fvo builds on "
            "(Rust regex syntax: llguidance, outlines-core) do not compile"
        )
    if _BACKREFERENCE.search(pattern):
        return f"{what} {pattern!r} uses a backreference, which is not regular"
    return None


def _kinds(pattern: str) -> list[str]:
    """Per character of ``pattern``: ``"syntax"`` (outside character classes, unescaped),
    ``"escape"`` (a backslash outside classes, its escaped character ``"escaped"``) or
    ``"class"`` (inside a character class, its brackets included)."""
    kinds = ["class"] * len(pattern)
    in_class, i = False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if not in_class:
                kinds[i : i + 2] = ["escape", "escaped"][: len(pattern) - i]
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        else:
            kinds[i] = "syntax"
        i += 1
    return kinds


def inner_anchor(pattern: str) -> bool:
    """Whether ``pattern`` has ``^`` or ``$`` other than at its very start or end (outside
    character classes and escapes)."""
    last = len(pattern) - 1
    return any(
        kind == "syntax" and ((ch == "^" and i > 0) or (ch == "$" and i < last))
        for i, (ch, kind) in enumerate(zip(pattern, _kinds(pattern), strict=True))
    )


def without_assertions(pattern: str) -> str | None:
    """``pattern`` with every look-around group removed and every backreference widened to
    any text: a pattern every string matching ``pattern`` matches (look-arounds only ever
    remove matches); ``None`` where the pattern cannot be read (unbalanced parentheses)."""
    kinds = _kinds(pattern)
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if kinds[i] == "escape":
            reference = _BACKREFERENCE_AT.match(pattern, i)
            out.append("[\\s\\S]*" if reference else pattern[i : i + 2])
            i = reference.end() if reference else i + 2
            continue
        if kinds[i] == "syntax" and _LOOKAROUND.match(pattern, i):
            depth, j = 0, i
            while j < n:  # to the group's closing parenthesis
                if kinds[j] == "syntax":
                    depth += {"(": 1, ")": -1}.get(pattern[j], 0)
                j += 1
                if depth == 0:
                    break
            if depth:
                return None
            i = j
            continue
        out.append(pattern[i])
        i += 1
    return "".join(out)


def python_tree(pattern: str, *, strict: bool) -> Any | None:
    """Python's parse tree (:mod:`re._parser`) of an ECMA-262 ``pattern``, its named groups and
    their references respelled as Python's; ``None`` where Python cannot read it, and, with
    ``strict``, where Python reads a nested class otherwise than ECMA (``[[:alpha:]]``, ``&&``,
    ``--``: a FutureWarning).

    Example:
        >>> from hf_fvo.grammar.schema.patterns import python_tree
        >>> len(python_tree("(?<y>a)\\\\k<y>", strict=True)), python_tree("[^]", strict=True)
        (2, None)
    """
    import re._parser as parser
    import warnings

    python = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)  # ECMA's named groups
    python = re.sub(r"\\k<(\w+)>", r"(?P=\1)", python)  # and references to them
    try:
        with warnings.catch_warnings():
            if strict:
                warnings.simplefilter("error", FutureWarning)
            else:
                warnings.simplefilter("ignore")
            return parser.parse(python)
    except Exception:  # an ECMA-only construct
        return None


# code points JSON text may not hold raw in a string (the quote, the backslash, the controls)
# or that llguidance's JSON mode does not take raw there (DEL), or that ECMA's `.` leaves out
# (U+2028, U+2029): raw_matches spells none of them
_NOT_RAW = (
    (0x00, 0x1F),
    (0x22, 0x22),
    (0x5C, 0x5C),
    (0x7F, 0x7F),
    (0x2028, 0x2029),
    (0xD800, 0xDFFF),
)  # (and the surrogates: no character)
_TOP = 0x10FFFF
_DIGITS = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))


def _ranges(spans: Any) -> list[tuple[int, int]]:
    """Sorted, merged code-point ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(spans: Any) -> list[tuple[int, int]]:
    out, at = [], 0
    for lo, hi in _ranges(spans):
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    return out + ([(at, _TOP)] if at <= _TOP else [])


def _raw(spans: Any) -> list[tuple[int, int]]:
    """``spans`` less the code points raw_matches never spells."""
    keep = _complement(_NOT_RAW)
    return _ranges((max(a, c), min(b, d)) for a, b in _ranges(spans) for c, d in keep
                   if max(a, c) <= min(b, d))  # fmt: skip


def _class(spans: list[tuple[int, int]]) -> str | None:
    if not spans:
        return None
    body = "".join(f"\\x{{{lo:x}}}" + (f"-\\x{{{hi:x}}}" if hi > lo else "") for lo, hi in spans)
    return f"[{body}]"


def raw_matches(pattern: str) -> tuple[str, bool] | None:
    r"""For the budget rule's certificate: a regex (Rust syntax, as llguidance reads it) of
    matches of the ECMA-262 ``pattern`` that a JSON string spells raw (no escape, no quote,
    backslash, control, DEL, U+2028 or U+2029), and whether ``pattern`` ends in ``$``. Every
    text it matches is a match of ``pattern`` however an engine reads the constructs it keeps:
    ``\d`` is read ``[0-9]``, ``\w`` ``[0-9A-Za-z_]``, ``\s`` a space (a part of every
    reading), ``.`` any raw character, a negated class only where it names no ``\w`` or
    ``\s``; a branch or repetition it cannot spell is left out (a subset). ``None`` where
    ``pattern`` begins with ``^`` (the certificate writes free text before a match), holds
    other assertions, flags, backreferences or ``{,n}`` (read otherwise by Python and ECMA),
    or has no such match.

    Example:
        >>> from hf_fvo.grammar.schema.patterns import raw_matches
        >>> raw_matches(r"[0-9]{2}-\d$")
        ('(?:[\\x{30}-\\x{39}]){2,2}\\x{2d}[\\x{30}-\\x{39}]', True)
        >>> raw_matches("^a") is None
        True
    """
    items = _items(pattern)
    if items is None:
        return None
    end = bool(items) and items[-1] == (_sre().AT, _sre().AT_END)
    spelled = _spell(items[:-1] if end else items)
    return None if spelled is None else (spelled, end)


def marked_content(pattern: str, free: str, mark: str) -> str | None:
    r"""The content of a string lexeme the budget rule's certificate may mark (``mark``, a
    regex of its marker byte) for a string of ``pattern``: free text (``free``, a regex of one
    raw character, or the marker), a raw match (:func:`raw_matches`), free text (none after a
    final ``$``). Its texts without the marker are matches of ``pattern``, and every raw
    content keeps it open (free text comes first), which the certificate needs: a pattern
    anchored at the start (``^[a-z]+$``) is not marked, since a token outside its class would
    leave another reading (``anyOf`` with ``^[0-9]{9}$``) than the one the markers were
    certified in. ``None`` where ``raw_matches`` is.

    Example:
        >>> from hf_fvo.grammar.schema.patterns import marked_content
        >>> marked_content("ab", "F", "M")
        '(?:F|M)*(?:\\x{61}\\x{62})(?:F|M)*'
        >>> marked_content("^[a-c]+$", "F", "M") is None
        True
    """
    found = raw_matches(pattern)
    if found is None:
        return None
    regex, end = found
    return f"(?:{free}|{mark})*(?:{regex})" + ("" if end else f"(?:{free}|{mark})*")


def _sre() -> Any:
    import re._constants as sre

    return sre


def _items(pattern: str) -> list[Any] | None:
    """The top-level items of ``pattern``'s parse tree, where it is read alike by Python and
    ECMA, has no flags and no leading ``^`` (free text cannot come first)."""
    if re.search(r"\{,", pattern) or regex_problem(pattern, "") is not None:
        return None
    tree = python_tree(pattern, strict=True)
    if tree is None or tree.state.flags & ~re.UNICODE:
        return None
    items = list(tree)
    if items and items[0][0] is _sre().AT:
        return None  # (anchored at the start: free text cannot come first)
    return items


def _category(name: Any) -> tuple[list[tuple[int, int]], bool] | None:
    """A category's code points, and whether they are the same in every reading."""
    sre = _sre()
    if name is sre.CATEGORY_DIGIT:
        return list(_DIGITS), True
    if name is sre.CATEGORY_NOT_DIGIT:
        return _complement(_DIGITS), True
    if name is sre.CATEGORY_WORD:
        return list(_WORD), False
    if name is sre.CATEGORY_SPACE:
        return [(0x20, 0x20)], False
    return None


def _klass(av: Any) -> list[tuple[int, int]] | None:
    sre = _sre()
    negate, spans, exact = False, [], True
    for op, arg in av:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            spans.append((arg, arg))
        elif op is sre.RANGE:
            spans.append(arg)
        elif op is sre.CATEGORY and (found := _category(arg)) is not None:
            spans += found[0]
            exact = exact and found[1]
        else:
            return None
    if negate and not exact:
        return None  # (its complement depends on the reading)
    return _raw(_complement(spans) if negate else spans)


def _spell(seq: Any) -> str | None:
    out = []
    for op, av in seq:
        part = _one(op, av)
        if part is None:
            return None
        out.append(part)
    return "".join(out)


def _one(op: Any, av: Any) -> str | None:
    """One item's raw matches as a regex (``None``: none spelled)."""
    sre = _sre()
    if op is sre.LITERAL:
        return f"\\x{{{av:x}}}" if _raw([(av, av)]) else None
    if op is sre.NOT_LITERAL:
        return _class(_raw(_complement([(av, av)])))
    if op is sre.ANY:
        return _class(_raw([(0, _TOP)]))
    if op is sre.IN:
        spans = _klass(av)
        return None if spans is None else _class(spans)
    if op is sre.BRANCH:
        alternatives = [a for a in (_spell(b) for b in av[1]) if a is not None]
        return f"(?:{'|'.join(alternatives)})" if alternatives else None
    if op is sre.SUBPATTERN:
        _, add, remove, body = av
        inner = None if add or remove else _spell(body)
        return None if inner is None else f"(?:{inner})"
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        lo, hi, body = av
        inner = _spell(body)
        if inner is None:
            return "" if lo == 0 else None  # (no repetition: a subset)
        top = "" if hi is sre.MAXREPEAT else str(hi)
        return f"(?:{inner}){{{lo},{top}}}"
    return None  # assertions, references, anything else
