"""MaskBench exactness: does each engine accept every valid instance and no invalid one?

For every file of ``../shared/realworld/maskbench-dev.jsonl``, each engine compiles the schema in
the spec's language (hf_fvo ``strict=False``, XGrammar ``strict_mode=False``; llguidance and
outlines-core have no strict mode) in its own worker process with a time limit, then reads every
instance as the SmolLM2 tokenization of its compact JSON with keys in the schema's order
(``in_schema_order``: the order of the subschema the instance matches, so that ``anyOf``
branches listing keys in different orders each get their own). Valid instances must be
accepted, invalid ones rejected. For hf_fvo the grammar-guided search
(``accepting_serialization``) is reported too: a valid instance in *any* key order the grammar
accepts, an invalid one in the schema's global order (``schema_key_order``).

``--ensure-ascii`` writes the instances as Python's ``json.dumps`` does by default (every
non-ASCII character as ``\\uXXXX``): a spelling JSON allows that canonical-only lexemes reject.

Usage:
    python benchmarks/maskbench.py --timeout 60 --write
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from harness import MASKBENCH as DEV
from harness import provenance


def main() -> None:
    from grammar_engines import ENGINES, Pool

    from hf_fvo import Grammar
    from hf_fvo.errors import GrammarError
    from hf_fvo.eval.instances import accepting_serialization, in_schema_order, schema_key_order
    from hf_fvo.models import load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--engines", default=",".join(e for e in ENGINES if e != "hf_fvo_automaton"))
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap per worker")
    ap.add_argument(
        "--out",
        default="/tmp/hf_fvo_maskbench_mismatches.jsonl",
        help="every valid instance rejected or invalid one accepted, per engine",
    )
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--data", default=str(DEV), help="rows of schema + tests (MaskBench's shape)")
    ap.add_argument("--title", default="MaskBench", help="the data's name in the table")
    ap.add_argument(
        "--key-order",
        default="schema",
        choices=("schema", "any"),
        help="any: hf_fvo with key_order='any', instances in their own key order",
    )
    ap.add_argument(
        "--ensure-ascii",
        action="store_true",
        help="write instances as Python's json.dumps does by default: every non-ASCII "
        "character as \\uXXXX (surrogate pairs above U+FFFF); the search row keeps its own",
    )
    args = ap.parse_args()
    tok = load_default_tokenizer()
    with open(args.data) as f:
        rows = [json.loads(line) for line in f][: args.limit]
    engines = args.engines.split(",")
    pools = {name: Pool(name, args.memory_gb) for name in engines}
    stats = {name: defaultdict(int) for name in [*engines, "hf_fvo (search)"]}
    mismatches: list[dict] = []
    for i, row in enumerate(rows):
        order = schema_key_order(row["schema"]) if _prepares(row["schema"]) else []
        compact = {"separators": (",", ":"), "ensure_ascii": args.ensure_ascii}
        own = args.key_order == "any"
        texts = [tok.encode(json.dumps(t["data"] if own else in_schema_order(t["data"],
                                                                             row["schema"]),
                                       **compact))
                 for t in row["tests"]]  # fmt: skip
        valid = [t["valid"] for t in row["tests"]]
        for name in engines[i % len(engines) :] + engines[: i % len(engines)]:
            formats = row.get("formats", "assert")
            result = pools[name].run({"schema": row["schema"], "strict": False, "texts": texts,
                                      "formats": formats, "key_order": args.key_order},
                                     args.timeout)  # fmt: skip
            _count(stats[name], result, valid)
            for case, ok in zip(row["tests"], result.get("accepted") or [], strict=False):
                if ok != case["valid"]:
                    mismatches.append({"engine": name, "file": row.get("file"),
                                       "description": case["description"],
                                       "valid": case["valid"], "data": case["data"]})  # fmt: skip
        s = stats["hf_fvo (search)"]
        try:
            g = Grammar.from_json_schema(row["schema"], tok, whitespace="", strict=False,
                                         formats=row.get("formats", "assert"),
                                         key_order=args.key_order)  # fmt: skip
        except GrammarError:
            s["refused"] += 1
            continue
        s["compiled"] += 1
        for case in row["tests"]:
            text = accepting_serialization(g, case["data"], tok, key_order=order,
                                           search=case["valid"])  # fmt: skip
            _tally(s, case["valid"], text is not None)
            if (text is not None) != case["valid"]:
                mismatches.append({"engine": "hf_fvo (search)", "file": row.get("file"),
                                   "description": case["description"], "valid": case["valid"],
                                   "data": case["data"]})  # fmt: skip
        if (i + 1) % 50 == 0:
            print(f"{i + 1}/{len(rows)}", flush=True)
    for pool in pools.values():
        pool.close()
    with open(args.out, "w") as f:
        for m in mismatches:
            f.write(json.dumps(m) + "\n")
    lines = [
        f"## {args.title}: valid instances accepted, invalid ones rejected"
        + (" (key_order='any')" if args.key_order == "any" else ""),
        "",
        f"{provenance('llguidance', 'xgrammar')} {len(rows)} files "
        f"of `{args.data.rsplit('/', 1)[-1]}`, SmolLM2 tokenizer, compact JSON, the spec's "
        "language (no "
        "strict objects). Instances are read as "
        "the tokenizer's tokenization of their compact JSON with keys "
        + (
            "in the order they are written (`key_order='any'`); "
            if args.key_order == "any"
            else "in the order of the subschema they match (`in_schema_order`); "
        )
        + "'hf_fvo (search)' feeds the same grammar through `accepting_serialization` (any key "
        "order the grammar accepts for valid instances, the schema's global key order for invalid "
        "ones). "
        "Only files an engine compiles count toward its instance columns."
        + (
            " Instances written with `ensure_ascii=True` (non-ASCII characters as `\\uXXXX`; "
            "the search row spells them raw)."
            if args.ensure_ascii
            else ""
        ),
        "",
        "| engine | compiled | refused | crash | timeout | valid accepted | invalid accepted |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in stats.items():
        lines.append(
            f"| {name} | {s['compiled']}/{len(rows)} | {s['refused']} | {s['crash']} | "
            f"{s['timeout']} | {s['valid_ok']}/{s['valid']} | {s['invalid_ok']}/{s['invalid']} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.write:
        from harness import write_section

        write_section(lines[0], table)


def _prepares(schema) -> bool:
    from hf_fvo.errors import GrammarError
    from hf_fvo.grammar import prepare_json_schema

    try:
        prepare_json_schema(schema, strict=False)
        return True
    except GrammarError:
        return False


def _count(s: dict, result: dict, valid: list[bool]) -> None:
    if result["status"] != "ok":
        s[result["status"]] += 1
        return
    s["compiled"] += 1
    for ok, accepted in zip(valid, result["accepted"], strict=True):
        _tally(s, ok, accepted)


def _tally(s: dict, valid: bool, accepted: bool) -> None:
    if valid:
        s["valid"] += 1
        s["valid_ok"] += accepted
    else:
        s["invalid"] += 1
        s["invalid_ok"] += accepted


if __name__ == "__main__":
    main()
