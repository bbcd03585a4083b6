"""Each state's own closing bound against the budget rule, along real schemas' instances.

At every state of every ``--every``-th valid MaskBench instance (``--suite drawn``: the
instances drawn for the JSONSchemaBench development file, those the grammar holds) in compact
JSON and the schema's key order, as ``budget_walk.py`` spells them, the state's own bound
(:meth:`JsonCursor.reach <hf_fvo.grammar.schema.closer.JsonCursor.reach>` past one token, the
vocabulary's most ``{``/``[`` in a token) is asked; where it is given, the budget rule runs at
exactly that room (its room is the bound: the rule would not run at a larger one) and every
token the parser admits that it drops is counted, then rechecked without the rule's work bound.
Rows: how many states the bound reads, and the tokens lost there (the bound claims none; a
token the parser admits at a dead end, which no completion follows, would be lost too); a lost
token whose state has a verified completion within the room (``tokens_to_accept``) is the
rule's miss, not the bound's.

Usage (from the repository root):
    python benchmarks/budget_reach.py --every 3 --write
    python benchmarks/budget_reach.py --suite drawn --every 1 --write
    python benchmarks/budget_reach.py --suite drawn --every 1 --ascii --write
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np
from budget_walk import drawn_tasks, maskbench_tasks, spelled
from harness import provenance, publish

from hf_fvo import Grammar
from hf_fvo.errors import GrammarError
from hf_fvo.models import load_default_tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="maskbench", choices=["maskbench", "drawn"])
    ap.add_argument("--every", type=int, default=3, help="every N-th valid instance")
    ap.add_argument("--ascii", action="store_true",
                    help="spelled as json.dumps writes by default (every character outside "
                         "ASCII a \\u escape)")  # fmt: skip
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok = load_default_tokenizer()
    counts: Counter[str] = Counter()
    lost: list[str] = []
    tasks = maskbench_tasks(tok, 0, None) if args.suite == "maskbench" else drawn_tasks(
        tok, 0, False, True)  # fmt: skip
    for task in tasks[:: args.every]:
        schema = json.loads(task["schema"])
        text = spelled(json.loads(task["instance"]), schema, ascii=args.ascii)
        try:
            g = Grammar.from_json_schema(schema, tok, whitespace="")
        except GrammarError:
            counts["instances not compiled"] += 1
            continue
        counts["instances"] += 1
        rule, state = g.budget_rule, g.initial_state
        for y in tok.encode(text):
            cursor = rule._cursor(state)
            bound = None if cursor is None or rule._depth is None else cursor.reach(rule._depth)
            counts["states"] += 1
            if bound is not None:
                counts["states bounded"] += 1
                dropped = np.flatnonzero(rule._bits(state) & (rule._within(state, bound) ^ 1))
                if len(dropped):
                    counts["bounded states where the rule drops a token"] += 1
                    unlimited = rule._within(state, bound, None)
                    missed = np.flatnonzero(rule._bits(state) & (unlimited ^ 1)).tolist()
                    if missed:
                        counts["... without its work bound too"] += 1
                        # a completion the grammar verifies (its search from the token's
                        # state) that fits: the rule missed it, the bound holds there
                        fits = [z for z in missed
                                if (n := g.tokens_to_accept(g.next_state(state, z))) is not None
                                and n <= bound]  # fmt: skip
                        if len(fits) == len(missed):
                            counts["... each with a completion that fits (the rule's miss)"] += 1
                        else:
                            counts["... a token with none found (the bound unconfirmed)"] += 1
                        written = [tok.decode([z]) for z in missed[:4]]
                        lost.append(f"{task['name']}: after {tok.decode(list(state._path))[-30:]!r}"
                                    f" drops {written}")  # fmt: skip
            state = g.next_state(state, y)
            if state is None:
                counts["instances the grammar stops"] += 1
                break
    lines = [
        f"## Budget rule: each state's own bound against the rule ({args.suite}"
        f"{', ASCII escapes' if args.ascii else ''})",
        "",
        provenance("torch", "transformers", "llguidance"),
        "",
        f"One valid instance in {args.every} ({args.suite}), SmolLM2's tokens, compact JSON in "
        f"the schema's key order{' (ASCII escapes)' if args.ascii else ''}; the rule at "
        "exactly the bound's room at each bounded state.",
        "",
        "| count | value |",
        "|---|---|",
        *[f"| {key} | {value:,} |" for key, value in counts.items()],
    ]
    if "bounded states where the rule drops a token" not in counts:
        lines += ["", "At every bounded state the rule keeps every token the parser admits."]
    lines += [""] * bool(lost) + [f"- {where}" for where in lost[:20]]
    publish(lines, args.write)


if __name__ == "__main__":
    main()
