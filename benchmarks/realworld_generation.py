"""Sample JSON from real-world schemas with the embedded model and validate every output.

Takes schemas from the development set (``../shared/realworld/jsonschemabench-dev.jsonl``),
two per source in a fixed order among those that compile, asks SmolLM2 for an instance of each
(the schema in the prompt), samples with ``hf_fvo.generate`` and checks every complete output
(one that ended with EOS within the budget) with ``jsonschema`` and its format checker against
the *original* schema, and counts the outputs the budget cut off (no EOS) or that were refused
before generating (``BudgetTooSmallError``). ``--engines`` runs Outlines' processors (outlines-
core, XGrammar, llguidance) on the same schemas, prompts, seeds and budget, interleaved. Results
go to a ``datasets`` JSONL file and a markdown table.

Usage:
    python benchmarks/realworld_generation.py --schemas 20 --samples 3 --max-new-tokens 64 \\
        --engines hf_fvo,outlines_core,xgrammar,llguidance --write
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from pathlib import Path

import torch
from harness import DEV, provenance


def pick_schemas(
    rows: list[dict], count: int, tokenizer, vocab_size: int, exclude: frozenset = frozenset()
) -> list[tuple]:
    """``count`` schemas that compile, spread over the sources, in a fixed order; names in
    ``exclude`` (e.g. schemas some weights were trained on) are passed over where they fall in
    that order, so the others' order does not change."""
    from hf_fvo import Grammar
    from hf_fvo.errors import GrammarError

    by_source: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_source[row["source"]].append(row)
    rng = random.Random(0)
    for items in by_source.values():
        rng.shuffle(items)
    chosen: list[tuple] = []
    while len(chosen) < count and any(by_source.values()):
        for source in sorted(by_source):
            while by_source[source] and len(chosen) < count:
                row = by_source[source].pop()
                if row["name"] in exclude:
                    continue
                try:
                    g = Grammar.from_json_schema(row["schema"], tokenizer, whitespace="",
                                                 vocab_size=vocab_size)  # fmt: skip
                except GrammarError:
                    continue
                chosen.append((row, g))
                break
    return chosen


def validate(schema: dict, text: str) -> tuple[bool, str]:
    import jsonschema

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return False, f"not JSON: {exc}"
    cls = jsonschema.validators.validator_for(schema)
    errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    return (not errors), (errors[0].message[:200] if errors else "")


def outcome(tok, schema: dict, new: list[int], eos: set[int], refused: str | None) -> tuple:
    """``(body, status, valid, why)`` of a draw: the tokens before EOS, and ``refused``,
    ``cut`` (no EOS within the budget) or ``complete`` with its ``jsonschema`` verdict."""
    end = next((i for i, t in enumerate(new) if t in eos), None)
    body = new if end is None else new[:end]
    if refused:
        return body, "refused", None, refused
    if end is None:
        return body, "cut", False, "no EOS within the budget"
    valid, why = validate(schema, tok.decode(body))
    return body, "complete", valid, why


def prompt_ids(tokenizer, schema: dict) -> torch.Tensor:
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > 1500:
        text = text[:1500] + " …"
    message = f"Write one JSON value that is valid under this JSON schema:\n{text}"
    out = tokenizer.apply_chat_template([{"role": "user", "content": message}],
                                        add_generation_prompt=True, return_dict=True)  # fmt: skip
    return torch.tensor([out["input_ids"]])


PEERS = ("outlines_core", "xgrammar", "llguidance")


def draw(engine: str, model, wrapped, tok, row: dict, grammar, ids, budget: int, phi: str):
    """One seeded sample: (token ids after the prompt, why it was refused or None)."""
    import transformers

    import hf_fvo
    from hf_fvo.errors import BudgetTooSmallError, BudgetUndecidedError

    if engine == "hf_fvo":
        try:
            out = hf_fvo.generate(model, ids, grammar=grammar, phi=phi, do_sample=True, top_k=0,
                                  max_new_tokens=budget)  # fmt: skip
        except (BudgetTooSmallError, BudgetUndecidedError) as exc:
            return [], f"{type(exc).__name__}: {exc}"
        return out[0, ids.shape[1] :].tolist(), None
    from outlines.backends import get_json_schema_logits_processor

    try:  # Outlines' processors keep one state per row: a fresh one per call
        proc = get_json_schema_logits_processor(engine, wrapped, json.dumps(row["schema"]))
    except Exception as exc:  # a peer that cannot compile the schema: counted as refused
        return [], f"compile: {type(exc).__name__}: {str(exc)[:80]}"
    out = model.generate(ids, logits_processor=transformers.LogitsProcessorList([proc]),
                         do_sample=True, top_k=0, max_new_tokens=budget,
                         pad_token_id=tok.eos_token_id)  # fmt: skip
    return out[0, ids.shape[1] :].tolist(), None


def main() -> None:
    import datasets
    import outlines

    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--phi", default="uniform")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--engines", default="hf_fvo", help="comma list: hf_fvo," + ",".join(PEERS))
    ap.add_argument("--compile-timeout", type=float, default=60.0, help="seconds, peers")
    ap.add_argument("--out", default="/tmp/hf_fvo_realworld_generation")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    engines = args.engines.split(",")

    tok, model = load_default_tokenizer(), load_default_model()
    peers = [e for e in engines if e != "hf_fvo"]
    wrapped = outlines.from_transformers(model, tok) if peers else None
    # a peer compiles each schema first in a worker process with a memory cap and a timeout
    # (outlines-core can exhaust the machine's memory on some schemas): only what compiled there
    # is generated with in this process
    from grammar_engines import Pool

    pools = {e: Pool(e, memory_gb=4.0) for e in peers}
    rows = [json.loads(line) for line in DEV.open()]
    chosen = pick_schemas(rows, args.schemas, tok, model.config.vocab_size)
    eos = set(tok.convert_tokens_to_ids([tok.eos_token]))
    records = []
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # every record is also appended as it is made, so a run stopped early keeps what it drew
    progress = Path(args.out) / f"progress-{args.max_new_tokens}-{'-'.join(engines)}.jsonl"
    progress.write_text("")
    for row, grammar in chosen:
        ids = prompt_ids(tok, row["schema"])
        compiled = {e: pools[e].run({"schema": row["schema"], "texts": []}, args.compile_timeout)
                    for e in peers}  # fmt: skip
        for sample in range(args.samples):
            for engine in engines:  # interleaved: the same seed for every engine
                torch.manual_seed(1000 * (len(records) // len(engines)) + sample)
                t0 = time.perf_counter()
                check = compiled.get(engine, {"status": "ok"})
                if check["status"] != "ok":
                    new, refused = [], f"compile: {check['status']} {check.get('error', '')[:80]}"
                else:
                    new, refused = draw(engine, model, wrapped, tok, row, grammar, ids,
                                        args.max_new_tokens, args.phi)  # fmt: skip
                seconds = time.perf_counter() - t0
                body, status, valid, why = outcome(tok, row["schema"], new, eos, refused)
                text = tok.decode(body)
                records.append({
                    "engine": engine, "source": row["source"], "name": row["name"],
                    "sample": sample, "budget": args.max_new_tokens, "tokens": len(body),
                    "status": status, "valid": valid, "why": why, "seconds": round(seconds, 2),
                    "text": text[:2000],
                })  # fmt: skip
                with progress.open("a") as fh:
                    fh.write(json.dumps(records[-1]) + "\n")
                print(f"{engine:13s} {row['name'][:26]:26s} {len(body):4d} tok {status:8s} "
                      f"valid={valid} {seconds:7.1f} s {why[:60]}", flush=True)  # fmt: skip
    datasets.Dataset.from_list(records).to_json(
        f"{args.out}/results-{args.max_new_tokens}-{'-'.join(engines)}.jsonl"
    )
    heading = (f"## Real-world schemas at a budget of {args.max_new_tokens} new tokens: "
               f"cut-off outputs and validity ({', '.join(engines)}; {args.samples} draws; "
               f"phi={args.phi})")  # fmt: skip
    lines = [
        heading,
        "",
        f"{provenance('jsonschema', 'outlines', 'outlines-core', 'xgrammar', 'llguidance')} "
        f"Embedded SmolLM2-135M-Instruct, {len(chosen)} development schemas "
        f"({len({r['source'] for r in records})} sources) × {args.samples} seeded draws, "
        "`do_sample=True, top_k=0`, the schema in the prompt. hf_fvo: compact JSON, strict "
        "objects; the Outlines processors (outlines 1.x, through `model.generate(logits_"
        "processor=…)`) with their defaults, each schema compiled first in a worker (4 GB, "
        f"{args.compile_timeout:.0f} s; what fails there counts as refused). *Cut*: no EOS within "
        "the budget (not JSON). *Refused*: hf_fvo's `BudgetTooSmallError` (a proof) or "
        "`BudgetUndecidedError` (between its bounds) before generating, or "
        "a peer that does not compile the schema. "
        "Validity: `jsonschema` with its format checker, against the original schema.",
        "",
        "| engine | outputs | complete | **cut off** | refused | complete and valid |",
        "|---|---|---|---|---|---|",
    ]
    for pool in pools.values():
        pool.close()
    for engine in engines:
        rs = [r for r in records if r["engine"] == engine]
        count = {k: sum(r["status"] == k for r in rs) for k in ("complete", "cut", "refused")}
        good = sum(bool(r["valid"]) for r in rs if r["status"] == "complete")
        lines.append(f"| {engine} | {len(rs)} | {count['complete']} | **{count['cut']}** | "
                     f"{count['refused']} | {good}/{count['complete']} |")  # fmt: skip
    refusals = sorted({(r["engine"], r["name"], r["why"].split(":")[0]) for r in records
                       if r["status"] == "refused" and r["engine"] == "hf_fvo"})  # fmt: skip
    if refusals:
        lines += ["", "hf_fvo's refusals (schema: error): "
                  + "; ".join(f"{name}: {kind}" for _, name, kind in refusals) + "."]  # fmt: skip
    table = "\n".join(lines)
    print(table)
    if args.write:
        from harness import write_section

        write_section(lines[0], table)


if __name__ == "__main__":
    main()
