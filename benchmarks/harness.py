"""What every benchmark script shares: where a figure came from (command, machine, versions,
date), interleaved timing, and publishing a section of docs/benchmarks.md.

Scripts import the installed hf_fvo (``pip install -e .``) and run from anywhere as
``python benchmarks/<script>.py`` (Python puts this folder on ``sys.path``, so they import this
module and their siblings by name).
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
# the development sets; HF_FVO_REALWORLD points elsewhere (a copy on a device machine)
REALWORLD = Path(os.environ.get("HF_FVO_REALWORLD", ROOT.parent / "shared" / "realworld"))
DEV = REALWORLD / "jsonschemabench-dev.jsonl"  # the development set (JSONSchemaBench sample)
MASKBENCH = REALWORLD / "maskbench-dev.jsonl"


def command(argv: Sequence[str] | None = None) -> str:
    """How this script was run, as a command anyone can paste."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(ROOT):
        script = script.relative_to(ROOT)
    return shlex.join(["python", str(script), *(sys.argv[1:] if argv is None else argv)])


def machine(device: Any = None) -> str:
    """The machine in words: the CPU and its threads, or the GPU a ``device`` names."""
    import torch

    if device is not None and torch.device(device).type == "cuda":
        return f"{torch.cuda.get_device_name(torch.device(device))} (CUDA {torch.version.cuda})"
    return f"{platform.machine()} CPU ({torch.get_num_threads()} threads)"


def versions(*packages: str) -> str:
    """Python, torch, transformers, hf_fvo and ``packages``, with their installed versions."""
    names = ["torch", "transformers", "hf-fvo", *packages]
    out = [f"Python {platform.python_version()}"]
    for name in dict.fromkeys(names):
        try:
            out.append(f"{name.replace('-', '_') if name == 'hf-fvo' else name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)


def provenance(*packages: str, device: Any = None, argv: Sequence[str] | None = None) -> str:
    """``Command: `…`. Machine: …, versions; date.`` — the line every section starts with."""
    return (
        f"Command: `{command(argv)}`. Machine: {machine(device)}, {versions(*packages)}; "
        f"{time.strftime('%Y-%m-%d')}."
    )


def interleaved(
    runs: dict[str, Callable[[], Any]], reps: int, sync: Callable[[], None] = lambda: None
) -> dict[str, list[float]]:
    """Seconds per call of each run, ``reps`` rounds in a round-robin so that drift on a shared
    machine hits every run alike (``sync`` before each clock read: a GPU's synchronize)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            sync()
            t0 = time.perf_counter()
            run()
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def write_section(heading: str, body: str) -> Path:
    """Put ``body`` (which starts with ``heading``) where ``heading`` is in docs/benchmarks.md,
    or at its end."""
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
