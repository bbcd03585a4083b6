"""Bounds either side of the shortest member, at the start of pushdown JSON grammars, on the
development set: how often the upper bound is finite, how often the two meet (a proof of the
shortest member's tokens), what a 256-token budget refuses, and the time the bounds cost.

For each schema that compiles (compact JSON, SmolLM2's tokenizer; MaskBench rows as the spec's
language, ``strict=False``): ``Grammar.shortest_bounds(initial)`` — the upper bound is the member
built from the schema (or the completion search), parsed; the lower bound the largest of the
tokens its literal text needs (required keys in order, brackets, quotes: ``schema.literals``), the
fewest tokens of a regular superset where the schema has one and the literal bound does not
already reach the upper, and its bytes over the longest token — and
``budget_refusal(initial, 256)``. Every refusal at 256 is checked against a witness: a valid
instance of the schema (MaskBench's own, compact, in the schema's key order) that the grammar
accepts within 255 tokens would make it a false refusal.

With ``--key-order any`` each object's keys may come in any order: the lower bound is what every
member writes whatever the order (required keys, brackets, quotes:
``schema.literals.unordered_blocks``), the upper a member built in the schema's order that the
final check passes, and the instances are fed in their own key order and must pass the check.
Every valid instance is also checked against the lower bound: one with fewer tokens than it
contradicts the bound.

Usage: python benchmarks/budget_bounds.py [--limit N] [--key-order schema|any] [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

from harness import provenance, publish

SECTION = "## Budgets: bounds either side of the shortest member (development set)"
REAL = Path(__file__).resolve().parents[2] / "shared" / "realworld"


def main() -> None:
    from hf_fvo import Grammar
    from hf_fvo.errors import BudgetTooSmallError, GrammarError
    from hf_fvo.models import load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="schemas per file at most")
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--key-order", default="schema", choices=("schema", "any"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok = load_default_tokenizer()
    title = SECTION if args.key_order == "schema" else f"{SECTION[:-1]}, key_order='any')"
    lines = [title, ""]
    for name in ("jsonschemabench-dev", "maskbench-dev"):
        rows = [json.loads(line) for line in (REAL / f"{name}.jsonl").open()][: args.limit]
        compiled = finite = exact = 0
        gaps: Counter[int] = Counter()
        seconds: list[float] = []
        lower_seconds: list[float] = []
        refusal_seconds: list[float] = []  # a refusal stops once its lower bound proves it
        refusals: list[str] = []
        false_refusals = instances = below = above = 0
        for row in rows:
            label = row.get("name") or row.get("file")
            try:
                g = Grammar.from_json_schema(row["schema"], tok, whitespace="",
                                             strict="tests" not in row,
                                             key_order=args.key_order)  # fmt: skip
            except GrammarError:
                continue
            compiled += 1
            t0 = time.perf_counter()
            g.tokens_to_accept(g.initial_state)  # the upper bound: what every budget asks first
            t1 = time.perf_counter()
            refusal = g.budget_refusal(g.initial_state, args.budget, f"{args.budget} tokens")
            t2 = time.perf_counter()
            lower, upper = g.shortest_bounds(g.initial_state)  # the whole lower bound
            seconds.append(t1 - t0)
            lower_seconds.append(time.perf_counter() - t2)
            if upper is not None:
                above += lower > upper  # a member shorter than the lower bound: unsound
                finite += 1
                exact += lower == upper
                gaps[min(upper - lower, 50)] += 1
            for length in _members(row, g, tok):
                instances += 1
                below += length < lower
            if refusal is None:
                continue
            refusal_seconds.append(t2 - t1)
            kind = "proof" if isinstance(refusal, BudgetTooSmallError) else "undecided"
            witness = _witness(row, g, tok, args.budget - 1)
            false_refusals += witness is not None
            refusals.append(f"{label} ({kind}: lower {lower}, upper {upper}"
                            + ("" if witness is None else f"; a valid member of {witness} tokens")
                            + ")")  # fmt: skip
        near = sum(v for k, v in gaps.items() if 0 < k <= 5)
        lines += [
            f"- `{name}.jsonl`: {compiled} of {len(rows)} compile; a finite upper bound for "
            f"**{finite}**; the bounds meet (the shortest member's tokens, proven) for "
            f"**{exact}**, differ by 1–5 tokens for {near}, by more for "
            f"{finite - exact - near}. Refused at {args.budget} tokens: {len(refusals)}"
            + (f" ({'; '.join(refusals)})" if refusals else "")
            + f"; refusals a valid member of ≤ {args.budget - 1} tokens contradicts: "
            f"**{false_refusals}**; valid instances with fewer tokens than the lower bound: "
            f"**{below}** of {instances}; lower bounds above the upper bound's member: "
            f"**{above}**. Time per schema of the upper bound (asked by every "
            "budget) "
            f"{_spread(seconds)}; of a refusal at {args.budget} "
            f"{_spread(refusal_seconds) if refusal_seconds else '-'}; of the whole lower bound "
            f"(`shortest_bounds`) {_spread(lower_seconds)}.",
        ]
    lines += ["", provenance("llguidance", "outlines-core")
              + f" `key_order={args.key_order!r}`."]  # fmt: skip
    publish(lines, args.write)


def _spread(seconds: list[float]) -> str:
    q = sorted(seconds)
    p90 = q[int(0.9 * (len(q) - 1))]
    mid = statistics.median(q)
    return f"median {mid * 1e3:.1f} ms, p90 {p90 * 1e3:.0f} ms, max {q[-1] * 1e3:.0f} ms"


def _witness(row: dict, g, tok, room: int) -> int | None:
    """Tokens of a listed valid instance that the grammar accepts within ``room`` tokens, if
    one is."""
    return next((n for n in _members(row, g, tok) if n <= room), None)


def _members(row: dict, g, tok) -> list[int]:
    """Tokens of each listed valid instance (compact, in its own key order) that the grammar
    accepts: its masks, then its final check."""
    out = []
    for test in row.get("tests", []):
        if not test["valid"]:
            continue
        ids = tok.encode(json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False))
        state = g.walk(ids)
        if state is not None and g.is_accepting(state) and g.check(ids) is None:
            out.append(len(ids))
    return out


if __name__ == "__main__":
    main()
