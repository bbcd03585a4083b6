"""Sample JSON from real-world schemas with the embedded model and validate every output.

Takes schemas from the development set (``../shared/realworld/jsonschemabench-dev.jsonl``),
two per source in a fixed order among those that compile, asks SmolLM2 for an instance of each
(the schema in the prompt), samples with ``hf_fvo.generate`` and checks every complete output
(one that ended with EOS within the budget) with ``jsonschema`` and its format checker against
the *original* schema. Results go to a ``datasets`` JSONL file and a markdown table.

Usage:
    python benchmarks/realworld_generation.py --schemas 20 --samples 3 --phi onestep --write
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


def prompt_ids(tokenizer, schema: dict) -> torch.Tensor:
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > 1500:
        text = text[:1500] + " …"
    message = f"Write one JSON value that is valid under this JSON schema:\n{text}"
    out = tokenizer.apply_chat_template([{"role": "user", "content": message}],
                                        add_generation_prompt=True, return_dict=True)  # fmt: skip
    return torch.tensor([out["input_ids"]])


def main() -> None:
    import datasets

    import hf_fvo
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--phi", default="uniform")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--out", default="/tmp/hf_fvo_realworld_generation")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()

    tok, model = load_default_tokenizer(), load_default_model()
    rows = [json.loads(line) for line in DEV.open()]
    chosen = pick_schemas(rows, args.schemas, tok, model.config.vocab_size)
    records = []
    for row, grammar in chosen:
        ids = prompt_ids(tok, row["schema"])
        for sample in range(args.samples):
            torch.manual_seed(1000 * len(records) + sample)
            t0 = time.perf_counter()
            out = hf_fvo.generate(model, ids, grammar=grammar, phi=args.phi, do_sample=True,
                                  top_k=0, max_new_tokens=args.max_new_tokens)  # fmt: skip
            seconds = time.perf_counter() - t0
            new = out[0, ids.shape[1] :].tolist()
            complete = grammar.eos_token_id in new
            body = new[: new.index(grammar.eos_token_id)] if complete else new
            text = tok.decode(body)
            valid, why = validate(row["schema"], text) if complete else (None, "hit the cap")
            records.append({
                "source": row["source"], "name": row["name"], "sample": sample,
                "tokens": len(body), "complete": complete, "valid": valid, "why": why,
                "seconds": round(seconds, 2), "text": text[:2000],
            })  # fmt: skip
            print(f"{row['source']:16s} {row['name'][:28]:28s} {len(body):4d} tok "
                  f"complete={complete} valid={valid} {why[:60]}", flush=True)  # fmt: skip
    Path(args.out).mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(records).to_json(f"{args.out}/results.jsonl")
    complete = [r for r in records if r["complete"]]
    valid = [r for r in complete if r["valid"]]
    lines = [
        f"## Real-world schemas: sampled outputs validate (phi={args.phi})",
        "",
        f"{provenance('jsonschema')} Embedded SmolLM2-135M-Instruct, `do_sample=True, top_k=0`, "
        "compact JSON, strict objects. Validity is checked with `jsonschema` (format checker on) "
        "against the original schema.",
        "",
        f"- {len(records)} samples on {len(chosen)} schemas ({len({r['source'] for r in records})}"
        f" sources): {len(complete)} complete (EOS within {args.max_new_tokens} tokens), "
        f"**{len(valid)}/{len(complete)} complete outputs parse and validate**.",
        "",
        "| source | schema | samples | complete | valid | median tokens |",
        "|---|---|---|---|---|---|",
    ]
    by_schema: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_schema[(r["source"], r["name"])].append(r)
    for (source, name), rs in by_schema.items():
        done = [r for r in rs if r["complete"]]
        med = sorted(r["tokens"] for r in rs)[len(rs) // 2]
        lines.append(f"| {source} | {name} | {len(rs)} | {len(done)} | "
                     f"{sum(bool(r['valid']) for r in done)} | {med} |")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    if args.write:
        from harness import write_section

        write_section(lines[0], table)


if __name__ == "__main__":
    main()
