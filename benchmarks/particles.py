"""Particles (Φ̂-twisted SMC) on open real-world schemas: validity, cut-offs, log Ẑ, ESS and cost.

Takes development-set schemas whose language is not known to be finite (as
``realworld_generation.py`` picks them: two per source among those that compile), asks
SmolLM2 for an instance (the schema in the prompt) and, interleaved with the same seed, draws
one masked sample (``hf_fvo.generate``, phi="uniform") and one output from N particles
(``particles=N``). Every complete output is validated with ``jsonschema`` (formats on) against
the original schema; *cut* counts outputs without EOS within the budget. Cost: the particle
run's wall time over the masked draw's, whole and per generated position (the particle run's
steps: until its longest particle ends); where its time goes (the model's forward, the
grammar's masks and draws, resampling: :attr:`ParticleReport.seconds`); and the *floor*: the
particle run's forward seconds alone over the masked draw's wall time, what N rows cost the
model before any grammar work. Several N (``--particles 8,32``) run interleaved, each beside
the same masked draw. Results go to a ``datasets`` JSONL file and a markdown table.

Usage:
    python benchmarks/particles.py --schemas 20 --particles 8,32 --max-new-tokens 256 --write
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from harness import DEV, provenance
from realworld_generation import outcome, pick_schemas, prompt_ids

WEIGHTS = Path(__file__).resolve().parents[1] / "hf_fvo" / "phi" / "weights"


def main() -> None:
    import hf_fvo
    from hf_fvo.errors import BudgetTooSmallError, BudgetUndecidedError, CheckFailedError
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--particles", default="8", help="N, a comma list (each its own row)")
    ap.add_argument("--phi", default="uniform", help="the twists, a comma list (each its own row)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="where the model runs (e.g. cuda)")
    ap.add_argument("--out", default="/tmp/hf_fvo_particles")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--resume", action="store_true", help="keep the schemas --out's progress "
                    "file finished, run the rest")  # fmt: skip
    ap.add_argument("--runs", default="8", help="most spelled-out tokens fed per forward, a "
                    "comma list (each its own row; 0: none)")  # fmt: skip
    args = ap.parse_args()
    import hf_fvo.generation.particles as particles

    runs = [int(r) for r in str(args.runs).split(",")]

    twists = args.phi.split(",")
    counts = [int(n) for n in str(args.particles).split(",")]
    tok, model = load_default_tokenizer(), load_default_model().to(args.device)
    rows = [json.loads(line) for line in DEV.open()]
    chosen = [(r, g) for r, g in pick_schemas(rows, 3 * args.schemas, tok, model.config.vocab_size)
              if g.is_finite is not True][: args.schemas]  # fmt: skip
    eos = set(tok.convert_tokens_to_ids([tok.eos_token]))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    progress = Path(args.out) / f"progress-{tag(args)}-{args.max_new_tokens}.jsonl"
    done = []  # --resume: the records of an interrupted run, their schemas skipped
    if args.resume and progress.exists():
        done = [json.loads(line) for line in progress.open()]
        finished = {r["name"] for r in done}  # (a schema's last engine may be missing)
        finished -= {done[-1]["name"]} if done else set()
        done = [r for r in done if r["name"] in finished]
    progress.write_text("".join(json.dumps(r) + "\n" for r in done))
    if args.device != "cpu":  # the first CUDA call pays for kernels and handles: not timed
        first = prompt_ids(tok, chosen[0][0]["schema"]).to(args.device)
        hf_fvo.generate(model, first, grammar=chosen[0][1], do_sample=True, top_k=0,
                        max_new_tokens=32)  # fmt: skip
    records = list(done)
    for k, (row, grammar) in enumerate(chosen):
        if any(r["name"] == row["name"] for r in done):
            continue
        ids = prompt_ids(tok, row["schema"]).to(args.device)
        engines = ["masked"] + [f"particles={n}, phi={t}" + (f", runs={r}" if len(runs) > 1 else "")
                                for n in counts for t in twists for r in runs]  # fmt: skip
        for engine in engines:
            torch.manual_seed(1000 + k)
            particles._MAX_RUN = int(engine.split("runs=")[1]) if "runs=" in engine else runs[0]
            t0 = time.perf_counter()
            report = None
            try:
                if engine == "masked":
                    res = hf_fvo.generate(model, ids, grammar=grammar, phi="uniform",
                                          do_sample=True, top_k=0,
                                          max_new_tokens=args.max_new_tokens,
                                          return_dict_in_generate=True)  # fmt: skip
                    out, spec = res.sequences, res.get("speculation")
                else:
                    res = hf_fvo.generate(model, ids, grammar=grammar,
                                          phi=twist(engine.split("phi=")[1].split(",")[0]),
                                          particles=int(engine.split(",")[0].split("=")[1]),
                                          do_sample=True,
                                          max_new_tokens=args.max_new_tokens,
                                          return_dict_in_generate=True)  # fmt: skip
                    out, report, spec = res.sequences, res["particles"][0], None
                new, refused = out[0, ids.shape[1] :].tolist(), None
            except (BudgetTooSmallError, BudgetUndecidedError, CheckFailedError) as exc:  # refused
                new, refused = [], str(exc)
            seconds = time.perf_counter() - t0
            body, status, valid, why = outcome(tok, row["schema"], new, eos, refused)
            # positions: the longest particle's tokens (a forward may take several)
            steps = report.positions if report else len(body) + 1
            if report is not None:
                per_forward = report.tokens_per_forward
            elif spec is not None and spec.emitted:  # the masked draw's free grammar drafts
                per_forward = sum(spec.emitted) / len(spec.emitted)
            else:
                per_forward = 1.0 if refused is None else None
            records.append({
                "engine": engine, "source": row["source"], "name": row["name"],
                "budget": args.max_new_tokens, "tokens": len(body), "steps": steps,
                "status": status, "valid": valid, "why": why[:200],
                "seconds": round(seconds, 3),
                "log_z": None if report is None else report.log_z,
                "mean_ess": None if report is None else sum(report.ess) / len(report.ess),
                "min_ess": None if report is None else report.min_ess,
                "resamplings": None if report is None else report.resamplings,
                "tokens_per_forward": per_forward,
                "forwards": None if report is None else len(report.ess),
                "phases": None if report is None else dict(report.seconds),
                "text": tok.decode(body)[:2000],
            })  # fmt: skip
            with progress.open("a") as fh:
                fh.write(json.dumps(records[-1]) + "\n")
            extra = "" if report is None else (
                f" logZ={report.log_z:8.2f} minESS={report.min_ess:5.2f} "
                f"resampled={report.resamplings}"
            )  # fmt: skip
            print(f"{engine:24s} {row['name'][:24]:24s} {len(body):4d} tok {status:8s} "
                  f"valid={valid} {seconds:7.1f} s{extra}", flush=True)  # fmt: skip
    print(table(records, args))
    import datasets  # last: the progress file above already holds every record

    datasets.Dataset.from_list(records).to_json(
        f"{args.out}/results-{tag(args)}-{args.max_new_tokens}.jsonl"
    )


def tag(args: argparse.Namespace) -> str:
    """The particle counts (and run lengths, if several) in a file name (``8+32``)."""
    runs = "" if "," not in str(args.runs) else "-runs" + str(args.runs).replace(",", "+")
    return str(args.particles).replace(",", "+") + runs


def twist(name: str):
    """A twist for ``phi=``: an estimator name, or ``learned-open`` (the learned-Φ checkpoint
    trained on open schemas; ``learned`` is the finite-schema one)."""
    if name != "learned-open":
        return name
    from hf_fvo.phi import PhiModel

    return PhiModel.from_pretrained(WEIGHTS / "smollm2-135m-instruct-open")


def med(xs: list, fmt: str = "{:.2f}") -> str:
    """The median of the values that are not ``None``, formatted ("—" if none)."""
    xs = [x for x in xs if x is not None]
    return fmt.format(statistics.median(xs)) if xs else "—"


def table(records: list[dict], args: argparse.Namespace) -> str:
    engines = list(dict.fromkeys(r["engine"] for r in records))
    where = "" if args.device == "cpu" else f", {args.device}"
    heading = (f"## Particles on open real-world schemas ({args.particles} particles, twists "
               f"{args.phi}, {args.max_new_tokens} new tokens{where})")  # fmt: skip
    lines = [
        heading,
        "",
        f"{provenance('jsonschema', device=args.device)} Embedded SmolLM2-135M-Instruct, "
        f"{len({r['name'] for r in records})} development schemas not known to be finite, one "
        "seeded draw per schema and engine (interleaved, the same seed), the schema in the "
        "prompt. *masked*: `hf_fvo.generate(do_sample=True, top_k=0)` (phi=uniform); "
        "*particles*: `hf_fvo.generate(particles=N, phi=twist, do_sample=True)`, one output "
        "drawn from the final weighted set. Validity: `jsonschema` with its format checker "
        "against the original schema. *s/position*: wall seconds over generated positions "
        "(for particles, the longest particle's); *ESS*: the mean over "
        "steps of the effective sample size before resampling, per particle run (median over "
        "runs); *× masked*: the particle run's wall seconds over the masked draw's on the same "
        "schema (median, and the largest); *per position*: the same with each divided by its "
        "generated positions; *floor*: the particle run's forward seconds alone over the masked "
        "draw's wall seconds (what N rows cost the model), and *× floor* the wall time over "
        "its own forward's; *forward / grammar / resampling*: the shares of the particle runs' "
        "summed wall time; *tokens per forward*: per particle and forward it took part in "
        "(the grammar's spelled-out runs ride along), for the masked draw per target forward "
        "of its free grammar drafts (median over schemas).",
        "",
        "| engine | outputs | complete | **cut off** | refused | complete and valid "
        "| median s/position | × masked | per position | floor | × floor "
        "| forward / grammar / resampling | tokens per forward | ESS (of N) | min ESS "
        "| resamplings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r["name"]: r for r in records if r["engine"] == "masked" and r["status"] != "refused"}
    for engine in engines:
        rs = [r for r in records if r["engine"] == engine]
        count = {k: sum(r["status"] == k for r in rs) for k in ("complete", "cut", "refused")}
        good = sum(bool(r["valid"]) for r in rs if r["status"] == "complete")
        live = [r for r in rs if r["status"] != "refused"]
        per = [r["seconds"] / max(r["steps"], 1) for r in live]
        paired = [(r, base[r["name"]]) for r in live if r["name"] in base]
        wall = [r["seconds"] / m["seconds"] for r, m in paired]
        pos = [(r["seconds"] / max(r["steps"], 1)) / (m["seconds"] / max(m["steps"], 1))
               for r, m in paired]  # fmt: skip
        timed = [(r, m) for r, m in paired if r.get("phases")]
        floor = [r["phases"]["forward"] / m["seconds"] for r, m in timed]
        over = [r["seconds"] / r["phases"]["forward"] for r, _ in timed]
        total = sum(r["seconds"] for r, _ in timed) or 1.0
        shares = "/".join(
            f"{100 * sum(r['phases'][k] for r, _ in timed) / total:.0f}%"
            for k in ("forward", "grammar", "resampling")
        ) if timed else "—"  # fmt: skip
        masked = engine == "masked"

        def most(xs: list, masked: bool = masked) -> str:
            return "1" if masked or not xs else f"{med(xs)} (max {max(xs):.2f})"

        lines.append(
            f"| {engine} | {len(rs)} | {count['complete']} | **{count['cut']}** | "
            f"{count['refused']} | {good}/{count['complete']} | {med(per, '{:.3f}')} | "
            f"{most(wall)} | {most(pos)} | {'—' if masked else most(floor)} | "
            f"{'—' if masked else most(over)} | {'—' if masked else shares} | "
            f"{med([r.get('tokens_per_forward') for r in live])} | "
            f"{med([r.get('mean_ess') for r in live])} | {med([r.get('min_ess') for r in live])} | "
            f"{med([r.get('resamplings') for r in live], '{:.0f}')} |"
        )
    z = [r["log_z"] for r in records if r["log_z"] is not None]
    if z:
        lines += ["", f"log Ẑ over the particle runs: median {statistics.median(z):.1f}, "
                  f"min {min(z):.1f}, max {max(z):.1f}."]  # fmt: skip
    text = "\n".join(lines)
    if args.write:
        from harness import write_section

        write_section(lines[0], text)
    return text


if __name__ == "__main__":
    main()
