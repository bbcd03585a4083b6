"""The certificate's raw matches of a pattern (:func:`hf_fvo.grammar.schema.patterns.raw_matches`)
are matches of the pattern: drawn from its regex, on every pattern of the development slices."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_fvo.grammar.schema.patterns import python_tree, raw_matches

DATA = Path(__file__).resolve().parents[1] / "data"


def _patterns() -> list[str]:
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            for key, value in node.items():
                if key == "patternProperties" and isinstance(value, dict):
                    found.update(k for k in value if isinstance(k, str))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in ("maskbench_slice.jsonl", "jsonschemabench_slice.jsonl"):
        for line in (DATA / name).open():
            walk(json.loads(line)["schema"])
    return sorted(p for p in found if raw_matches(p) is not None)


PATTERNS = _patterns()
_NOT_RAW = re.compile('["\\\\\x00-\x1f\x7f\u2028\u2029]')


def _python(regex: str) -> str:
    """A Rust-syntax regex of raw_matches in Python's syntax (its only escapes: \\x{…})."""
    return re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: re.escape(chr(int(m[1], 16))), regex)


def test_the_slices_have_patterns_to_draw_from():
    assert len(PATTERNS) >= 20


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_raw_match_is_a_match_of_the_pattern_spelled_raw(pattern):
    """Every text drawn from the raw matches' regex holds no character a JSON string cannot
    spell raw and is matched by the pattern (Python's reading of it, ECMA's for the
    constructs kept), at its end where the pattern ends in ``$``."""
    regex, end = raw_matches(pattern)
    tree = python_tree(pattern, strict=True)
    assert tree is not None
    compiled = re.compile(pattern)

    @settings(max_examples=25, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.from_regex(_python(regex), fullmatch=True), st.text(max_size=3))
    def check(text, before):
        before = _NOT_RAW.sub("", before)
        assert not _NOT_RAW.search(text)
        assert compiled.search(before + text) is not None
        if end:
            assert (
                compiled.search(before + text).end() == len(before + text)
                or re.search(pattern, before + text + "") is not None
            )

    check()


def test_what_raw_matches_leaves_out():
    """Anchored at the start (free text comes first), flags, assertions, ``{,n}`` (read
    otherwise by Python and ECMA), a negated class naming ``\\w``; a character never spelled
    raw is left out of a class, and a literal one leaves no match."""
    for pattern in ("^a", "(?i)a", "a(?=b)", "a{,3}", "[^\\w]", '"', "a\\\\"):
        assert raw_matches(pattern) is None, pattern
    regex, end = raw_matches('[a"]b$')
    assert end and re.fullmatch(_python(regex), "ab") and not re.fullmatch(_python(regex), '"b')
