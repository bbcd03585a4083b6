"""Learned Φ against OneStep and masking: exact TV to μ* on held-out grammars.

1. Leave one schema out over the finite JSON schemas of the training set (the suites' finite
   rows and enum schemas from the development set): train on every other label (Markov families
   included), then compute the exact TV(μ_Φ̂, μ*) on the held-out schema with SmolLM2 for
   Φ̂ = uniform (masking), onestep and the learned weights. μ* is explored until the unexplored
   mass is ≤ ``--tol``; each sampler's law is evaluated on μ*'s explored support and whatever it
   puts elsewhere counts in full, so each TV is exact up to ``tol``.
2. The paper suite's Dyck and budget rows, whose Markov LMs (and grammar sizes) the training set
   does not contain, with the weights trained on all labels: exact TV by ``product_tv`` where the
   laws' ratios collapse, else ``sampled_product_tv`` (± its standard error).

Usage (labels from ``hf-fvo train-phi``, which wrote ``labels.parquet`` beside the weights):
    hf-fvo train-phi --out phi --schemas ../shared/realworld/jsonschemabench-dev.jsonl
    python benchmarks/learned_phi.py --labels phi/labels.parquet --weights phi \
        --schemas ../shared/realworld/jsonschemabench-dev.jsonl --write
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from harness import machine, versions


def finite_schemas(schemas: str | None, count: int) -> list[tuple[str, dict, str]]:
    """The finite schemas ``hf-fvo train-phi`` labels by default, in its order."""
    from hf_fvo.eval.bench import load_suite
    from hf_fvo.training.corpus import enum_schemas

    out = []
    for name in ("paper", "structured"):
        for r in load_suite(name):
            if r["oracle"] == "trie" and r["family"] == "json" and r["model"] == "default":
                out.append((r["name"], json.loads(r["grammar"]), r["prompt"]))
    if schemas:
        rows = [json.loads(x) for x in Path(schemas).read_text().splitlines() if x.strip()]
        out += enum_schemas(rows, count)
    return out


def exact_tvs(model, tokenizer, schema: dict, text: str, estimators: dict, tol: float) -> dict:
    from hf_fvo import Grammar
    from hf_fvo.eval import TerminalLaw, sampling_law_on
    from hf_fvo.models import chat_prompt
    from hf_fvo.phi import ExactPhi, PrefixLM

    g = Grammar.from_json_schema(schema, tokenizer, whitespace="", backend="automaton",
                                 vocab_size=model.config.vocab_size)  # fmt: skip
    prompt = chat_prompt(tokenizer, text)
    lm = PrefixLM(model, batch_size=64, cache_rows=60_000)
    explored = ExactPhi(g, lm, tol=tol, max_nodes=60_000).root_exploration(prompt)
    star = TerminalLaw.from_log_weights(explored.completions(), explored.residual)
    out = {"support": len(star.probs), "star_residual": star.residual}
    for name, phi in estimators.items():
        law = sampling_law_on(g, lm, prompt, phi if isinstance(phi, str) else phi(g), star.probs)
        out[name] = law.tv(star) + law.residual / 2
    return out


def markov_rows(weights) -> list[dict]:
    from hf_fvo.errors import GrammarTooLargeError
    from hf_fvo.eval import product_tv, sampled_product_tv
    from hf_fvo.eval.bench import load_suite, suite_grammar, suite_model

    out = []
    for row in load_suite("paper"):
        if row["oracle"] != "markov":
            continue
        lm = suite_model(row, None)
        g, prompt = suite_grammar(row, None, lm.config.vocab_size)
        budget = int(row["max_new_tokens"])
        rec = {"row": row["name"]}
        for name, phi in (("uniform", "uniform"), ("onestep", "onestep"), ("learned", weights)):
            try:
                rec[name] = product_tv(g, lm, prompt, phi, "exact", max_new_tokens=budget,
                                       max_groups=2_000_000).tv  # fmt: skip
                rec[name + "_se"] = 0.0
            except GrammarTooLargeError:
                rec[name], rec[name + "_se"] = sampled_product_tv(
                    g, lm, prompt, phi, "exact", samples=20_000, max_new_tokens=budget, seed=0
                )
        rec["reduction_vs_uniform"] = 1 - rec["learned"] / rec["uniform"]
        out.append(rec)
    return out


def save(out: Path, loso: list[dict], kept: dict[str, dict], markov: list[dict]) -> None:
    """Both tables as JSON lines (after every held-out schema, so a long run can be resumed),
    with the kept rows this run has not reached yet."""
    import datasets

    out.mkdir(parents=True, exist_ok=True)
    seen = {r["schema"] for r in loso}
    rows = loso + [r for name, r in kept.items() if name not in seen]
    datasets.Dataset.from_list(rows).to_json(str(out / "loso.jsonl"))
    datasets.Dataset.from_list(markov).to_json(str(out / "markov.jsonl"))


def main() -> None:
    import datasets

    from hf_fvo.models import load_default_model, load_default_tokenizer
    from hf_fvo.phi import LearnedPhi, PhiModel
    from hf_fvo.training.fit import train_phi_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", required=True, help="labels.parquet from hf-fvo train-phi")
    ap.add_argument("--weights", help="weights trained on all labels (default: train here)")
    ap.add_argument("--schemas", help="the --schemas file train-phi used")
    ap.add_argument("--finite", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--only", nargs="*", help="held-out schemas whose name contains one of these")
    ap.add_argument("--out", default="benchmarks/results/learned_phi")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out (LOSO rows by schema, Markov rows) and "
                    "compute only the missing ones")  # fmt: skip
    args = ap.parse_args()
    datasets.disable_progress_bars()
    labels = datasets.Dataset.from_parquet(args.labels)
    model, tokenizer = load_default_model(), load_default_tokenizer()
    t0 = time.perf_counter()

    out = Path(args.out)
    done = {"loso": {}, "markov": []}
    if args.resume:
        for part in done:
            f = out / f"{part}.jsonl"
            rows = [json.loads(x) for x in f.read_text().splitlines() if x] if f.exists() else []
            done[part] = {r["schema"]: r for r in rows} if part == "loso" else rows
    if done["markov"]:
        markov = done["markov"]
    else:
        full = PhiModel.from_pretrained(args.weights) if args.weights else train_phi_model(
            labels, epochs=args.epochs)  # fmt: skip
        markov = markov_rows(full)
    for r in markov:
        print(json.dumps(r), flush=True)

    loso = []
    groups = labels["group"]
    for name, schema, text in finite_schemas(args.schemas, args.finite):
        if name in done["loso"]:
            loso.append(done["loso"][name])
            continue
        if args.only and not any(k in name for k in args.only):
            continue
        keep = [i for i, g in enumerate(groups) if g not in (name, name + "/no-iid")]
        if len(keep) == len(groups):
            print(f"{name}: not in the labels, skipped", flush=True)
            continue
        held = train_phi_model(labels.select(keep), epochs=args.epochs)
        ests = {"uniform": "uniform", "onestep": "onestep",
                "learned": lambda g, w=held: LearnedPhi(g, weights=w)}  # fmt: skip
        rec = {"schema": name, **exact_tvs(model, tokenizer, schema, text, ests, args.tol)}
        rec["reduction_vs_onestep"] = 1 - rec["learned"] / rec["onestep"]
        loso.append(rec)
        print(json.dumps(rec), flush=True)
        save(out, loso, done["loso"], markov)
    save(out, loso, done["loso"], markov)

    lines = ["## Learned Φ: exact TV to μ* on held-out grammars", ""]
    lines.append(
        f"Command: `python benchmarks/learned_phi.py --labels {args.labels} --schemas "
        f"{args.schemas} --finite {args.finite} --epochs {args.epochs} --tol {args.tol:g}"
        f"{' --weights ' + args.weights if args.weights else ''}"
        f"{' --resume' if args.resume else ''} --write`; labels from "
        "`hf-fvo train-phi` (the command is in the weights' config.json). Machine: "
        f"{machine()}, {versions()}; {time.strftime('%Y-%m-%d')}; "
        f"{time.perf_counter() - t0:.0f} s"
        f"{' (this invocation; rows it kept were timed by earlier ones)' if args.resume else ''}."
    )
    lines += ["", "Leave one schema out (SmolLM2-135M-Instruct, compact JSON, token-level laws; "
              f"μ* explored to tol {args.tol:g}):", "",
              "| held-out schema | strings | TV masking | TV onestep | TV learned | learned vs "
              "onestep | learned ≤ masking |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in loso:
        lines.append(f"| {r['schema']} | {r['support']} | {r['uniform']:.4f} | {r['onestep']:.4f} "
                     f"| {r['learned']:.4f} | {-100 * r['reduction_vs_onestep']:+.1f} % | "
                     f"{'yes' if r['learned'] <= r['uniform'] else '**no**'} |")  # fmt: skip
    if loso:
        red = np.mean([r["reduction_vs_onestep"] for r in loso])
        worse = sum(r["learned"] > r["uniform"] for r in loso)
        lines += ["", f"Mean change of TV from onestep to learned: {-100 * red:+.1f} %; learned "
                  f"above masking on {worse} of {len(loso)} held-out schemas."]  # fmt: skip
    lines += ["", "Markov rows of the paper suite (LMs not in the training set; ± is the "
              "standard error where the TV is sampled, blank where exact):", "",
              "| row | TV masking | TV onestep | TV learned | reduction from masking |",
              "|---|---|---|---|---|"]  # fmt: skip

    def cell(r: dict, k: str) -> str:
        return f"{r[k]:.4f}" + (f" ± {r[k + '_se']:.4f}" if r[k + "_se"] else "")

    for r in markov:
        reduction = 100 * r["reduction_vs_uniform"]
        lines.append(f"| {r['row']} | {cell(r, 'uniform')} | {cell(r, 'onestep')} | "
                     f"{cell(r, 'learned')} | {reduction:.1f} % |")  # fmt: skip
    from harness import publish

    publish(lines, args.write)


if __name__ == "__main__":
    main()
