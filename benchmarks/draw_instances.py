"""Valid instances that nobody here wrote: drawn by hypothesis-jsonschema from every schema of
the JSONSchemaBench development file, for the budget walks (``budget_walk.py --suite drawn``).

Per schema, hypothesis-jsonschema (derandomized: the same draws on every run) generates up to
60 instances; those whose compact JSON has 21–600 characters are sorted by length and three are
picked, spread over the lengths (the shortest, the middle, the longest), and kept where
``jsonschema`` (the schema's draft) validates them. A schema that hypothesis-jsonschema cannot
read or that takes more than ``--timeout`` seconds (in a child process) gives none. The rows
(``{source, name, instance}``, the instance as JSON text) go to
``benchmarks/data/drawn_instances.jsonl``; the walk joins them with their schemas.

The instances are adversarial, not typical: control characters, astral code points, extra keys
of open objects, numbers with exponents. The walk walks those the grammar admits (with
``strict=True``, the default, an extra key is not a member) and counts the rest apart.

Usage:
    pip install hypothesis-jsonschema   # (in the dev extra)
    python benchmarks/draw_instances.py
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import warnings

from harness import REALWORLD, ROOT

OUT = ROOT / "benchmarks" / "data" / "drawn_instances.jsonl"


def draw(schema: dict, per: int, examples: int) -> list[str]:
    """Up to ``per`` valid instances of ``schema`` (compact JSON), spread over their lengths."""
    import jsonschema
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis_jsonschema import from_schema

    warnings.filterwarnings("ignore")
    seen: list[str] = []
    try:
        strategy = from_schema(schema)

        @settings(database=None, derandomize=True, max_examples=examples, deadline=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])  # fmt: skip
        @given(strategy)
        def collect(value):
            text = json.dumps(value)
            if 20 < len(text) <= 600 and text not in seen:
                seen.append(text)

        collect()
    except Exception:  # (a schema hypothesis-jsonschema cannot read: what it drew so far)
        pass
    seen.sort(key=len)
    if len(seen) > per:
        seen = [seen[i * (len(seen) - 1) // (per - 1)] for i in range(per)]
    validator = jsonschema.validators.validator_for(schema)(schema)
    kept = []
    for text in dict.fromkeys(seen):
        try:
            if validator.is_valid(json.loads(text)):
                kept.append(text)
        except Exception:  # (jsonschema itself fails on the schema: nothing kept)
            pass
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per", type=int, default=3, help="instances per schema")
    parser.add_argument("--examples", type=int, default=60, help="draws per schema")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per schema")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (REALWORLD / "jsonschemabench-dev.jsonl").open()]
    OUT.parent.mkdir(exist_ok=True)
    context = multiprocessing.get_context("fork")
    written = none = 0
    with OUT.open("w") as out:
        for row in rows:
            with context.Pool(1) as pool:  # (a child: a draw that hangs is killed)
                job = pool.apply_async(draw, (row["schema"], args.per, args.examples))
                try:
                    kept = job.get(timeout=args.timeout)
                except multiprocessing.TimeoutError:
                    pool.terminate()
                    kept = []
            none += not kept
            for text in kept:
                out.write(json.dumps({"source": row["source"], "name": row["name"],
                                      "instance": text}, ensure_ascii=False) + "\n")  # fmt: skip
                written += 1
    print(f"{written} instances of {len(rows) - none} schemas ({none} gave none) -> {OUT}")


if __name__ == "__main__":
    main()
