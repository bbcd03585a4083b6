"""Φ̂ on open real schemas: token-cap endings and distance to an importance-sampled μ* reference.

No oracle enumerates an open schema's language, so each estimator's sampling law is compared
with μ* through importance sampling (``hf_fvo.eval.reference.importance_sample``): every draw of
``hf_fvo.generate(phi=…)`` carries its exact log q(x) (read from the scores it was sampled from),
so ``p(x)/q(x)`` weights it towards μ* = p(x)·1[x ∈ L, |x| ≤ budget]/Z whatever the proposal.

Per schema (the development set's schemas that compile, spread over its sources, in the fixed
order of ``benchmarks/realworld_generation.py``, passing over those the shipped learned-Φ weights
were trained on) and per estimator, ``2n`` draws (with the same seeds for every estimator: common
random numbers, so two estimators with one law give the same draws and any difference is the
estimators', not the dice's) are split into halves A and B. The reference built from every
estimator's half A is compared with each estimator's half B, and the other way round
(cross-fitting: a sampler is never compared with a reference containing its own draws); the two
distances are averaged. The reference pools the half's draws of every estimator by multiple
importance sampling (balance heuristic: a draw weighs p(x) over the estimators' average q(x),
each q recomputed by teacher forcing), so an estimator that collapses on a small part of the
language — its own weights then all alike, a high ESS that says nothing — cannot make the
reference in its image. The distance of a draw set to the reference is the mean, over the
statistics the schema has, of

- the TV of the first-token law,
- the Kolmogorov distance of the length law (a draw cut off by the budget has length = budget),
- the TV of the value law of each top-level property whose schema is an enum, a const or a
  boolean (absent, and output that is not complete JSON, are values of their own).

Usage:
    python benchmarks/open_schemas.py --schemas 24 --draws 12 --write
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path

import numpy as np
from harness import DEV, provenance

Weighted = list[tuple[tuple[int, ...], float]]  # (draw, weight); weights sum to 1


def categorical_fields(schema: dict) -> list[str]:
    """Top-level properties whose values form a small categorical law (enum, const, boolean)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    out = []
    for key, sub in props.items():
        if isinstance(sub, dict) and (
            "enum" in sub or "const" in sub or sub.get("type") == "boolean"
        ):
            out.append(key)
    return out


def tv(a: Weighted, b: Weighted, f: Callable[[tuple[int, ...]], Hashable]) -> float:
    la: dict[Hashable, float] = {}
    lb: dict[Hashable, float] = {}
    for law, draws in ((la, a), (lb, b)):
        for x, w in draws:
            law[f(x)] = law.get(f(x), 0.0) + w
    return 0.5 * sum(abs(la.get(k, 0.0) - lb.get(k, 0.0)) for k in {*la, *lb})


def kolmogorov(a: Weighted, b: Weighted) -> float:
    points = sorted({len(x) for x, _ in a + b})
    cdf = lambda d, t: sum(w for x, w in d if len(x) <= t)  # noqa: E731
    return max(abs(cdf(a, t) - cdf(b, t)) for t in points)


def distance(draws: Weighted, ref: Weighted, decode: Callable, fields: list[str]) -> float:
    parts = [tv(draws, ref, lambda x: x[0]), kolmogorov(draws, ref)]

    def field(key: str) -> Callable:
        def value(x: tuple[int, ...]) -> Hashable:
            try:
                obj = json.loads(decode(x))
            except ValueError:
                return "<not complete JSON>"
            if not isinstance(obj, dict):
                return "<not an object>"
            return json.dumps(obj[key], sort_keys=True) if key in obj else "<absent>"

        return value

    parts += [tv(draws, ref, field(k)) for k in fields]
    return float(np.mean(parts))


def mixture_references(
    model, ids, grammar, halves: dict, budget: int, phis: dict | None = None
) -> list[tuple[Weighted, float]]:
    """Per half: every estimator's draws of that half pooled into one μ* reference by multiple
    importance sampling (balance heuristic, ``hf_fvo.eval.reference.mixture_sample``), with its
    ESS. Each member draw's p(x) and q_j(x) under every estimator j are recomputed by teacher
    forcing (once per distinct draw). ``phis``: name → ``phi=`` value, where not the name."""
    from hf_fvo.eval.reference import mixture_sample, sequence_log_probs

    proposals = [(phis or {}).get(name, name) for name in halves]
    members = sorted({x for pair in halves.values() for h in pair
                      for x, w in zip(h.sequences, h.log_weights, strict=True)
                      if np.isfinite(w)})  # fmt: skip
    scored: dict = {}
    if members:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # learned Φ outside its training says so, again
            log_p, log_q = sequence_log_probs(model, ids, grammar, members, proposals,
                                              max_new_tokens=budget)  # fmt: skip
        scored = {x: (log_p[k], log_q[k]) for k, x in enumerate(members)}
    out = []
    for h in (0, 1):
        samples = [pair[h] for pair in halves.values()]
        seqs = [x for smp in samples for x in smp.sequences]
        none = (-np.inf, np.full(len(proposals), -np.inf))
        log_p = [scored.get(x, none)[0] for x in seqs]
        log_q = [scored.get(x, none)[1] for x in seqs]
        ref = mixture_sample(samples, log_p, log_q)
        out.append(([(x, float(w)) for x, w in zip(seqs, ref.weights, strict=True) if w > 0],
                    ref.ess))  # fmt: skip
    return out


def trained_on() -> frozenset:
    """Names of the open schemas behind the shipped learned-Φ weights (every checkpoint)."""
    from hf_fvo.phi.learned import DEFAULT_WEIGHTS

    names: set = set()
    for config in DEFAULT_WEIGHTS.parent.glob("*/config.json"):
        names |= set(json.loads(config.read_text()).get("training", {}).get("open_schemas", []))
    return frozenset(names)


def main() -> None:
    import datasets
    import transformers
    from realworld_generation import pick_schemas, prompt_ids

    from hf_fvo.errors import OutsideTrainingWarning
    from hf_fvo.eval.reference import WeightedSample, importance_sample
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=24)
    ap.add_argument("--draws", type=int, default=12, help="draws per half (2n per estimator)")
    ap.add_argument("--phi", nargs="+", default=["uniform", "learned"])
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/open_schemas")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--from-results", action="store_true",
                    help="render from --out's results.jsonl, no sampling")  # fmt: skip
    args = ap.parse_args()
    if args.from_results:
        records = [json.loads(line) for line in (Path(args.out) / "results.jsonl").open()]
        return render(records, args, sum(v for r in records for k, v in r.items()
                                         if k.startswith("seconds_")))  # fmt: skip
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    tok, model = load_default_tokenizer(), load_default_model()
    rows = [json.loads(line) for line in DEV.open()]
    seen = trained_on()  # held out: schemas the shipped learned-Φ weights were trained on
    chosen = pick_schemas(rows, args.schemas, tok, model.config.vocab_size, exclude=seen)
    n, budget, t0 = args.draws, args.max_new_tokens, time.perf_counter()
    records = []
    for i, (row, g) in enumerate(chosen):
        ids = prompt_ids(tok, row["schema"])
        eos = set(g.eos_token_ids)
        decode = lambda x, eos=eos: tok.decode([t for t in x if t not in eos])  # noqa: E731
        fields = categorical_fields(row["schema"])
        halves: dict[str, tuple[WeightedSample, WeightedSample]] = {}
        rec: dict = {"source": row["source"], "schema": row["name"], "fields": len(fields),
                     "finite": g.is_finite is True}  # fmt: skip
        for phi in args.phi:
            t1 = time.perf_counter()
            with warnings.catch_warnings():  # learned Φ outside its training says so; counted
                warnings.simplefilter("ignore", OutsideTrainingWarning)
                s = importance_sample(model, ids, g, 2 * n, proposal=phi, max_new_tokens=budget,
                                      batch_size=2 * n, seed=args.seed + 100 * i)  # fmt: skip
            rec[f"seconds_{phi}"] = time.perf_counter() - t1
            halves[phi] = tuple(
                WeightedSample(s.sequences[k : k + n], s.log_weights[k : k + n]) for k in (0, n)
            )  # fmt: skip
            rec[f"capped_{phi}"] = float(np.mean([not (x and x[-1] in eos) for x in s.sequences]))
            rec[f"length_{phi}"] = float(np.mean([len(x) for x in s.sequences]))
            rec[f"ess_{phi}"] = s.ess
        t1 = time.perf_counter()
        mixed = mixture_references(model, ids, g, halves, budget)
        rec["seconds_reference"] = time.perf_counter() - t1
        refs = [ref for ref, _ in mixed]
        rec["ref_ess"] = [ess for _, ess in mixed]
        for phi in args.phi:
            if not all(refs):
                rec[f"distance_{phi}"] = None
                continue
            own = [[(x, 1 / n) for x in halves[phi][h].sequences] for h in (0, 1)]
            rec[f"distance_{phi}"] = float(np.mean(
                [distance(own[1 - h], refs[h], decode, fields) for h in (0, 1)]))  # fmt: skip
        records.append(rec)
        print(json.dumps(rec), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(records).to_json(str(out / "results.jsonl"))
    render(records, args, time.perf_counter() - t0)


def render(records: list[dict], args: argparse.Namespace, seconds: float) -> None:
    """The docs section (printed; written into docs/benchmarks.md with ``--write``)."""

    from hf_fvo.phi.learned import DEFAULT_OPEN_WEIGHTS

    n, budget = args.draws, args.max_new_tokens
    base, others = args.phi[0], args.phi[1:]
    measured = [r for r in records if r[f"distance_{base}"] is not None]
    lines = [
        "## Open real schemas: cap endings and distance to the importance-sampled μ*",
        "",
        f"{provenance()} {seconds:.0f} s. Embedded SmolLM2-135M-Instruct, the schema in the "
        f"prompt, compact JSON, `do_sample=True, top_k=0`, {2 * n} draws per estimator and "
        f"schema, {budget} new tokens at most; the {len(trained_on())} open schemas the shipped "
        "learned-Φ weights were trained on are passed over. Distance: the mean of the "
        "first-token TV, the length law's Kolmogorov distance and each enum/const/boolean "
        "top-level field's TV, between one half of an estimator's draws and the μ* reference "
        "from the other halves of every estimator, pooled by multiple importance sampling "
        "(balance heuristic; cross-fitted, averaged over both splits).",
        "",
        "| source | schema | ref. ESS (A, B) | "
        + " | ".join(f"capped {p} | distance {p}" for p in args.phi) + " |",
        "|---|---|---|" + "---|---|" * len(args.phi),
    ]  # fmt: skip
    for r in records:
        cells = [f"{r['ref_ess'][0]:.1f}, {r['ref_ess'][1]:.1f}"]
        for p in args.phi:
            d = r[f"distance_{p}"]
            cells += [f"{r[f'capped_{p}']:.2f}", "—" if d is None else f"{d:.3f}"]
        lines.append(f"| {r['source']} | {r['schema'][:40]} | " + " | ".join(cells) + " |")
    lines += [""]
    for p in args.phi:
        caps = sum(r[f"capped_{p}"] for r in records) * 2 * n
        lines.append(f"- `{p}`: {caps:.0f} of {2 * n * len(records)} draws cut off by the budget.")
    for p in others:
        closer = sum(r[f"distance_{p}"] < r[f"distance_{base}"] for r in measured)
        more_caps = sum(r[f"capped_{p}"] > r[f"capped_{base}"] for r in records)
        mean_p = np.mean([r[f"distance_{p}"] for r in measured]) if measured else float("nan")
        mean_b = np.mean([r[f"distance_{base}"] for r in measured]) if measured else float("nan")
        lines.append(
            f"- `{p}` closer to the μ* reference than `{base}` on {closer} of {len(measured)} "
            f"rows with a reference (mean distance {mean_p:.3f} vs {mean_b:.3f}); more cap endings "
            f"than `{base}` on {more_caps} of {len(records)} rows."
        )  # fmt: skip
    finite = sum(r["finite"] for r in records)
    lines.append(f"- Schemas whose language is known to be finite: {finite} of {len(records)} "
                 "(`phi=\"learned\"` uses the weights trained on finite languages there, and "
                 f"`{DEFAULT_OPEN_WEIGHTS.name}` on the others).")  # fmt: skip
    from harness import publish

    publish(lines, args.write)


if __name__ == "__main__":
    main()
