"""Replace (or append) one ``## `` section of docs/benchmarks.md with a script's output."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(heading: str, body: str) -> Path:
    """Put ``body`` (which starts with ``heading``) where ``heading`` is, or at the end."""
    text = DOCS.read_text()
    # the heading as a whole line: "## X" must not match "## X (with Y)"
    start = ("\n" + text).find("\n" + heading.rstrip() + "\n")
    if start >= 0:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + body.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + body.rstrip() + "\n"
    DOCS.write_text(text)
    return DOCS


def publish(lines: list[str], write: bool) -> str:
    """Print a script's section (``lines[0]`` is its heading) and, with ``write``, put it in
    docs/benchmarks.md."""
    table = "\n".join(lines) + "\n"
    print(table)
    if write:
        write_section(lines[0], table)
    return table
