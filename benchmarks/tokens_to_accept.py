"""Tokens to acceptance: the pushdown backend's verified completions beside the automaton's exact
distances, on development schemas both backends compile.

For each schema (in a fixed order, those the automaton compiles within ``--max-states``), seeded
random walks through the automaton's admissible tokens; at every state the pushdown grammar's
``tokens_to_accept`` (a verified completion: an upper bound) is compared with the automaton's
exact d(s). Reported: states, how often the bound is exact, never below (a failure if it is),
how loose it is where it is not, and the search's time; and at each schema's start both sides of
``shortest_bounds`` (the member built from the schema, the literal/superset lower bound) against
d(start): how often each is exact, by how much each misses, and that neither crosses it.

Usage: python benchmarks/tokens_to_accept.py [--schemas 40] [--walks 3] [--steps 40] [--write]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter

from harness import DEV, provenance, publish

SECTION = "## Tokens to acceptance: pushdown completions beside the automaton's exact distances"


def main() -> None:
    from hf_fvo import Grammar
    from hf_fvo.errors import GrammarError
    from hf_fvo.models import load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=40)
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--max-states", type=int, default=5000)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok = load_default_tokenizer()
    rows = [json.loads(line) for line in DEV.open()]
    random.Random(0).shuffle(rows)
    gaps: Counter[int] = Counter()
    seconds: list[float] = []
    below = schemas = 0
    loose_by_schema: Counter[str] = Counter()
    start_upper: Counter[int] = Counter()  # upper − d(start), per schema
    start_lower: Counter[int] = Counter()  # d(start) − lower
    crossed: list[str] = []  # a bound on the wrong side of d(start): a failure
    for row in rows:
        if schemas == args.schemas:
            break
        try:
            pd = Grammar.from_json_schema(row["schema"], tok, whitespace="")
            fa = Grammar.from_json_schema(row["schema"], tok, whitespace="", backend="automaton",
                                          max_states=args.max_states)  # fmt: skip
        except GrammarError:
            continue
        schemas += 1
        d0 = fa.min_tokens_to_accept(fa.initial_state)
        lower, upper = pd.shortest_bounds(pd.initial_state)
        if upper is None or upper < d0 or lower > d0:
            crossed.append(f"{row['name']} ({lower}, {upper}; d = {d0})")
        else:
            start_upper[upper - d0] += 1
            start_lower[d0 - lower] += 1
        for walk in range(args.walks):
            rng = random.Random(1000 * schemas + walk)
            sp, sa = pd.initial_state, fa.initial_state
            for _ in range(args.steps):
                t0 = time.perf_counter()
                bound = pd.tokens_to_accept(sp)
                seconds.append(time.perf_counter() - t0)
                exact = fa.min_tokens_to_accept(sa)
                if bound is None or bound < exact:
                    below += 1
                else:
                    gaps[bound - exact] += 1
                    loose_by_schema[row["name"]] += bound > exact
                choices = [t for t in fa.allowed(sa).nonzero().flatten().tolist()
                           if t not in fa.eos_token_ids]  # fmt: skip
                if not choices:
                    break
                t = rng.choice(choices)
                sp, sa = pd.next_state(sp, t), fa.next_state(sa, t)
    states = sum(gaps.values()) + below
    loose = {k: v for k, v in gaps.items() if k}
    lines = [
        SECTION,
        "",
        f"{provenance('llguidance', 'outlines-core')} {schemas} development schemas "
        f"(JSONSchemaBench sample, a fixed shuffle, those the automaton compiles within "
        f"{args.max_states} states), compact JSON, {args.walks} seeded random walks of up to "
        f"{args.steps} tokens each; SmolLM2's tokenizer.",
        "",
        f"- States compared: {states}; pushdown bound below the exact d(s) (or no completion "
        f"found): **{below}**.",
        f"- Exact: **{gaps[0]} of {states}** ({100 * gaps[0] / max(states, 1):.1f} %); loose on "
        f"{sum(loose.values())} states of {sum(1 for v in loose_by_schema.values() if v)} schemas,"
        f" by (tokens: states) {dict(sorted(loose.items()))}.",
        f"- Time of `tokens_to_accept` on a new state (the search, verification included): "
        f"median {statistics.median(seconds) * 1e3:.2f} ms, p90 "
        f"{sorted(seconds)[int(0.9 * (len(seconds) - 1))] * 1e3:.2f} ms, max "
        f"{max(seconds) * 1e3:.0f} ms (states along a witness inherit it and cost nothing).",
        f"- At the start, `shortest_bounds` against d(start), {schemas} schemas: on the wrong "
        f"side **{len(crossed)}**{' (' + '; '.join(crossed) + ')' if crossed else ''}; the upper "
        f"bound exact on **{start_upper[0]}**, above by (tokens: schemas) "
        f"{_misses(start_upper)}; the lower bound exact on **{start_lower[0]}**, below by "
        f"{_misses(start_lower)}.",
    ]
    publish(lines, args.write)


def _misses(counts: Counter[int]) -> dict[int, int]:
    return dict(sorted((k, v) for k, v in counts.items() if k))


if __name__ == "__main__":
    main()
