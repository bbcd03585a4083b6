"""Project contract: CI runs exactly the README's test command; examples run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _command_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("pip install")]


def test_ci_runs_the_readme_test_command():
    ci = _command_lines((ROOT / ".ci" / "run").read_text())
    readme = _command_lines((ROOT / "README.md").read_text())
    assert len(ci) == 1 and len(readme) == 2
    assert ci[0] in readme and ci[0].endswith("python -m pytest -q")
    assert any(line.endswith("hf-fvo demo") for line in readme)
    assert all("torch==2.13.0" in line.split("&&")[0] for line in readme)


def test_grammar_masked_json_example_runs():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "grammar_masked_json.py"),
            "--max-new-tokens",
            "24",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith('{"city":"')
