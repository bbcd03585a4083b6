"""JSON layouts on open real-world schemas: compact, ``[ ]?`` and ``whitespace="pretty"``.

How much of the distance between the model and the constraint is formatting? On development
schemas not known to be finite (``particles.py``'s pick; the schema in the prompt), each layout's
grammar is run, interleaved with the same seed per schema: one masked draw
(``hf_fvo.generate(phi="uniform", do_sample=True, top_k=0)``) and N particles for each N given
(``particles=N``). Per layout: log Ẑ (the log-probability, estimated by the particles, that the
model's own output is a member within the budget: higher is closer to what the model writes),
the smallest and mean ESS of the particles, complete / cut / valid outputs (``jsonschema``,
formats on), and the masked draw's seconds per generated token over the compact layout's on the
same schema. One unconstrained draw per schema shows how the model lays JSON out by itself.
Results go to a ``datasets`` JSONL file and a markdown table.

Usage:
    python benchmarks/layouts.py --schemas 20 --particles 8,32 --max-new-tokens 256 --write
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from harness import DEV, provenance, publish
from realworld_generation import outcome, pick_schemas, prompt_ids

LAYOUTS = {"compact": "", "space": None, "pretty": "pretty"}  # name → whitespace=


def main() -> None:
    import hf_fvo
    from hf_fvo import Grammar
    from hf_fvo.errors import BudgetTooSmallError, BudgetUndecidedError, CheckFailedError
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--particles", default="8,32", help="N, a comma list")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="a comma list of " + str(LAYOUTS))
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", default="/tmp/hf_fvo_layouts")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--summarize", help="a results or progress file: its table only")
    ap.add_argument("--finite", action="store_true", help="the exact μ* of the demo's finite "
                    "schema under each layout, and what computing it costs")  # fmt: skip
    args = ap.parse_args()
    if args.finite:
        finite(args)
        return
    if args.summarize:
        with Path(args.summarize).open() as fh:
            table([json.loads(line) for line in fh], args)
        return
    layouts = args.layouts.split(",")
    counts = [int(n) for n in args.particles.split(",")]
    tok, model = load_default_tokenizer(), load_default_model()
    size = model.config.vocab_size
    rows = [json.loads(line) for line in DEV.open()]
    chosen = [r for r, g in pick_schemas(rows, 3 * args.schemas, tok, size)
              if g.is_finite is not True][: args.schemas]  # fmt: skip
    eos = set(tok.convert_tokens_to_ids([tok.eos_token]))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    progress = Path(args.out) / f"progress-{args.max_new_tokens}.jsonl"
    progress.write_text("")
    records: list[dict] = []
    for k, row in enumerate(chosen):
        ids = prompt_ids(tok, row["schema"])
        torch.manual_seed(1000 + k)
        free = model.generate(ids, do_sample=True, top_k=0, max_new_tokens=args.max_new_tokens,
                              pad_token_id=tok.eos_token_id)  # fmt: skip
        free = free[0, ids.shape[1] :].tolist()
        free_text = tok.decode([t for t in free if t not in eos])
        for layout in layouts:
            grammar = Grammar.from_json_schema(row["schema"], tok, whitespace=LAYOUTS[layout],
                                               vocab_size=size)  # fmt: skip
            for n in [None, *counts]:
                torch.manual_seed(1000 + k)
                t0, report = time.perf_counter(), None
                try:
                    res = hf_fvo.generate(model, ids, grammar=grammar, phi="uniform",
                                          do_sample=True, top_k=0, particles=n,
                                          max_new_tokens=args.max_new_tokens,
                                          return_dict_in_generate=True)  # fmt: skip
                    new, refused = res.sequences[0, ids.shape[1] :].tolist(), None
                    report = res["particles"][0] if n else None
                except (BudgetTooSmallError, BudgetUndecidedError, CheckFailedError) as exc:
                    new, refused = [], f"{type(exc).__name__}: {exc}"
                seconds = time.perf_counter() - t0
                body, status, valid, why = outcome(tok, row["schema"], new, eos, refused)
                records.append({
                    "layout": layout, "particles": n or 0, "source": row["source"],
                    "name": row["name"], "budget": args.max_new_tokens, "tokens": len(body),
                    "steps": report.positions if report else len(body) + 1,
                    "status": status, "valid": valid, "why": why[:200],
                    "seconds": round(seconds, 3),
                    "log_z": None if report is None else report.log_z,
                    "min_ess": None if report is None else report.min_ess,
                    "mean_ess": None if report is None else sum(report.ess) / len(report.ess),
                    "text": tok.decode(body)[:2000], "unconstrained": free_text[:2000],
                })  # fmt: skip
                with progress.open("a") as fh:
                    fh.write(json.dumps(records[-1]) + "\n")
                z = "" if report is None else f" logZ={report.log_z:8.2f} ESS={report.min_ess:5.2f}"
                print(f"{layout:8s} N={n or 0:<3d} {row['name'][:24]:24s} {len(body):4d} tok "
                      f"{status:8s} valid={valid} {seconds:7.1f} s{z}", flush=True)  # fmt: skip
    table(records, args)
    import datasets

    datasets.Dataset.from_list(records).to_json(f"{args.out}/results-{args.max_new_tokens}.jsonl")


def finite(args: argparse.Namespace) -> None:
    """The demo's three-branch schema: μ* under each layout by exact exploration (24 tokens,
    unexplored mass at most 1e-3), its members, forwards and most likely texts."""
    from hf_fvo import Grammar
    from hf_fvo.eval import grammar_conditional_law
    from hf_fvo.eval.demo import SPEC_PROMPT, SPEC_SCHEMA
    from hf_fvo.models import load_default_model, load_default_tokenizer
    from hf_fvo.models.chat import chat_prompt

    tok, model = load_default_tokenizer(), load_default_model()
    prompt = chat_prompt(tok, SPEC_PROMPT)
    lines = ["## JSON layouts on a finite schema: exact μ* and its cost", "",
             f"{provenance()} The demo's schema and prompt (`hf_fvo.eval.demo.SPEC_SCHEMA`), "
             "`grammar_conditional_law(max_new_tokens=24, tol=1e-3)`.", "",
             "| layout | is_finite | members explored | forwards | seconds | most likely texts |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name, whitespace in LAYOUTS.items():
        g = Grammar.from_json_schema(SPEC_SCHEMA, tok, whitespace=whitespace)
        t0 = time.perf_counter()
        law = grammar_conditional_law(g, model, prompt, max_new_tokens=24, tol=1e-3,
                                      max_nodes=20_000)  # fmt: skip
        top = sorted(law.probs.items(), key=lambda kv: -kv[1])[:3]
        shown = ", ".join(f"`{json.dumps(tok.decode(k, skip_special_tokens=True))}` {p:.2f}"
                          for k, p in top)  # fmt: skip
        lines.append(f"| {name} | {g.is_finite} | {len(law.probs)} | {law.forwards} | "
                     f"{time.perf_counter() - t0:.1f} | {shown} |")  # fmt: skip
    publish(lines, args.write)


def _med(xs: list, fmt: str = "{:.2f}") -> str:
    xs = [x for x in xs if x is not None]
    return fmt.format(statistics.median(xs)) if xs else "—"


def laid_out(text: str) -> str:
    """How a text lays JSON out, complete or not: ``pretty`` (a newline between tokens),
    ``space`` (spaces only), ``compact``; ``prose`` where it does not start with an object or
    an array (a Markdown fence is skipped)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[-1].lstrip()
    if not body.startswith(("{", "[")):
        return "prose"
    inside = escaped = False
    seen = set()
    for c in body:
        if inside:
            inside, escaped = (escaped or c != '"'), (not escaped and c == "\\")
        elif c == '"':
            inside = True
        elif c in " \n\t\r":
            seen.add("pretty" if c == "\n" else "space")
    return "pretty" if "pretty" in seen else "space" if seen else "compact"


def table(records: list[dict], args: argparse.Namespace) -> str:
    names = list(dict.fromkeys(r["name"] for r in records))
    lines = [
        f"## JSON layouts on open real-world schemas ({args.particles} particles, "
        f"{args.max_new_tokens} new tokens)",
        "",
        f"{provenance('jsonschema')} Embedded SmolLM2-135M-Instruct, {len(names)} development "
        "schemas not known to be finite, the schema in the prompt, each layout's grammar "
        'interleaved with the same seed per schema. *compact*: `whitespace=""`; *space*: '
        '`whitespace=None` (`[ ]?`); *pretty*: `whitespace="pretty"`. *log Ẑ*: the particles\' '
        "estimate of log Pr[the model's own output is a member within the budget] (median over "
        "schemas, and its paired difference to compact on the same schema); *ESS*: the smallest "
        "over steps, and the mean, median over schemas; *s/token × compact*: the masked draw's "
        "seconds per generated token over the compact grammar's on the same schema (median).",
        "",
        "| layout | N | outputs | complete | **cut** | refused | valid | median tokens "
        "| log Ẑ | Δ log Ẑ vs compact | min ESS | mean ESS | s/token × compact |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["layout"], r["particles"], r["name"]): r for r in records}
    layouts = list(dict.fromkeys(r["layout"] for r in records))
    for layout in layouts:
        for n in sorted({r["particles"] for r in records}):
            rs = [r for r in records if r["layout"] == layout and r["particles"] == n]
            count = {k: sum(r["status"] == k for r in rs) for k in ("complete", "cut", "refused")}
            good = sum(bool(r["valid"]) for r in rs if r["status"] == "complete")
            base = [by.get(("compact", n, r["name"])) for r in rs]
            dz = [r["log_z"] - b["log_z"] for r, b in zip(rs, base, strict=True)
                  if b and r["log_z"] is not None and b["log_z"] is not None]  # fmt: skip
            per = [(r["seconds"] / max(r["steps"], 1)) / (b["seconds"] / max(b["steps"], 1))
                   for r, b in zip(rs, base, strict=True)
                   if b and r["status"] != "refused" and b["status"] != "refused"]  # fmt: skip
            lines.append(
                f"| {layout} | {n or 'masked'} | {len(rs)} | {count['complete']} | "
                f"**{count['cut']}** | {count['refused']} | {good}/{count['complete']} | "
                f"{_med([r['tokens'] for r in rs], '{:.0f}')} | "
                f"{_med([r['log_z'] for r in rs], '{:.1f}')} | {_med(dz, '{:+.1f}')} | "
                f"{_med([r['min_ess'] for r in rs])} | {_med([r['mean_ess'] for r in rs])} | "
                f"{_med(per) if n == 0 else '—'} |"
            )
    free = [laid_out(by[("compact", 0, name)]["unconstrained"]) for name in names
            if ("compact", 0, name) in by]  # fmt: skip
    kinds = {k: free.count(k) for k in dict.fromkeys(free)}
    lines += ["", "Unconstrained draws (one per schema, the same seed), by layout: "
              + ", ".join(f"{k} {v}" for k, v in kinds.items()) + "."]  # fmt: skip
    return publish(lines, args.write)


if __name__ == "__main__":
    main()
