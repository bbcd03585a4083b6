"""docs/api.md lists exactly what each public module exports (its ``__all__``), and the
accepted estimator names are written the same wherever a docstring lists them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ["hf_fvo", "hf_fvo.errors", "hf_fvo.grammar", "hf_fvo.grammar.schema", "hf_fvo.phi",
          "hf_fvo.generation", "hf_fvo.training", "hf_fvo.eval", "hf_fvo.models",
          "hf_fvo.testing", "hf_fvo.vllm"]  # fmt: skip


def _documented() -> dict[str, set[str]]:
    """{module: names in its row's second cell} from docs/api.md's table."""
    rows = {}
    for line in (ROOT / "docs" / "api.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`hf_fvo[\w.]*`", cells[0]):
            names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", cells[1])
            rows[cells[0].strip("`")] = set(names)
    return rows


def test_every_public_module_has_a_row():
    assert sorted(_documented()) == sorted(PUBLIC)


@pytest.mark.parametrize("module", PUBLIC)
def test_the_row_lists_exactly_the_modules_exports(module):
    exported = set(importlib.import_module(module).__all__)
    documented = _documented()[module]
    assert documented == exported, (
        f"in docs/api.md but not exported: {sorted(documented - exported)}; "
        f"exported but not in docs/api.md: {sorted(exported - documented)}"
    )


def test_the_top_level_fits_in_a_head():
    import hf_fvo

    assert len(hf_fvo.__all__) <= 10


def test_docstrings_that_list_estimator_names_list_them_all():
    # a docstring naming the accepted phi= strings names every one of ESTIMATORS
    from hf_fvo.generation import generate
    from hf_fvo.phi import ESTIMATORS, make_estimator

    for fn in (generate, make_estimator):
        named = set(re.findall(r'``"(\w+)"``', fn.__doc__))
        assert set(ESTIMATORS) <= named, (fn.__name__, sorted(set(ESTIMATORS) - named))
