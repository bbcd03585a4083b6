"""The pattern certificate's marked lexeme (:func:`hf_fvo.grammar.schema.patterns.raw_matches`,
:func:`~hf_fvo.grammar.schema.patterns.marked_content`) holds only matches of the pattern:
texts drawn from its regex (without the marker) are matches, on real patterns."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_fvo.grammar.schema.patterns import marked_content, raw_matches

# the development set's patterns (MaskBench and JSONSchemaBench, ../shared/realworld; nobody
# here wrote them) that marked_content marks, of 41 drawn with random.seed(1) from those it
# marked while anchored class loops were marked too
PATTERNS = [
    "",
    "([A-Z]{2})",
    "([A-Za-z_]\\w+\\\\)*([A-Za-z_]\\w+)",
    ".*",
    "/api/v1/user_identities/\\d+/pdf_manager_templates/\\d+",
    "B",
    "[0-9]+",
    "[0-9]+(\\.[0-9]+){3}",
    "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]+Z",
    "[A-Za-z0-9-_.:]{1,255}",
    "\\*|((<=|le|<>|!=|ne|<|lt|==|=|eq|>=|ge|>|gt).*)",
    "\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}.\\d{6}",
    "\\{\\{.*\\}\\}",
    "^(portal)|(console)|(signup)|(libraries)|(swagger)|(X-[a-z0-9\\-]*)$",
    "^dev|alpha|beta|rc|RC|stable$",
    "a1",
    "b2",
    "c",
    "hidden",
]
_NOT_RAW = re.compile('["\\\\\x00-\x1f\x7f\u2028\u2029]')
_TOP = 0x2FF  # (drawn characters: up to U+02FF, so that drawing stays fast)


def _python(regex: str) -> str:
    """marked_content's regex in Python's syntax (its only escapes: \\x{…}), its classes cut at
    U+02FF, the marker left out."""

    def cut(found: re.Match) -> str:
        lo, hi = int(found[1], 16), int(found[2] or found[1], 16)
        if lo > _TOP:
            return ""
        hi = min(hi, _TOP)
        return re.escape(chr(lo)) + (f"-{re.escape(chr(hi))}" if hi > lo else "")

    regex = regex.replace("|M)", ")")
    regex = re.sub(r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?", cut, regex)
    return regex.replace("(?:F)", f"[ -!#-\\[\\]-~\\u00a0-\\u{_TOP:04x}]")


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_marked_text_is_a_match_of_the_pattern_spelled_raw(pattern):
    """Every text drawn from the marked lexeme's content (free text ``F`` drawn raw) holds no
    character a JSON string cannot spell raw, and the pattern matches it (Python's reading of
    it, ECMA's for the constructs kept)."""
    content = marked_content(pattern, "F", "M")
    assert content is not None
    compiled = re.compile(pattern)

    @settings(max_examples=20, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.from_regex(_python(content), fullmatch=True))
    def check(text):
        assert not _NOT_RAW.search(text)
        assert compiled.search(text) is not None, text

    check()


def test_what_the_certificate_leaves_unmarked():
    """Anchored at the start (a token outside the class would leave another reading), flags,
    assertions, ``{,n}`` (read otherwise by Python and ECMA), a negated class naming ``\\w``;
    a character never spelled raw is left out of a class, and a literal one leaves no match."""
    for pattern in (
        "^[a-z]+$",
        "^method\\.response\\.header\\..+$",
        "(?i)a",
        "a(?=b)",
        "a{,3}",
        "[^\\w]",
        "^[\\S]+$",
        '"',
        "a\\\\",
    ):
        assert marked_content(pattern, "F", "M") is None, pattern
    assert raw_matches("^a") is None
    regex, end = raw_matches('[a"]b$')
    assert end and re.fullmatch(_python(regex), "ab") and not re.fullmatch(_python(regex), '"b')
