"""Whether the budget rule's set at a state depends on the history: each task's answer walked
as ``generate()`` walks it (every step's budgeted set asked, as the logits processor does),
and at every ``--at``-th step the same state reached on a fresh grammar with ``next_state``
alone (nothing asked before it), its set asked at the same room. The rule should give one
set per (state, room); a set that differs depends on what earlier calls wrote into the states
(a parent's completions inherited, a parent's check's finds tried first).

Counted: compared sets, sets that differ, and per differing set the tokens only the walked
grammar admits and those only the fresh one admits (either way a member dropped by one of
them, since both admit only tokens with a verified completion that fits), with examples.

Usage:
    python benchmarks/fresh_states.py --suite maskbench --every 4 --at 5 --write
"""

from __future__ import annotations

import argparse
import json

from budget_walk import maskbench_tasks
from harness import ROOT, provenance, publish

from hf_fvo import Grammar
from hf_fvo.errors import GrammarError
from hf_fvo.eval.instances import in_schema_order
from hf_fvo.models import load_default_tokenizer


def compare_task(task: dict, tokenizer, layout: str, at: int) -> tuple[int, list[dict]]:
    """The number of sets compared along one task's answer, and each that differs."""
    schema, data = json.loads(task["schema"]), json.loads(task["instance"])
    pretty = layout == "pretty"
    ws = "pretty" if pretty else ""
    text = json.dumps(in_schema_order(data, schema), ensure_ascii=False,
                      indent=4 if pretty else None,
                      separators=None if pretty else (",", ":"))  # fmt: skip
    ids, budget = tokenizer.encode(text), task["max_new_tokens"]
    walked = Grammar.from_json_schema(schema, tokenizer, whitespace=ws)
    state, compared, differ = walked.initial_state, 0, []
    for t, y in enumerate(ids):
        if state is None:  # (not a member: the shorten suite's source, by design)
            break
        admitted = walked.admissible(state, budget - t)
        if t and t % at == 0:
            fresh = Grammar.from_json_schema(schema, tokenizer, whitespace=ws)
            alone = fresh.admissible(fresh.walk(ids[:t]), budget - t)
            compared += 1
            walked_only = (admitted & ~alone).nonzero().flatten().tolist()
            fresh_only = (alone & ~admitted).nonzero().flatten().tolist()
            if walked_only or fresh_only:
                differ.append({"name": task["name"], "step": t,
                               "before": tokenizer.decode(ids[max(0, t - 6) : t]),
                               "walked": [tokenizer.decode([i]) for i in walked_only],
                               "fresh": [tokenizer.decode([i]) for i in fresh_only]})  # fmt: skip
        state = walked.next_state(state, y)
    return compared, differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="maskbench",
                        choices=["transcribe", "shorten", "maskbench"])  # fmt: skip
    parser.add_argument("--layout", default=None, choices=["pretty", "compact"],
                        help="default: compact (maskbench), pretty (the task suites)")  # fmt: skip
    parser.add_argument("--every", type=int, default=4, help="every N-th task")
    parser.add_argument("--at", type=int, default=5, help="compare every N-th step")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    layout = args.layout or ("compact" if args.suite == "maskbench" else "pretty")
    tokenizer = load_default_tokenizer()
    if args.suite == "maskbench":
        tasks = maskbench_tasks(tokenizer, 0, None)
    else:
        path = ROOT / "hf_fvo" / "eval" / "suites" / "tasks" / f"{args.suite}.jsonl"
        tasks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tasks = tasks[:: args.every]
    compared, differ, refused = 0, [], 0
    for task in tasks:
        try:
            n, found = compare_task(task, tokenizer, layout, args.at)
        except GrammarError:  # a budget below the proven shortest member: refused at once
            refused += 1
            continue
        compared += n
        differ += found
    budget = "budget = tokens + 1" if args.suite == "maskbench" else "the tasks' own budgets"
    lines = [
        f"## Budget rule: one set per state and room, whatever was asked before ({args.suite}, "
        f"{layout}, {budget}, every {args.every}th task, every {args.at}th step)",
        "",
        provenance("llguidance", "transformers"),
        "",
        "| tasks | sets compared | sets that differ | tokens only the walked grammar admits | "
        "tokens only the fresh one admits |",
        "|---|---|---|---|---|",
        f"| {len(tasks) - refused} | {compared} | {len(differ)} | "
        f"{sum(len(d['walked']) for d in differ)} | {sum(len(d['fresh']) for d in differ)} |",
        "",
    ]
    for d in differ[:20]:
        lines.append(f"- `{d['name']}` step {d['step']} after `{d['before']!r}`: walked only "
                     f"{len(d['walked'])} {d['walked'][:4]}, fresh only {len(d['fresh'])} "
                     f"{d['fresh'][:4]}")  # fmt: skip
    publish(lines, args.write)


if __name__ == "__main__":
    main()
