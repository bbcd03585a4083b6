"""What finishes a match of a ``pattern`` a string began (hf_fvo.grammar.schema.continuation):
on the patterns of the development-set slices (tests/data, real schemas), against Python's
``re`` as the oracle: what it writes makes the string match, and it is never longer than a
match known to finish the same text."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_fvo.grammar.schema.continuation import _WRITTEN, continuation
from hf_fvo.grammar.schema.instance import shortest_pattern_text

DATA = Path(__file__).resolve().parents[1] / "data"


def _patterns(node, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                found.add(value)
            elif key == "patternProperties" and isinstance(value, dict):
                found.update(value)
            _patterns(value, found)
    elif isinstance(node, list):
        for value in node:
            _patterns(value, found)
    return found


PATTERNS = sorted(_patterns([json.loads(line)["schema"]
                             for name in ("maskbench_slice", "jsonschemabench_slice",
                                          "budget_walks")
                             for line in (DATA / f"{name}.jsonl").open()], set()))  # fmt: skip


def _search(pattern: str, text: str) -> bool:
    """ECMA-262's reading: ``\\d`` and ``\\w`` ASCII (as JSON Schema reads a pattern)."""
    return re.search(pattern, text, re.ASCII) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_prefix_of_a_match_is_finished_to_a_match_no_longer_than_its_own_rest(pattern):
    """Each prefix of the pattern's shortest match (plain ASCII) is finished: the text then
    the continuation matches, and the continuation is at most the rest of that match."""
    match = shortest_pattern_text(pattern)
    if match is None or not set(match) <= set(_WRITTEN):
        pytest.skip("no plain ASCII match to take prefixes of")
    read = [continuation(pattern, match[:i]) for i in range(len(match) + 1)]
    if read[0] is None:
        pytest.skip("a pattern this automaton does not read")  # (measured: 13 of 269 dev)
    for i, rest in enumerate(read):
        assert rest is not None, (match[:i], match)
        assert _search(pattern, match[:i] + rest), (match[:i], rest)
        assert len(rest) <= len(match) - i, (match[:i], rest, match[i:])


SMALL = ["^[0-7]{3,4}$", "^pbj:[a-z0-9-]+:[a-z0-9.-]+$", "[0-9]{2}-[0-9]{2}", "^(ab|c)+d?$",
         "^a.b$", "x[^y]z", r"^\d+(\.\d+)?$", r"^\w{2}$"]  # fmt: skip


ORACLE = "abcdpjxyz0179-:."  # (the written alphabet's characters these patterns use)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(pattern=st.sampled_from(SMALL), text=st.text(alphabet="ab0179-:.xyzé", max_size=6))
def test_the_continuation_is_the_shortest_a_brute_force_search_finds(pattern, text):
    """Against every text of up to three characters over the characters these patterns use
    (all of them written ones): where one finishes ``text`` to a match, the continuation is
    found and no longer; where it returns one, that one matches."""
    assert set(ORACLE) <= set(_WRITTEN)
    rest = continuation(pattern, text)
    if rest is not None:
        assert _search(pattern, text + rest)
    for n in range(4):
        if any(_search(pattern, text + "".join(tail))
               for tail in itertools.product(ORACLE, repeat=n)):  # fmt: skip
            assert rest is not None and len(rest) <= n, (text, rest, n)
            break


def test_a_text_no_suffix_finishes_has_no_continuation():
    assert continuation("^[0-7]{3}$", "9") is None
    assert continuation("^[0-7]{3}$", "7777") is None
    assert continuation("^(?!x)a$", "") is None  # (look-around: not read here)
