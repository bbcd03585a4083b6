"""What the masks leave to the final check on the development set, and what the check costs.

Part 1 (``--census``): every schema of ``jsonschemabench-dev.jsonl`` and ``maskbench-dev.jsonl``
compiled with hf_fvo (strict objects for JSONSchemaBench, the spec's language for MaskBench):
how many compile, how many carry a final check (and which keywords it decides), and how many
are written with hf_fvo's own lexemes (the others in llguidance's JSON mode, which a note on
the grammar says).

Part 2 (sampling): masked draws with SmolLM2 on the JSONSchemaBench schemas that carry a check
(the schema in the prompt, as in ``realworld_generation.py``), ``--samples`` per schema: the
draws each output took before it passed the check (``out["draws"]``: a redraw is one more full
generation), outputs cut off, and every output validated with ``jsonschema`` against the
original schema. Results go to a ``datasets`` JSONL file and a markdown table.

Usage:
    python benchmarks/checks.py --schemas 20 --samples 3 --max-new-tokens 256 --write
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from harness import DEV, MASKBENCH, provenance
from realworld_generation import prompt_ids, validate


def census(tok) -> tuple[list[str], list[dict]]:
    from hf_fvo import Grammar
    from hf_fvo.errors import EmptyLanguageError, GrammarError

    lines = ["| set | schemas | compiled | with a final check | own lexemes | empty | refused |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    keywords: Counter = Counter()
    checked_rows: list[dict] = []
    for name, path, strict in (("JSONSchemaBench", DEV, True), ("MaskBench", MASKBENCH, False)):
        rows = [json.loads(line) for line in path.open()]
        compiled = checked = empty = refused = own = 0
        for row in rows:
            try:
                g = Grammar.from_json_schema(row["schema"], tok, whitespace="", strict=strict)
            except EmptyLanguageError:
                empty += 1
                continue
            except GrammarError:
                refused += 1
                continue
            compiled += 1
            own += not any(n.startswith("written as llguidance's JSON mode") for n in g.notes)
            if g.checked:
                checked += 1
                keywords.update({c.keyword for c in g.checked})
                if strict:
                    checked_rows.append(row)
        lines.append(
            f"| {name} | {len(rows)} | {compiled} | {checked} | {own} | {empty} | {refused} |"
        )
    lines += ["", "Keywords the check decides (schemas):",
              ", ".join(f"`{k}` {n}" for k, n in keywords.most_common())]  # fmt: skip
    return lines, checked_rows


def main() -> None:
    import datasets
    import torch

    import hf_fvo
    from hf_fvo import Grammar
    from hf_fvo.errors import BudgetTooSmallError, BudgetUndecidedError, CheckFailedError
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--tries", type=int, default=8, help="check_tries")
    ap.add_argument("--out", default="/tmp/hf_fvo_checks")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    lines, rows = census(tok)
    print("\n".join(lines), flush=True)
    records = []
    for row in rows[: args.schemas]:
        g = Grammar.from_json_schema(row["schema"], tok, whitespace="",
                                     vocab_size=model.config.vocab_size)  # fmt: skip
        ids = prompt_ids(tok, row["schema"])
        for seed in range(args.samples):
            torch.manual_seed(seed)
            t0 = time.perf_counter()
            status, draws, why = "complete", None, ""
            try:
                out = hf_fvo.generate(model, ids, grammar=g, do_sample=True, top_k=0,
                                      max_new_tokens=args.max_new_tokens, check_tries=args.tries,
                                      return_dict_in_generate=True)  # fmt: skip
                draws = out["draws"][0]
                new = out.sequences[0, ids.shape[1] :].tolist()
                if g.eos_token_id not in new:
                    status = "cut"
                text = tok.decode(new, skip_special_tokens=True)
                valid, why = validate(row["schema"], text)
            except (BudgetTooSmallError, BudgetUndecidedError) as exc:  # a refusal
                status, valid, why = "refused", None, str(exc)[:120]
            except CheckFailedError as exc:
                status, valid, draws, why = "checks ran out", None, args.tries, str(exc)[:160]
            seconds = time.perf_counter() - t0
            records.append({
                "name": row["name"], "source": row["source"], "seed": seed, "status": status,
                "draws": draws, "valid": valid, "why": why, "seconds": seconds,
                "checked": [str(c) for c in g.checked],
            })  # fmt: skip
            print(f"{row['name'][:30]:30s} seed={seed} {status:14s} draws={draws} valid={valid} "
                  f"{seconds:6.1f} s {why[:60]}", flush=True)  # fmt: skip
    datasets.Dataset.from_list(records).to_json(f"{args.out}.jsonl")
    done = [r for r in records if r["status"] == "complete"]
    draws = [r["draws"] for r in records if r["draws"] is not None]
    table = [
        "## Final checks on the development set: what they decide, what they cost",
        "",
        provenance(),
        "",
        *lines,
        "",
        f"Masked draws (SmolLM2-135M-Instruct, `do_sample=True, top_k=0`, check_tries="
        f"{args.tries}) on the first {min(args.schemas, len(rows))} JSONSchemaBench schemas "
        f"with a check, {args.samples} seeds each:",
        "",
        "| outputs | complete | cut off | ran out of tries | refused | complete and valid | "
        "draws per output (mean, max) | redrawn |",
        "|---|---|---|---|---|---|---|---|",
        f"| {len(records)} | {len(done)} | {sum(r['status'] == 'cut' for r in records)} | "
        f"{sum(r['status'] == 'checks ran out' for r in records)} | "
        f"{sum(r['status'] == 'refused' for r in records)} | "
        f"{sum(bool(r['valid']) for r in done)}/{len(done)} | "
        f"{(sum(draws) / len(draws)) if draws else 0:.2f}, {max(draws, default=0)} | "
        f"{sum(d > 1 for d in draws)}/{len(draws)} |",
    ]
    print("\n".join(table))
    if args.write:
        from harness import write_section

        write_section(table[0], "\n".join(table))


if __name__ == "__main__":
    main()
