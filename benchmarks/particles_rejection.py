"""Particles against exact rejection draws on an open regex: TV to μ*_B and seconds, per N.

The setting of ``tests/generation/test_particles_open.py``: the regex ``[ab]*c`` (open; several
tokenizations of one text) over a 9-token vocabulary, a 2-layer random Llama whose own
outputs match it about 5 % of the time, a budget of 8 tokens. The reference is exact: the
model's unconstrained draws kept when they end within the budget and Python's ``re`` accepts
them. For masking and each N, ``--draws`` outputs (one particle run each) are compared with
as many reference draws: their two-sample TV beside the permutation null's 95th and 99th
percentiles, and the seconds the outputs took.

Usage:
    python benchmarks/particles_rejection.py --particles 8,32,128 --draws 400 --write
"""

from __future__ import annotations

import argparse
import sys
import time

from harness import ROOT, provenance, publish


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--particles", default="8,32,128", help="N, a comma list")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hf_fvo.eval import two_sample_null_tv, two_sample_tv
    from tests.generation.test_particles_open import (  # the test's setting
        constrained_draws,
        open_setting,
        rejection_draws,
    )

    model, grammar = open_setting()
    exact = rejection_draws(model, args.draws, seed=0)
    rows = []
    for k, n in enumerate([None] + [int(x) for x in args.particles.split(",")]):
        t0 = time.perf_counter()
        drawn = constrained_draws(model, grammar, seed=10 + k, count=args.draws,
                                  **({} if n is None else {"particles": n}))  # fmt: skip
        seconds = time.perf_counter() - t0
        p95, p99 = two_sample_null_tv(drawn, exact, seed=20 + k)
        tv = two_sample_tv(drawn, exact)
        rows.append((n, tv, p95, p99, seconds))
        print(f"{'masked' if n is None else f'particles={n}':14s} TV {tv:.3f}  null p95 {p95:.3f}"
              f"  p99 {p99:.3f}  {seconds:6.1f} s", flush=True)  # fmt: skip
    lines = [
        "## Particles against rejection draws on an open regex",
        "",
        f"{provenance()} The regex `[ab]*c` over a 9-token vocabulary (a, b, c, ab, bc, d, cd, "
        "EOS, BOS), a 2-layer random Llama (seed 1, sharpness 3) whose unconstrained outputs "
        f"match it about 5 % of the time, budget 8 tokens; {args.draws} exact draws of μ*_B by "
        f"rejection (Python's `re` decides), against {args.draws} outputs of each sampler (one "
        "particle run per output). TV: two-sample; null: permutation percentiles (1000 splits).",
        "",
        "| sampler | TV to the rejection draws | null p95 | null p99 | within p99 | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for n, tv, p95, p99, seconds in rows:
        name = "masked" if n is None else f"particles={n}"
        lines.append(f"| {name} | {tv:.3f} | {p95:.3f} | {p99:.3f} | "
                     f"{'yes' if tv <= p99 else '**no**'} | {seconds:.1f} |")  # fmt: skip
    publish(lines, args.write)


if __name__ == "__main__":
    main()
