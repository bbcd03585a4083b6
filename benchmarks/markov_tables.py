"""Exact oracles beyond finite languages (seed 000 Tables 6, 7 and 8, in shape): Markov LMs as
Transformers models, exact Φ by dynamic programming on product states, exact TV by grouping.

* ``budget``: Table 8 — the budget language L_{n,K} under an i.i.d. Bernoulli(p1) model for the
  eight published settings: TV(μ_proj, μ*), TV(μ_Φ, μ*), the Doob residual and the DP time.
* ``dyck``: Tables 6/7 — Dyck D_{3,12} and D_{3,16} under a random order-2 Markov LM over
  ``(``, ``)``, EOS: exact TV of every estimator to μ*, sampled TV of N draws through
  ``hf_fvo.generate`` next to the null 95th percentile, δ = sup|Φ̂ − Φ|, model rows per position,
  the structural bias (mean depth and length), and the spread over ten random models.

Usage: python benchmarks/markov_tables.py [--part budget dyck] [--n 10000] [--write]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch
from harness import machine, versions, write_section

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.eval import (
    empirical_law,
    grammar_conditional_law,
    null_tv_percentiles,
    product_tv,
    sampling_law,
)
from hf_fvo.eval.bench import suite_model
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM
from hf_fvo.phi import MarkovExactPhi, PhiContext, RolloutPhi, make_estimator
from hf_fvo.phi.rollout import hoeffding_half_width

BUDGET_SECTION = "## Exact oracles: budget DFA under a Bernoulli model (seed 000 Table 8)"
DYCK_SECTION = "## Exact oracles: Dyck under a Markov LM (seed 000 Tables 6 and 7)"
MC_SECTION = "## Monte-Carlo rollout Φ on Dyck D_{3,16} (seed 000 Table 6, MC rows)"
TABLE_8 = [  # (n, K, p1, published TV(μ_proj, μ*))
    (20, 10, 0.62, 0.670), (22, 11, 0.65, 0.755), (24, 12, 0.68, 0.836), (24, 10, 0.65, 0.884),
    (24, 8, 0.70, 0.961), (26, 13, 0.68, 0.851), (28, 14, 0.68, 0.864), (30, 15, 0.70, 0.909),
]  # fmt: skip
OPEN, CLOSE, EOS, BOS = 0, 1, 2, 3
ESTIMATORS = ["uniform", "onestep", "onestep_true", "exact"]


def toy_lm() -> MarkovLM:
    """The toy LM of the Dyck tables (shared with the ``paper`` suite of ``hf-fvo bench``)."""
    return suite_model({"model": "toy_dyck"}, None)


def _machine() -> str:
    return f"{machine()}, {versions()}; measured {time.strftime('%Y-%m-%d')}"


# -- Table 8 ------------------------------------------------------------------------------------


def budget() -> str:
    lines = [
        BUDGET_SECTION,
        "",
        "Command: `python benchmarks/markov_tables.py --part budget --write`. "
        f"Machine: {_machine()}.",
        "",
        "| n | K | p1 | valid strings | automaton states | TV(μ_proj, μ*) | seed 000 | "
        "TV(μ_Φ, μ*) | Doob residual | DP table (best of 5) | TV by grouping | groups |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, k, p1, published in TABLE_8:
        e = 0.05
        lm = MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3)
        g = Grammar.budget(n, k, zero=0, one=1, eos_token_id=2, vocab_size=3)
        times = []
        for _ in range(5):  # best of 5: the machine is shared
            t0 = time.perf_counter()
            phi = MarkovExactPhi(g, lm)
            phi.table(n + 1)
            times.append(time.perf_counter() - t0)
        dp_ms = min(times) * 1e3
        proj = product_tv(g, lm, (0,), "uniform", phi)
        exact = product_tv(g, lm, (0,), phi, phi)
        valid = sum(math.comb(n, c) for c in range(k + 1))
        row = (
            f"| {n} | {k} | {p1} | {valid:,} | {g.num_states} | {proj.tv:.3f} | {published:.3f} "
            f"| {exact.tv:.1e} | {phi.doob_residual(n + 1):.1e} | {dp_ms:.1f} ms | "
            f"{proj.seconds:.2f} s | {proj.groups} |"
        )
        lines.append(row)
        print(row, flush=True)
    lines += [
        "",
        "The model is i.i.d.: P(1) = p1 and P(0) = 1 − p1 given a digit, and EOS has probability "
        "0.05 (any positive value gives the same two laws: μ* and μ_proj both condition on "
        "exactly n digits). *TV by grouping* is `hf_fvo.eval.product_tv`, which never enumerates "
        "strings: it keeps one group per (context, automaton state, log μ_proj/μ* ratio), and "
        "here the ratio takes O(n) values. *DP table* is building `MarkovExactPhi`'s log-space "
        "table for every budget up to n + 1 (seed: 0.35–0.94 ms for its DP; ours includes "
        "assembling the transition arrays). *Doob residual* is max |Φ_r(c, s) − Σ_u p(u|c) "
        "Φ_{r−1}(c·u, δ(s, u)) − p(EOS|c)·1[s accepting]|, recomputed in linear space state by "
        "state. The automaton here keeps only the live (position, ones) pairs; the seed counts "
        "all (n + 1)(K + 1). At the root of n = 30 the masked P(1) is 0.70 and the "
        "Doob-corrected one 0.482, as the seed reports.",
    ]
    return "\n".join(lines) + "\n"


# -- Dyck ---------------------------------------------------------------------------------------


def _depth(seq: tuple[int, ...]) -> int:
    depth = best = 0
    for t in seq:
        depth += 1 if t == OPEN else -1 if t == CLOSE else 0
        best = max(best, depth)
    return best


def _length(seq: tuple[int, ...]) -> int:
    return sum(1 for t in seq if t != EOS)


def _delta(g, lm, est, exact, budget: int) -> tuple[float, int]:
    """sup |Φ̂ − Φ| over candidates at every reachable product state; and the positions seen."""
    worst, seen = 0.0, 0
    frontier = {((BOS,), g.initial_state): ()}
    for t in range(budget):
        nxt = {}
        for (_, state), prefix in frontier.items():
            r = budget - t
            ctx = PhiContext(state, prefix, lm.log_probs[lm.context_of((BOS, *prefix))], r, (BOS,))
            a, b = est.log_phi(ctx).exp(), exact.log_phi(ctx).exp()
            worst = max(worst, float((a - b).abs().max()))
            seen += 1
            for y in torch.nonzero(torch.isfinite(exact.log_phi(ctx))).flatten().tolist():
                if y != EOS:
                    child = (*prefix, y)
                    key = (child[-2:], g.next_state(state, y))
                    nxt.setdefault(key, child)
        frontier = nxt
    return worst, seen


def _sample(g, lm, phi, n: int, budget: int, seed: int) -> tuple[list, float]:
    torch.manual_seed(seed)
    samples, batch = [], 1000
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        size = min(batch, n - start)
        out = hf_fvo.generate(lm, torch.full((size, 1), BOS), grammar=g, phi=phi,
                              max_new_tokens=budget, do_sample=True, top_k=0)  # fmt: skip
        for row in out[:, 1:].tolist():
            samples.append(tuple(row[: row.index(EOS) + 1]))
    return samples, time.perf_counter() - t0


def dyck(n: int, seeds: int) -> str:
    lines = [
        DYCK_SECTION,
        "",
        f"Command: `python benchmarks/markov_tables.py --part dyck --n {n} --write`. "
        f"Machine: {_machine()}.",
        "",
        "Model: an order-1 `MarkovLM` over `(`, `)`, EOS and BOS "
        "(`hf_fvo.eval.bench.TOY_DYCK`: after BOS `(` 0.90; after `(` it opens 0.55, closes "
        "0.40, stops 0.05; after `)` 0.35 / 0.35 / 0.30). The prompt is BOS, which is never "
        "admissible. Grammar: "
        "`Grammar.dyck(3, L, vocab)` over that two-character vocabulary; budget L + 1 tokens "
        "(the longest member plus EOS).",
        "",
    ]
    summary = []
    for length in (12, 16):
        g = Grammar.dyck(3, length, BRACKETS)
        lm = toy_lm()
        budget = length + 1
        star = grammar_conditional_law(g, lm, (BOS,))
        exact = MarkovExactPhi(g, lm)
        root = PhiContext(g.initial_state, (), lm.log_probs[lm.context_of((BOS,))], budget,
                          (BOS,))  # fmt: skip
        mean_phi = exact.step(root).diagnostics.mean_phi
        lines += [
            f"### D_{{3,{length}}}: {len(star.probs)} strings, Φ̄ at the root {mean_phi:.3f}, "
            f"Doob residual {exact.doob_residual(budget):.1e}",
            "",
            f"| estimator | TV(μ̂, μ*) exact | TV sampled, N = {n:,} | null p95 | δ = sup|Φ̂ − Φ| "
            "| model rows / position | samples/s | mean depth | mean length |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        p95 = null_tv_percentiles(star, n, seed=1)[0]
        for name in ESTIMATORS:
            est = make_estimator(name, g, lm)
            tv = product_tv(g, lm, (BOS,), est, exact).tv
            law = sampling_law(g, lm, (BOS,), est)
            delta, positions = _delta(g, lm, est, exact, budget)
            counter = getattr(est, "lm", None)  # the PrefixLM of estimators that run the model
            before = counter.forwards if counter is not None else 0
            samples, seconds = _sample(g, lm, est, n, budget, seed=0)
            positions = sum(len(s) for s in samples)
            rows = (counter.forwards - before) / positions if counter is not None else 0.0
            sampled = empirical_law(samples).tv(star)
            cells = (
                f"| {name} | {tv:.4f} | {sampled:.4f} | {p95:.4f} | {delta:.3f} | {rows:.2f} | "
                f"{n / seconds:.0f} | {law.expectation(_depth):.2f} | "
                f"{law.expectation(_length):.2f} |"
            )
            lines.append(cells)
            print(cells, flush=True)
            summary.append((length, name, tv))
        lines += [
            f"| μ* (reference) | 0 | – | – | 0 | – | – | {star.expectation(_depth):.2f} | "
            f"{star.expectation(_length):.2f} |",
            "",
        ]
    spread = _seed_spread(seeds)
    lines += [
        f"### Over {seeds} random models: exact TV(μ̂, μ*), mean ± sd",
        "",
        f"`MarkovLM.random(4, order=2, seed=s)` for s = 0 … {seeds - 1} (rows softmax of "
        "standard normal logits; BOS is a fourth token the grammar never admits).",
        "",
        "| grammar | " + " | ".join(ESTIMATORS[:-1]) + " | exact |",
        "|---|---|---|---|---|",
    ]
    for length, row in spread.items():
        lines.append(f"| D_{{3,{length}}} | " + " | ".join(row) + " |")
    lines += [
        "",
        "*exact* TVs come from `product_tv` (grouping over product states) and agree with TV "
        "between the enumerated terminal laws (tested to 1e-12). The sampled column draws N "
        "sequences through `hf_fvo.generate(model, …, phi=…)`, the ordinary `generate()` path; "
        "under μ̂ = μ* it should sit below the null p95 (the TV that N exact draws from μ* stay "
        "under 95% of the time) — for the other estimators the sampled TV tracks their exact "
        "TV. δ is taken over every reachable (context, state, budget). *Model rows / position* "
        "counts extra next-token rows the estimator asked the model for (OneStep-true: one "
        "batched forward over its top candidates, here at most two). *Mean depth* is the mean "
        "maximum nesting depth, *mean length* the mean number of brackets, both exact under "
        "each law. Seed 000 Table 6 (its own toy LM on D_{3,16}) reports 0.418 / 0.359 / 0.290 / "
        "0.014 (sampled, N = 10,000) for these four tiers, Table 7 0.456 and 0.418 for μ_proj on "
        "D_{3,12} and D_{3,16}, and its structural bias is mean depth 1.72 vs 1.09 and mean "
        "length 5.85 vs 2.77 (μ_proj vs μ*). The toy LMs differ, so compare shapes: masking "
        "overproduces deep and long strings, exact Φ removes the gap, one-step lookahead "
        "helps only where one step sees the dead end. The Monte-Carlo rows are in the next "
        "section.",
    ]
    return "\n".join(lines) + "\n"


class _Tracked(RolloutPhi):
    """RolloutPhi that records max |Φ̂ − Φ| over every position it is called at."""

    def __init__(self, *args, exact: MarkovExactPhi, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.exact, self.delta = exact, 0.0

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        out = super().log_phi(ctx)
        truth = self.exact.log_phi(ctx)
        finite = torch.isfinite(truth)
        gap = (out.exp() - truth.exp())[finite].abs()
        self.delta = max(self.delta, float(gap.max()) if len(gap) else 0.0)
        return out


def monte_carlo(n: int, ks: list[int]) -> str:
    g = Grammar.dyck(3, 16, BRACKETS)
    lm, budget = toy_lm(), 17
    star = grammar_conditional_law(g, lm, (BOS,))
    exact = MarkovExactPhi(g, lm)
    root = PhiContext(g.initial_state, (), lm.log_probs[lm.context_of((BOS,))], budget, (BOS,))
    mean_phi = exact.step(root).diagnostics.mean_phi
    p95 = null_tv_percentiles(star, n, seed=1)[0]
    lines = [
        MC_SECTION,
        "",
        f"Command: `python benchmarks/markov_tables.py --part mc --n-mc {n} --write`. "
        f"Machine: {_machine()}.",
        "",
        "Same toy LM and grammar as the Dyck tables above (D_{3,16}, Φ̄ at the root "
        f"{mean_phi:.3f}). `RolloutPhi(g, lm, k)`: k unconstrained rollouts per candidate, all "
        "candidates × k rows advancing as one batch per step.",
        "",
        f"| estimator | TV sampled, N = {n:,} | null p95 | δ = max |Φ̂ − Φ| seen | Hoeffding h "
        "(α = 0.05, 2 candidates) | bound δ/(Φ̄ − δ) | forwards / position | rollout tokens / "
        "position | TV exact, one frozen draw |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k in ks:
        est = _Tracked(g, lm, k=k, seed=0, exact=exact)
        samples, seconds = _sample(g, lm, est, n, budget, seed=0)
        positions = sum(len(s) for s in samples)
        frozen = sampling_law(g, lm, (BOS,), RolloutPhi(g, lm, k=k, seed=0, resample=False))
        delta = est.delta
        bound = f"{delta / (mean_phi - delta):.2f}" if delta < mean_phi else "> 1 (δ ≥ Φ̄)"
        row = (
            f"| MC(k={k}) | {empirical_law(samples).tv(star):.4f} | {p95:.4f} | {delta:.3f} | "
            f"{hoeffding_half_width(k, 0.05, 2):.3f} | {bound} | {est.forwards / positions:.1f} "
            f"| {est.rollout_tokens / positions:.1f} | {frozen.tv(star):.4f} |"
        )
        lines.append(row)
        print(row, f"({seconds:.0f} s)", flush=True)
    lines += [
        "",
        "*TV sampled* draws N sequences through `hf_fvo.generate(..., phi=RolloutPhi(...))` "
        "with fresh rollouts at every step (the default), as seed 000's MC does. δ is the "
        "largest |Φ̂ − Φ| over every estimate made while sampling (against the exact DP). "
        "*forwards / position* counts model calls per generated position (the prefix once, then "
        "one per rollout step, which every candidate's k rollouts share), *rollout tokens* the "
        "rows × steps computed. *TV exact, one frozen draw* is the exact law of sampling with "
        "`resample=False` (each prefix's estimate drawn once, seeded by the prefix), computed by "
        "enumerating the trie: with small k one unlucky estimate near the root (Φ̂ = 0 for a "
        "bracket) steers every sample, which is why fresh draws are the default. Seed 000 Table 6 "
        "(its toy LM): MC(k = 1, 4, 8, 16, 64) TV 0.150 / 0.047 / 0.018 / 0.021 / 0.036, δ 0.986 / "
        "0.763 / 0.565 / 0.428 / 0.240, cost 10.8 / 43.2 / 86.4 / 172.9 / 691.5 forwards per "
        "position (it counts one forward per rollout token).",
    ]
    return "\n".join(lines) + "\n"


def _seed_spread(seeds: int) -> dict[int, list[str]]:
    out = {}
    for length in (12, 16):
        g = Grammar.dyck(3, length, BRACKETS)
        tvs: dict[str, list[float]] = {name: [] for name in ESTIMATORS}
        for s in range(seeds):
            lm = MarkovLM.random(4, order=2, seed=s, bos_token_id=BOS, eos_token_id=EOS)
            exact = MarkovExactPhi(g, lm)
            for name in ESTIMATORS:
                est = exact if name == "exact" else make_estimator(name, g, lm)
                tvs[name].append(product_tv(g, lm, (BOS,), est, exact).tv)
        out[length] = [
            f"{statistics.mean(v):.3f} ± {statistics.stdev(v):.3f}" for v in tvs.values()
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", nargs="*", default=["budget", "dyck", "mc"])
    parser.add_argument("--n", type=int, default=10_000, help="samples per Dyck estimator")
    parser.add_argument("--seeds", type=int, default=10, help="models in the spread table")
    parser.add_argument("--n-mc", type=int, default=1000, help="samples per MC row")
    parser.add_argument("--k", nargs="*", type=int, default=[1, 4, 8, 16, 64])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    np.random.seed(0)
    if "budget" in args.part:
        text = budget()
        print(text)
        if args.write:
            write_section(BUDGET_SECTION, text)
    if "mc" in args.part:
        text = monte_carlo(args.n_mc, args.k)
        print(text)
        if args.write:
            write_section(MC_SECTION, text)
    if "dyck" in args.part:
        text = dyck(args.n, args.seeds)
        print(text)
        if args.write:
            write_section(DYCK_SECTION, text)


if __name__ == "__main__":
    main()
