"""Time to the first token of ``hf_fvo.generate`` on real-world schemas, this tree beside another
(an earlier revision), in alternating processes.

A budget is admitted before the first forward: ``generate`` asks for the tokens of a member from
the initial state (and, where that exceeds the budget, for a lower bound). This measures what a
user waits for on a freshly compiled grammar: from the ``generate`` call to the first new token
(greedy, ``max_new_tokens`` as given, the schema in the prompt as in
``realworld_generation.py``), then the same call again on the same grammar (its bounds cached).
Compile time is measured apart. Each round runs one process per tree, the order alternating, so
that drift on the machine hits both alike; per schema the median over rounds is kept.

Usage:
    git worktree add /tmp/base <revision>
    python benchmarks/first_token.py --against /tmp/base --schemas 20 --rounds 3 --write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import DEV, ROOT, provenance, publish

SECTION = "## Time to the first token: budget admission before the first forward"


class _First(Exception):
    """Raised by the streamer at the first new token."""


class _Streamer:
    def __init__(self) -> None:
        self.calls = 0

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:  # the first call holds the prompt
            raise _First

    def end(self) -> None:
        pass


def worker(args: argparse.Namespace) -> None:
    """One process: every schema's compile time and two times to the first token."""
    import torch
    from realworld_generation import pick_schemas, prompt_ids

    import hf_fvo
    from hf_fvo.models import load_default_model, load_default_tokenizer

    torch.manual_seed(0)
    tok, model = load_default_tokenizer(), load_default_model()
    rows = [json.loads(line) for line in DEV.open()]
    picked = pick_schemas(rows, args.schemas, tok, model.config.vocab_size)
    out = {"hf_fvo": str(Path(hf_fvo.__file__).parent), "rows": []}
    for row, _ in picked:
        hf_fvo.grammar.clear_cache()  # pick_schemas compiled it; the tokenizer's tables stay warm:
        hf_fvo.Grammar.from_json_schema({"type": "boolean"}, tok, whitespace="",
                                        vocab_size=model.config.vocab_size)  # fmt: skip
        t0 = time.perf_counter()
        g = hf_fvo.Grammar.from_json_schema(row["schema"], tok, whitespace="",
                                            vocab_size=model.config.vocab_size)  # fmt: skip
        compile_s = time.perf_counter() - t0
        ids = prompt_ids(tok, row["schema"])
        times, refused = [], None
        for _ in range(2):  # a fresh grammar, then the same grammar again
            t0 = time.perf_counter()
            try:
                hf_fvo.generate(model, ids, grammar=g, do_sample=False, streamer=_Streamer(),
                                max_new_tokens=args.max_new_tokens)  # fmt: skip
            except _First:
                pass
            except hf_fvo.errors.GrammarError as exc:  # a refusal before the first forward
                refused = type(exc).__name__
            times.append(time.perf_counter() - t0)
        out["rows"].append({"name": row["name"], "compile_s": compile_s, "first_s": times[0],
                            "again_s": times[1], "refused": refused})  # fmt: skip
    Path(args.out).write_text(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the other tree (a git worktree)")
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    trees = {"this tree": ROOT, "against": Path(args.against).resolve()}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                path = Path(tmp) / f"{r}-{name}.json"
                env = {**os.environ, "PYTHONPATH": str(trees[name])}
                subprocess.run([sys.executable, __file__, "--worker", "--out", str(path),
                                "--schemas", str(args.schemas), "--against", args.against,
                                "--max-new-tokens", str(args.max_new_tokens)],
                               env=env, check=True, cwd=Path(__file__).parent)  # fmt: skip
                data = json.loads(path.read_text())
                assert Path(data["hf_fvo"]).parent == trees[name], data["hf_fvo"]
                runs[name].append(data)
    revs = {n: _revision(p) for n, p in trees.items()}
    lines = [SECTION, "", provenance("llguidance"), "",
             f"Trees: this tree at {revs['this tree']}, against {revs['against']}; "
             f"{args.schemas} development schemas, {args.rounds} rounds, "
             f"`max_new_tokens={args.max_new_tokens}`, greedy.", "",
             "| tree | compile (median, max) | first token, fresh grammar (median, p90, max) | "
             "again (median) | refused |", "|---|---|---|---|---|"]  # fmt: skip
    per = {name: _per_schema(runs[name]) for name in trees}
    for name in trees:
        rows = per[name]
        first = [r["first_s"] for r in rows.values()]
        refused = sorted(f"{n} ({r['refused']})" for n, r in rows.items() if r["refused"])
        lines.append(
            f"| {name} | {_ms(statistics.median(r['compile_s'] for r in rows.values()))}, "
            f"{_ms(max(r['compile_s'] for r in rows.values()))} | {_ms(statistics.median(first))}, "
            f"{_ms(_p90(first))}, {_ms(max(first))} | "
            f"{_ms(statistics.median(r['again_s'] for r in rows.values()))} | "
            f"{', '.join(refused) or 0} |"
        )
    common = [n for n in per["this tree"] if n in per["against"]]
    ratios = sorted(per["this tree"][n]["first_s"] / per["against"][n]["first_s"] for n in common)
    slowest = max(
        common, key=lambda n: per["this tree"][n]["first_s"] / per["against"][n]["first_s"]
    )
    lines += ["", f"Per schema, first token (fresh grammar) this tree ÷ against: median "
              f"{statistics.median(ratios):.2f}, min {ratios[0]:.2f}, max {ratios[-1]:.2f} "
              f"({slowest}: {_ms(per['this tree'][slowest]['first_s'])} against "
              f"{_ms(per['against'][slowest]['first_s'])})."]  # fmt: skip
    publish(lines, args.write)


def _per_schema(runs: list[dict]) -> dict[str, dict]:
    names = [r["name"] for r in runs[0]["rows"]]
    out = {}
    for i, name in enumerate(names):
        rows = [run["rows"][i] for run in runs]
        out[name] = {k: statistics.median(r[k] for r in rows)
                     for k in ("compile_s", "first_s", "again_s")}  # fmt: skip
        out[name]["refused"] = rows[0]["refused"]
    return out


def _p90(values: list[float]) -> float:
    q = sorted(values)
    return q[int(0.9 * (len(q) - 1))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _revision(tree: Path) -> str:
    rev = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return rev.stdout.strip() or str(tree)


if __name__ == "__main__":
    main()
