"""What the pushdown budget rule's bounded work drops: SmolLM2's mass on members it excludes.

Near a budget's end the rule admits a token y only where y's next state has a verified
completion that fits the room. Most tokens are certified by a parse; the rest by splices and
completion searches, bounded per call (``_SPLICE_TRIES`` splice parses, ``_STEP_WORK``
parser operations of searches); a token left unverified is excluded, so the rule may drop a
member (it never admits one that cannot finish). This script walks development schemas (the
``realworld_generation`` choice) under budgets that bind, sampling SmolLM2 masked to the rule's
set as hf_fvo does, and at every step where the rule applies compares that set with the same
rule with no bounds (every splice, every search, as the token-by-token rule resolves it):
the model's mass on what the bounded rule drops, as a share of the unbounded set's mass.

Usage:
    python benchmarks/budget_rule.py --schemas 12 --slack 2,8,24 --write
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
from harness import DEV, provenance, publish
from realworld_generation import pick_schemas, prompt_ids


def walk(model, grammar, ids: torch.Tensor, budget: int, seed: int) -> list[dict]:
    """One masked draw under ``budget``; per step where the rule applies: the dropped
    tokens' count and their share of the unbounded set's mass."""
    g = grammar
    gen = torch.Generator().manual_seed(seed)
    state, steps, past, feed = g.initial_state, [], None, ids
    for step in range(budget):
        remaining = budget - step
        with torch.no_grad():
            out = model(feed, past_key_values=past, use_cache=True)
        past = out.past_key_values
        probs = torch.softmax(out.logits[0, -1].double(), -1).numpy()
        admitted = g.admissible(state, remaining).numpy()
        kept = g.budget_rule.kept(state, remaining)
        if kept is not None:
            room = remaining - 2
            entry = g.budget_rule._room(state, room)
            saved = (dict(entry.heirs), entry.shared)  # (the unbounded check leaves them so)
            t0 = time.perf_counter()
            whole = g.budget_rule._within(state, room, None).astype(bool)
            seconds = time.perf_counter() - t0
            entry.heirs.clear()
            entry.heirs.update(saved[0])
            entry.shared = saved[1]
            n = len(whole)
            dropped = whole & ~admitted[:n]
            eos = [e for e in g.eos_token_ids if admitted[e]]
            total = probs[:n][whole].sum() + probs[eos].sum()
            steps.append({
                "step": step, "room": room, "dropped": int(dropped.sum()),
                "share": float(probs[:n][dropped].sum() / total) if total > 0 else 0.0,
                "seconds": seconds,
            })  # fmt: skip
        p = np.where(admitted[: len(probs)], probs, 0.0)
        if p.sum() <= 0:
            break
        token = int(torch.multinomial(torch.from_numpy(p / p.sum()), 1, generator=gen))
        if token in g.eos_token_ids:
            break
        state = g.next_state(state, token)
        feed = torch.tensor([[token]])
    return steps


def main() -> None:
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=12)
    ap.add_argument("--slack", default="2,8,24", help="tokens of budget beyond the shortest")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--out", default="/tmp/hf_fvo_budget_rule.jsonl")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    slacks = [int(s) for s in args.slack.split(",")]

    tok, model = load_default_tokenizer(), load_default_model()
    rows = [json.loads(line) for line in DEV.open()]
    records = []
    for row, g in pick_schemas(rows, args.schemas, tok, model.config.vocab_size):
        start = g.completion(g.initial_state)
        if start is None:
            continue
        ids = prompt_ids(tok, row["schema"])
        for slack in slacks:
            for seed in range(args.seeds):
                budget = len(start) + 1 + slack
                for s in walk(model, g, ids, budget, seed):
                    records.append({"name": row["name"], "slack": slack, "seed": seed, **s})
                walked = [r for r in records if r["name"] == row["name"] and r["slack"] == slack]
                worst = max((r["share"] for r in walked), default=0)
                print(f"{row['name'][:24]:24s} slack {slack:3d}: {len(walked)} steps, "
                      f"max share {worst:.4f}", flush=True)  # fmt: skip
    import datasets

    datasets.Dataset.from_list(records).to_json(args.out)
    lines = [
        "## The budget rule's bounds: SmolLM2's mass on the members they drop",
        "",
        f"{provenance()} Embedded SmolLM2-135M-Instruct, {args.schemas} development schemas "
        f"(the `realworld_generation` choice), budgets of the shortest member's length plus "
        f"{args.slack} tokens, {args.seeds} seeded masked draw(s) each; at every step where "
        "the pushdown rule applies, its set beside the same rule without bounds (every splice, "
        "every search): the share of the unbounded set's mass the bounded rule drops.",
        "",
        "| slack | steps | steps dropping a member | dropped mass ≥ 1 % | mean share | max share "
        "| unbounded check, s a step |",
        "|---|---|---|---|---|---|---|",
    ]
    for slack in slacks:
        got = [r for r in records if r["slack"] == slack]
        if not got:
            continue
        shares = [r["share"] for r in got]
        lines.append(
            f"| {slack} | {len(got)} | {sum(r['dropped'] > 0 for r in got)} | "
            f"{sum(s >= 0.01 for s in shares)} | {sum(shares) / len(shares):.4f} | "
            f"{max(shares):.4f} | {sum(r['seconds'] for r in got) / len(got):.3f} |"
        )
    lines.append("")
    assert all(math.isfinite(r["share"]) for r in records)
    publish(lines, args.write)


if __name__ == "__main__":
    main()
