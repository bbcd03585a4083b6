"""Importance-weighted (masked) rollouts against unconstrained ones: error of Monte-Carlo Φ.

For each grammar and model, at positions along μ*'s own samples (exact Φ known), both kinds of
``RolloutPhi`` estimate every candidate's Φ with k rollouts, ``--repeats`` times with different
seeds; reported: the mean and the 95th percentile of |Φ̂ − Φ| over candidates × repeats, and how
often a candidate with Φ > 0 got Φ̂ = 0 (every rollout failed). Rows:

- Dyck D_{3,16} under a random order-2 Markov LM (exact Φ by the product DP);
- a finite JSON schema (the suite's weather tool call, 3,029 strings) with the embedded SmolLM2
  (exact Φ from the explored token trie), positions along the greedy μ* path.

Usage:
    python benchmarks/masked_rollouts.py --repeats 20 --write
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from harness import provenance


def errors(positions, exact_row, make, repeats: int) -> tuple[float, float, float]:
    """(mean |Φ̂−Φ|, 95th percentile, share of Φ > 0 estimated 0) over positions × repeats."""
    gaps, zeros, total = [], 0, 0
    for ctx in positions:
        truth = exact_row(ctx).exp()
        for r in range(repeats):
            est = make(r)
            got = est.log_phi(ctx).exp()
            for y in est.rolled_out(ctx):
                gaps.append(abs(float(got[y] - truth[y])))
                if truth[y] > 0:
                    total += 1
                    zeros += float(got[y]) == 0.0
    return float(np.mean(gaps)), float(np.percentile(gaps, 95)), zeros / max(total, 1)


def dyck_row(args) -> tuple:
    from hf_fvo import Grammar
    from hf_fvo.grammar.vocabulary import BRACKETS
    from hf_fvo.models import MarkovLM
    from hf_fvo.phi import MarkovExactPhi, PhiContext

    vocab = BRACKETS
    g = Grammar.dyck(3, 16, vocab)
    lm = MarkovLM.random(4, order=2, seed=2, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    exact = MarkovExactPhi(g, lm)
    rng = np.random.default_rng(0)
    positions = []
    for _ in range(args.paths):
        prefix, state = (), g.initial_state
        while True:
            row_logits = lm.log_probs[lm.context_of((3, *prefix))]
            ctx = PhiContext(state, prefix, row_logits, 17 - len(prefix), (3,))
            row = torch.softmax(torch.log_softmax(ctx.logits.double(), -1) + exact.log_phi(ctx), 0)
            if int((exact.log_phi(ctx)[:2] > -np.inf).sum()) >= 1:
                positions.append(ctx)
            tok = int(rng.choice(4, p=row.numpy() / row.numpy().sum()))
            if tok == 2:
                break
            prefix, state = (*prefix, tok), g.next_state(state, tok)
    return "Dyck D_{3,16}, order-2 Markov LM", g, lm, positions, exact.log_phi


def json_row(args) -> tuple:
    from hf_fvo import Grammar
    from hf_fvo.eval.bench import load_suite
    from hf_fvo.models import chat_prompt, load_default_model, load_default_tokenizer
    from hf_fvo.phi import ExactPhi, PhiContext, PrefixLM

    tok, model = load_default_tokenizer(), load_default_model()
    row = next(r for r in load_suite("structured") if r["name"] == "tool call: weather")
    schema = json.loads(row["grammar"])
    g = Grammar.from_json_schema(schema, tok, whitespace="", backend="automaton",
                                 vocab_size=model.config.vocab_size)  # fmt: skip
    prompt = tuple(chat_prompt(tok, row["prompt"]))
    lm = PrefixLM(model, batch_size=32, cache_rows=20_000)
    exact = ExactPhi(g, lm, tol=1e-6)
    explored = exact.root_exploration(prompt)
    positions, prefix = [], ()
    while True:  # the greedy μ* path: argmax of p_t·Φ_t at each step
        node = explored.nodes[prefix]
        row_ = lm.next_logprobs(prompt, [prefix])[0]
        ctx = PhiContext(node.state, prefix, row_, None, prompt)
        if len(node.children) > 1:
            positions.append(ctx)
        best = int(node.children[torch.argmax(node.child_logp + node.log_phi_lo)])
        if best in g.eos_token_ids or len(positions) >= args.json_positions:
            break
        prefix = (*prefix, best)
    return "JSON tool call (weather), SmolLM2-135M", g, model, positions, exact.log_phi


def main() -> None:
    import transformers

    from hf_fvo.phi import RolloutPhi

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument(
        "--paths", type=int, default=6, help="μ* samples whose positions are used (Dyck)"
    )
    ap.add_argument("--json-positions", type=int, default=4)
    ap.add_argument("--json-repeats", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    t0 = time.perf_counter()
    lines = [
        "## Masked (importance-weighted) rollouts against unconstrained ones",
        "",
        f"{provenance()} |Φ̂ − Φ| against exact Φ over "
        "every rolled-out candidate at each position × repeat (fresh seeds); *zero* is the share "
        "of candidates with Φ > 0 that got Φ̂ = 0 (every rollout failed).",
        "",
        "| grammar, model | positions | k | unconstrained: mean | p95 | zero "
        "| masked: mean | p95 | zero |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for build, repeats in ((dyck_row, args.repeats), (json_row, args.json_repeats)):
        name, g, model, positions, exact_row = build(args)
        for k in args.k:
            cells = []
            for masked in (False, True):

                def make(r, g=g, model=model, masked=masked, k=k):
                    return RolloutPhi(g, model, k=k, seed=1000 * k + r, masked=masked)

                mean, p95, zero = errors(positions, exact_row, make, repeats)
                cells += [f"{mean:.4f}", f"{p95:.4f}", f"{zero:.2f}"]
            lines.append(f"| {name} | {len(positions)} | {k} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines += ["", f"{time.perf_counter() - t0:.0f} s."]
    from harness import publish

    publish(lines, args.write)


if __name__ == "__main__":
    main()
