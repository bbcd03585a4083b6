"""Task accuracy on MaskBench instances: transcription (YAML → JSON) and shortening (a
``maxLength`` the source exceeds), every sampler at the same budget.

``--build`` writes the task suites shipped in ``hf_fvo/eval/suites/tasks/`` from the MaskBench
development file (:func:`hf_fvo.eval.tasks.build_tasks`). A run draws one seeded output per task
and engine, interleaved (the engines of one task back to back, the same seed), scores it
(:func:`hf_fvo.eval.tasks.score`) and writes the records as a ``datasets`` JSONL file and a
markdown table (``--write``: into docs/benchmarks.md). Engines: unconstrained sampling (parsed
after, a Markdown fence removed), hf_fvo's masking (greedy and sampled), hf_fvo's particles, and
XGrammar's and llguidance's processors through Outlines and ``model.generate``; every sampled
row uses ``do_sample=True, top_k=0``.

Usage:
    python benchmarks/tasks.py --build
    python benchmarks/tasks.py --suite transcribe --write
    python benchmarks/tasks.py --suite shorten --write
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import harness
from harness import MASKBENCH, provenance


def main() -> None:
    from hf_fvo.eval import tasks as T
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true", help="write the task suites and stop")
    ap.add_argument("--suite", default="transcribe", help="transcribe, shorten or a JSONL file")
    ap.add_argument("--engines", default=",".join(T.ENGINES), help="a comma list")
    ap.add_argument("--first", type=int, default=None, help="only the first N tasks")
    ap.add_argument("--start", type=int, default=0, help="skip the tasks before this index "
                    "(a second worker; seeds stay the seed plus the task's index)")  # fmt: skip
    ap.add_argument("--whitespace", default="pretty", help="hf_fvo's layout ('none': [ ]?)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/hf_fvo_tasks")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--summarize", nargs="+", help="progress files of interrupted runs: the "
                    "table of the tasks every engine finished")  # fmt: skip
    ap.add_argument("--against", nargs="+", help="progress files of an earlier run: each "
                    "engine paired with its own records there (how far a row moved)")  # fmt: skip
    args = ap.parse_args()
    tok = load_default_tokenizer()
    if args.build:
        rows = [json.loads(line) for line in MASKBENCH.open()]
        folder = Path(T.__file__).parent / "suites" / "tasks"
        folder.mkdir(parents=True, exist_ok=True)
        for kind in ("transcribe", "shorten"):
            built = T.build_tasks(rows, tok, kind)
            (folder / f"{kind}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in built))
            print(f"{kind}: {len(built)} tasks")
        return
    whitespace = None if args.whitespace == "none" else args.whitespace
    engines = args.engines.split(",")
    tasks = T.load_tasks(args.suite)[args.start : args.first]
    if args.summarize:
        # per task, the records of the last file in which every engine finished it (a task an
        # interrupted worker left half done is run whole again by the next)
        finished: dict[str, list[dict]] = {}
        for name in args.summarize:
            with Path(name).open() as fh:
                rows = [json.loads(line) for line in fh]
            for task in {r["name"] for r in rows if r["engine"] == engines[-1]}:
                finished[task] = [r for r in rows if r["name"] == task]
        records = [r for rows in finished.values() for r in rows]
        report(records, len(finished), whitespace, args)
        return
    model = load_default_model()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    stem = f"{Path(args.suite).stem}-{args.whitespace}" + (f"-{args.start}" if args.start else "")
    progress = Path(args.out) / f"progress-{stem}.jsonl"
    progress.write_text("")

    def log(record: dict) -> None:
        with progress.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        cut = "" if record["cut_word"] is None else f" cut_word={record['cut_word']}"
        print(f"{record['engine']:14s} {record['name'][:30]:30s} exact={record['exact']!s:5s} "
              f"leaves={record['leaves']:.2f} valid={record['valid']!s:5s}{cut} "
              f"{record['seconds']:6.1f} s", flush=True)  # fmt: skip

    records = T.run_tasks(tasks, engines, model, tok, seed=args.seed + args.start,
                          whitespace=whitespace, progress=log)  # fmt: skip
    import datasets

    datasets.Dataset.from_list(records).to_json(f"{args.out}/results-{stem}.jsonl")
    report(records, len(tasks), whitespace, args)


def report(records: list[dict], count: int, whitespace: str | None, args) -> None:
    from hf_fvo.eval import tasks as T

    heading = (f"## Task accuracy: {Path(args.suite).stem} ({count} MaskBench tasks, "
               f"hf_fvo whitespace={whitespace!r})")  # fmt: skip
    lines = [
        heading,
        "",
        f"{provenance('jsonschema', 'outlines', 'xgrammar', 'llguidance')} Embedded "
        f"SmolLM2-135M-Instruct; {count} tasks of `hf_fvo/eval/suites/tasks/"
        f"{Path(args.suite).stem}.jsonl` (built from the MaskBench development file); one seeded "
        "output per task and engine, interleaved, the same budget for every engine (twice the "
        "indented instance's tokens plus 32). *exact*: the whole value reproduced (Wilson 95 % "
        "interval); *leaves*: the mean fraction of the instance's leaf values reproduced (± 1.96 "
        "standard errors); *valid*: parsed outputs valid under the task's schema (`jsonschema`, "
        "formats on); *cut words*: shortened strings that stop inside a word of the source; "
        "*s / task*: mean wall seconds. The peers run with their defaults through Outlines "
        "(`get_json_schema_logits_processor`).",
        "",
        T.markdown(T.summarize(records)),
        "",
        *paired(records, "masked"),
        "",
        *paired(records, "masked greedy"),
        "",
        *likelier(records, "masked greedy"),
    ]
    if args.against:
        earlier: dict[tuple[str, str], dict] = {}
        for name in args.against:  # (the first record of a task and engine counts)
            with Path(name).open() as fh:
                for row in map(json.loads, fh):
                    earlier.setdefault((row["engine"], row["name"]), row)
        files = ", ".join(f"`{Path(n).name}`" for n in args.against)
        lines += ["", *paired(records, None, earlier, f"the same engine's records in {files}")]
    harness.publish(lines, args.write)


def likelier(records: list[dict], base: str) -> list[str]:
    """Each engine against ``base`` on log p(x) of its output under the model (the records'
    ``logp``, EOS included): on how many tasks it is at least ``base``'s, and the median
    difference. Tasks where either output is missing (a refusal) are left out."""
    if all(r["engine"] != base for r in records):
        return []
    by = {(r["engine"], r["name"]): r for r in records}
    lines = [f"log p(x) against *{base}* (same tasks): at least as likely / tasks, median "
             "difference in nats:", ""]  # fmt: skip
    for engine in dict.fromkeys(r["engine"] for r in records):
        if engine == base:
            continue
        d = sorted(r["logp"] - by[(base, r["name"])]["logp"] for r in records
                   if r["engine"] == engine and r.get("logp") is not None
                   and by.get((base, r["name"]), {}).get("logp") is not None)  # fmt: skip
        if d:
            at_least = sum(x >= -1e-6 for x in d)
            lines.append(f"- {engine}: {at_least} / {len(d)} ({at_least / len(d):.2f}); median "
                         f"{d[len(d) // 2]:+.2f}")  # fmt: skip
    return lines


def paired(
    records: list[dict],
    base: str | None,
    earlier: dict[tuple[str, str], dict] | None = None,
    what: str = "",
) -> list[str]:
    """Each engine against ``base`` on the same tasks (the same seed) — or, with ``base``
    ``None``, against its own ``earlier`` records (by engine and task): the mean difference of
    leaf fractions (± 1.96 standard errors), and the tasks only one of the two got exactly
    right (McNemar's discordant pairs, with the two-sided exact binomial p-value). An engine
    with no task to pair is left out."""
    from scipy.stats import binomtest

    if base is not None and all(r["engine"] != base for r in records):
        return []
    by = {(r["engine"], r["name"]): r for r in records} if earlier is None else earlier
    lines = [
        f"Paired against {what or f'*{base}*'} (same tasks, same seeds): difference in leaves "
        "(± 95 %); exact-match discordant tasks (engine only / base only, two-sided sign test "
        "p):",
        "",
    ]
    for engine in dict.fromkeys(r["engine"] for r in records):
        if engine == base:
            continue
        other_engine = engine if base is None else base
        pairs = [(r, by[(other_engine, r["name"])]) for r in records
                 if r["engine"] == engine and (other_engine, r["name"]) in by]  # fmt: skip
        if not pairs:
            continue
        d = [a["leaves"] - b["leaves"] for a, b in pairs]
        mean = sum(d) / len(d)
        se = (sum((x - mean) ** 2 for x in d) / max(len(d) - 1, 1) / len(d)) ** 0.5
        only = sum(bool(a["exact"]) and not b["exact"] for a, b in pairs)
        other = sum(bool(b["exact"]) and not a["exact"] for a, b in pairs)
        p = binomtest(only, only + other).pvalue if only + other else 1.0
        lines.append(f"- {engine} ({len(pairs)} tasks): leaves {mean:+.2f} ± {1.96 * se:.2f}; "
                     f"exact {only} / {other} (p = {p:.2g})")  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
