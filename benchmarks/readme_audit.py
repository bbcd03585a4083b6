"""Wall-clock and CPU time of the README's `hf-fvo audit` command, run as a new user would.

Reads the command from README.md (the ```bash block that starts with ``hf-fvo audit``), runs it
``--runs`` times in a fresh process from a scratch directory (imports, model load, exploration,
plot: everything a user waits for) and reports each run's wall and CPU seconds (children's user +
system time, from ``resource``) and the TV line it printed.

Usage: python benchmarks/readme_audit.py [--runs 2] [--write]
"""

from __future__ import annotations

import argparse
import re
import resource
import shlex
import subprocess
import tempfile
import time

from harness import ROOT, machine, versions

SECTION = "## The README's audit command: time to answer"


def readme_command() -> tuple[list[str], str]:
    """The README's `hf-fvo audit …` command: argv (paths made absolute) and its text."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(hf-fvo audit .*?)\n```", text, re.S)
    if block is None:
        raise SystemExit("README.md has no ```bash block starting with `hf-fvo audit`")
    command = " ".join(block.group(1).replace("\\\n", " ").split())
    argv = shlex.split(command)
    return [str(ROOT / a) if (ROOT / a).is_file() else a for a in argv], command


def main() -> None:
    from harness import publish

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    argv, command = readme_command()
    rows = []
    for run in range(args.runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            done = subprocess.run(argv, cwd=scratch, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        tv = next((line for line in done.stdout.splitlines() if "TV(" in line), "")
        rows.append((run + 1, wall, cpu, tv.split(": ", 1)[-1]))
        print(f"run {run + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU; {tv}", flush=True)
    lines = [
        SECTION,
        "",
        f"Command: `python benchmarks/readme_audit.py --runs {args.runs} --write`, which runs the "
        f"README's `{command}` in a fresh process from an empty directory. Machine: "
        f"{machine()}, {versions()}; {time.strftime('%Y-%m-%d')}.",
        "",
        "| run | wall | CPU (user + system) | result |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r} | {w:.1f} s | {c:.1f} s | {tv} |" for r, w, c, tv in rows]
    publish(lines, args.write)


if __name__ == "__main__":
    main()
