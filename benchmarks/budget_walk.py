"""Whether the budget rule keeps the members that fit: each task's own answer, walked token by
token through the budgeted admissible sets.

For every task of a shipped suite (``hf_fvo/eval/suites/tasks/<suite>.jsonl``), the task's
instance is written as the task grammar accepts it (the schema's key order; ``pretty``: indented
by four, the layout the task table decodes with; ``compact``: no whitespace), tokenized as the
tokenizer writes it, and walked through ``Grammar.admissible(state, remaining)`` at the task's
own budget (``max_new_tokens``, about twice the answer), as the logits processor asks it at
every step of ``generate()``. The answer fits, so every one of its tokens and the final EOS
must be admitted; a task is *refused* at the first one that is not (where the grammar itself
refuses a token the answer is not a member — the shorten suite's source text, longer than
the task's ``maxLength`` by design — and the walk stops there, counted apart). Also the
grammar step's time per row-step (the admissible set, one fresh grammar per task, so every
set is computed anew): p50, p99 and max, and the slowest task.

``--suite maskbench`` walks MaskBench's valid instances instead, ``--suite drawn`` the
instances hypothesis-jsonschema drew from the JSONSchemaBench development file
(``draw_instances.py``: data nobody here wrote, first checked to be members), both compact
(or ``--layout pretty``) at the instance's tokens + 1 + ``--slack`` (or, ``--double``, twice
its tokens; ``--open-objects``: ``strict=False``; ``--any-order``: ``key_order="any"``, the
instance's own key order; ``--ascii``: spelled as ``json.dumps`` writes by default, every
character outside ASCII a ``\\u`` escape).

Usage:
    python benchmarks/budget_walk.py --suite transcribe --layout pretty --write
    python benchmarks/budget_walk.py --suite drawn --layout compact --slack 0 --write
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from harness import MASKBENCH, REALWORLD, ROOT, provenance, publish

from hf_fvo import Grammar
from hf_fvo.errors import GrammarError
from hf_fvo.eval.instances import in_schema_order
from hf_fvo.models import load_default_tokenizer


def walk_task(task: dict, tokenizer, layout: str, limit_s: float, lost: bool = False) -> dict:
    """One task's answer walked through the budgeted sets: where it was refused (or None),
    and each step's seconds; with ``lost``, per step the tokens the rule drops that the same
    rule without a work bound keeps (``lost``: their count; the first step that lost any)."""
    schema, data = json.loads(task["schema"]), json.loads(task["instance"])
    budget = task["max_new_tokens"]
    pretty = layout == "pretty"
    any_order = task.get("any_order", False)
    g = Grammar.from_json_schema(schema, tokenizer, whitespace="pretty" if pretty else "",
                                 strict=task.get("strict", True),
                                 key_order="any" if any_order else "schema")  # fmt: skip
    text = spelled(data, schema, pretty, task.get("ascii", False), any_order)
    ids = tokenizer.encode(text)
    if task.get("check_member"):  # (a drawn instance: the grammar may not admit it at all)
        end = g.walk(ids)
        if end is None or not g.is_accepting(end):
            return {"name": task["name"], "tokens": len(ids), "budget": budget,
                    "refused": None, "member": False, "steps": []}  # fmt: skip
    state, steps, refused, started = g.initial_state, [], None, time.perf_counter()
    losses: list[int] = []
    first_loss = None
    for t, y in enumerate([*ids, tokenizer.eos_token_id]):
        t0 = time.perf_counter()
        admitted = g.admissible(state, budget - t)
        steps.append(time.perf_counter() - t0)
        if lost:
            losses.append(unbounded_lost(g, state, budget - t, admitted))
            if losses[-1] and first_loss is None:
                first_loss = (t, text_before(tokenizer, ids, t))
        if not admitted[y]:
            if not g.allowed(state)[y]:  # the grammar itself refuses it: not a member (the
                # shorten suite's source is longer than its maxLength, by design)
                return {"name": task["name"], "tokens": len(ids), "budget": budget,
                        "refused": None, "member": False, "steps": steps}  # fmt: skip
            refused = {"step": t, "at": text_before(tokenizer, ids, t),
                       "token": tokenizer.decode([y]), "kept": int(admitted.sum()),
                       "allowed": int(g.allowed(state).sum())}  # fmt: skip
            break
        if y == tokenizer.eos_token_id:
            break
        state = g.next_state(state, y)
        if time.perf_counter() - started > limit_s:
            refused = {"step": t, "at": "time limit", "token": "", "kept": 0, "allowed": 0}
            break
    return {"name": task["name"], "tokens": len(ids), "budget": budget, "refused": refused,
            "member": True, "steps": steps, "lost": losses, "first_loss": first_loss}  # fmt: skip


def unbounded_lost(g, state, remaining: int, admitted) -> int:
    """How many tokens the budgeted set ``admitted`` lacks that the same rule keeps without a
    bound on its work (every splice, a search for every candidate: the rule's own reference,
    ``CertifiedBudget._within(state, room, None)``); 0 where no check applies (the parser's
    mask is the set)."""
    keep = g.budget_rule.kept(state, remaining)
    if keep is None:
        return 0
    # (room: after a token, its completion, EOS)
    full = g.budget_rule._within(state, remaining - 2, None)
    return int(np.count_nonzero(full & (keep ^ 1)))


def spelled(
    data, schema: dict, pretty: bool = False, ascii: bool = False, own_order: bool = False
) -> str:
    """``data`` as JSON in ``schema``'s key order (``own_order``: in its own): compact or
    indented by four; with ``ascii``, as ``json.dumps`` writes by default (every character
    outside ASCII a ``\\uXXXX`` escape, a surrogate pair above U+FFFF)."""
    data = data if own_order else in_schema_order(data, schema)
    return json.dumps(data, ensure_ascii=ascii,
                      indent=4 if pretty else None,
                      separators=None if pretty else (",", ":"))  # fmt: skip


def maskbench_tasks(
    tokenizer, slack: int, files: int | None, ascii: bool = False, pretty: bool = False
) -> list[dict]:
    """MaskBench's valid instances as walk tasks: JSON in the schema's key order, the budget
    the instance's tokens (as the walk spells it) plus EOS plus ``slack`` (0: exactly what the
    answer needs)."""
    tasks = []
    for row in [json.loads(line) for line in MASKBENCH.open()][:files]:
        for case in row["tests"]:
            if not case["valid"]:
                continue
            text = spelled(case["data"], row["schema"], pretty, ascii)
            tasks.append({"name": row["description"], "schema": json.dumps(row["schema"]),
                          "instance": json.dumps(case["data"]), "ascii": ascii,
                          "max_new_tokens": len(tokenizer.encode(text)) + 1 + slack})  # fmt: skip
    return tasks


def drawn_tasks(
    tokenizer,
    slack: int,
    double: bool,
    strict: bool,
    ascii: bool = False,
    pretty: bool = False,
    any_order: bool = False,
) -> list[dict]:
    """The instances ``draw_instances.py`` drew from the JSONSchemaBench development file, as
    walk tasks like MaskBench's (compact, the schema's key order), each first checked to be a
    member of the grammar (with ``strict=True`` an open object's extra key is not)."""
    schemas = {
        (r["source"], r["name"]): r["schema"]
        for r in map(json.loads, (REALWORLD / "jsonschemabench-dev.jsonl").open())
    }
    tasks = []
    for row in map(json.loads, (ROOT / "benchmarks" / "data" / "drawn_instances.jsonl").open()):
        schema, data = schemas[row["source"], row["name"]], json.loads(row["instance"])
        n = len(tokenizer.encode(spelled(data, schema, pretty, ascii, any_order)))
        tasks.append({"name": f"{row['source']}---{row['name']}", "schema": json.dumps(schema),
                      "instance": row["instance"], "check_member": True, "strict": strict,
                      "ascii": ascii, "any_order": any_order,
                      "max_new_tokens": 2 * n if double else n + 1 + slack})  # fmt: skip
    return tasks


def text_before(tokenizer, ids: list[int], t: int) -> str:
    return tokenizer.decode(ids[:t])[-32:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="transcribe",
                        choices=["transcribe", "shorten", "maskbench", "drawn"])  # fmt: skip
    parser.add_argument(
        "--slack",
        type=int,
        default=0,
        help="maskbench, drawn: budget = the instance's tokens + 1 + slack",
    )
    parser.add_argument("--double", action="store_true",
                        help="drawn: budget = twice the instance's tokens")  # fmt: skip
    parser.add_argument("--open-objects", action="store_true",
                        help="drawn: strict=False (the spec's language: an object admits "
                             "keys its schema does not list)")  # fmt: skip
    parser.add_argument("--ascii", action="store_true",
                        help="maskbench, drawn: spelled as json.dumps writes by default (every "
                             "character outside ASCII escaped)")  # fmt: skip
    parser.add_argument(
        "--any-order",
        action="store_true",
        help="drawn: key_order='any', each instance in its own key order",
    )
    parser.add_argument("--files", type=int, default=None, help="maskbench: the first N files")
    parser.add_argument("--every", type=int, default=1,
                        help="every N-th task only (a quicker sample, e.g. for interleaved "
                             "runs of two versions)")  # fmt: skip
    parser.add_argument("--layout", default="pretty", choices=["pretty", "compact"])
    parser.add_argument("--limit", type=float, default=120.0, help="seconds a task may take")
    parser.add_argument("--lost", action="store_true",
                        help="also count, per step, the tokens the same rule keeps without a "
                             "bound on its work (slow: a search for every candidate)")  # fmt: skip
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    tokenizer = load_default_tokenizer()
    if args.suite == "maskbench":
        tasks = maskbench_tasks(tokenizer, args.slack, args.files, args.ascii,
                                args.layout == "pretty")  # fmt: skip
    elif args.suite == "drawn":
        tasks = drawn_tasks(tokenizer, args.slack, args.double, not args.open_objects,
                            args.ascii, args.layout == "pretty", args.any_order)  # fmt: skip
    else:
        path = ROOT / "hf_fvo" / "eval" / "suites" / "tasks" / f"{args.suite}.jsonl"
        tasks = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tasks = tasks[:: args.every]
    rows = []
    for task in tasks:
        try:
            rows.append(walk_task(task, tokenizer, args.layout, args.limit, args.lost))
        except GrammarError as exc:  # a budget below the proven shortest member: a refusal
            rows.append({"name": task["name"], "tokens": 0, "budget": task["max_new_tokens"],
                         "member": True, "steps": [], "lost": [], "first_loss": None,
                         "refused": {
                             "step": 0, "at": type(exc).__name__, "token": "", "kept": 0,
                             "allowed": 0}})  # fmt: skip
    steps = np.array([s for r in rows for s in r["steps"]]) * 1000
    refused = [r for r in rows if r["refused"] is not None]
    slowest = max(rows, key=lambda r: sum(r["steps"]))
    budget_note = ", strict=False" if args.open_objects else ""
    budget_note += ", ASCII escapes" if args.ascii else ""
    budget_note += ", any key order" if args.any_order else ""
    budget_note += (", budget = twice the tokens" if args.suite == "drawn" and args.double
                   else f", budget = tokens + 1 + {args.slack}"
                   if args.suite in ("maskbench", "drawn") else "")  # fmt: skip
    lost_note = ", against the rule without a work bound" if args.lost else ""
    lost_note += f", every {args.every}th task" if args.every > 1 else ""
    lines = [
        f"## Budget rule: each task's answer walked through its budgeted sets ({args.suite}, "
        f"{args.layout}{budget_note}{lost_note})",
        "",
        provenance("llguidance", "transformers"),
        "",
        "| tasks | not members | refused part-way | row-steps | all steps (s) | p50 ms | p99 ms | "
        "max ms | slowest task (s) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {len(rows)} | {sum(not r['member'] for r in rows)} | {len(refused)} | {len(steps)} | "
        f"{steps.sum() / 1000:.1f} | {np.percentile(steps, 50):.2f} | "
        f"{np.percentile(steps, 99):.1f} | {steps.max():.0f} | {slowest['name']} "
        f"({sum(slowest['steps']):.1f}) |",
        "",
    ]
    if args.lost:
        losing = [r for r in rows if any(r["lost"])]
        lines += [
            "Tokens a step drops that the same rule without a work bound keeps (members that "
            f"fit, lost for lack of search): {sum(sum(r['lost']) for r in rows)} tokens at "
            f"{sum(bool(x) for r in rows for x in r['lost'])} of {len(steps)} row-steps, in "
            f"{len(losing)} of {len(rows)} tasks.",
            "",
        ]
        for r in losing:
            t, at = r["first_loss"]
            lines.append(f"- lost: `{r['name']}`: {sum(r['lost'])} tokens at "
                         f"{sum(bool(x) for x in r['lost'])} steps, first at step {t} after "
                         f"`{at!r}`")  # fmt: skip
        lines.append("")
    for r in refused:
        f = r["refused"]
        lines.append(f"- refused: `{r['name']}` ({r['tokens']} tokens, budget {r['budget']}) "
                     f"at step {f['step']}, `{f['token']!r}` after `{f['at']!r}` "
                     f"({f['kept']} of {f['allowed']} kept)")  # fmt: skip
    publish(lines, args.write)


if __name__ == "__main__":
    main()
