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

__all__ = ["inner_anchor", "python_tree", "regex_problem", "without_assertions"]

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
