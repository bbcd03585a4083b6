"""The grammar step during generation under budgets that bind: greedy, sampled, 4-beam and
particle decoding on development-set schemas at the shortest member + 2, + 8 and + 24 tokens and
at 256.

Per schema (every ``--every``-th row of each development file that compiles — compact JSON,
MaskBench rows as the spec's language — and whose shortest member the grammar builds within
``--longest`` tokens; SmolLM2 with the schema in the prompt, as ``realworld_generation.py``
asks): ``hf_fvo.generate`` at each budget (the shortest member's tokens, ``shortest_bounds``'s
upper bound, plus EOS, plus 2, 8 or 24; and 256) greedy and sampled; at + 2, where the budget
binds from the first token, also ``num_beams=4`` and ``particles=8``. Without the grammar's free
drafts (``grammar_draft=False``: plain decoding, one processor call per step; with them the
draft's own grammar work falls between forwards, outside the processor). Two times per step:

- *grammar step*: each call of ``FVOLogitsProcessor`` (every row's state advanced, its set under
  the budget, the scores masked) — greedy, sampled and beams; per row-step = the call ÷ its rows;
- *between forwards*: the wall time from the end of one forward to the start of the next (the
  grammar step plus everything else the decoding loop does: Transformers' own step, and for
  particles the weights, resampling and the runs the grammar spells) — every decoder,
  particles included; per row-step = the gap ÷ the tokens the next forward feeds (rows ×
  tokens a row: particles feed all rows packed in one sequence, each its last token and the
  run after it, every token a row-step whose set was computed).

Each output's wall time is set beside the model's unconstrained ``generate`` of as many new
tokens with as many rows (greedy; 4 beams; 8 sampled sequences), run right after it: "over 2×"
counts outputs whose time exceeds twice that. Every output must be complete (0 cut) and valid.

``--phases`` also times each phase of the budget rule (``CertifiedBudget``'s certificates,
closings and searches, failed apart from found) within every processor call and prints, for
the steps over 20 ms, what they spent by phase and by room (a diagnostic: it wraps private
methods, called per candidate, so its steps are slower — read its shares, not its times,
and never ``--write`` with it); ``--decoders`` and ``--margins`` choose the rows;
``--open-values`` takes the schemas whose objects take any value (``additionalProperties: {}``:
a key the schema does not list, then any JSON value) in place of every N-th row.

Usage: python benchmarks/budget_step.py [--every N] [--longest T] [--decoders greedy,...]
       [--margins 2,8,24,256] [--phases] [--open-values] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from harness import provenance, publish

SECTION = "## Budget rule: the grammar step during generation, budgets that bind"
REAL = Path(__file__).resolve().parents[2] / "shared" / "realworld"


class _Clock:
    """Times the processor's calls and the gaps between the model's forwards."""

    def __init__(self, model) -> None:
        self.steps: list[tuple[float, int]] = []  # (seconds, rows) per processor call
        self.phase: dict[str, float] = {}  # (--phases) phase → seconds in this call
        self.phases: list[tuple[float, int, dict[str, float]]] = []  # (seconds, room, phases)
        self.gaps: list[tuple[float, int]] = []  # (seconds, rows) between two forwards
        self._end: float | None = None
        self.budget: int | None = None  # (--phases: the output's budget and prompt length)
        self.prompt = 0
        model.register_forward_pre_hook(self._start, with_kwargs=True)
        model.register_forward_hook(self._stop)

    def reset(self) -> None:
        self.steps, self.gaps, self._end, self.phases = [], [], None, []
        self.phase = {}

    def _start(self, module, args, kwargs) -> None:
        if self._end is not None:
            ids = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
            # row-steps fed: rows × tokens each (particles pack every row's last token and the
            # run the grammar spelled after it into one sequence: each token a row-step)
            rows = math.prod(ids.shape[:2]) if isinstance(ids, torch.Tensor) else 1
            self.gaps.append((time.perf_counter() - self._end, rows))

    def _stop(self, module, args, output) -> None:
        self._end = time.perf_counter()


_PHASES = ("_matched", "_string_classes", "_probe", "_inside_string", "_spliced",
           "_closing_prefixes", "_continued", "_witness_at", "_searched", "_closed")  # fmt: skip


def _timed_phases(clock: _Clock) -> None:
    """Per processor call, the seconds each phase of the budget rule took (``_searched`` and
    ``_closed`` split by whether they found a completion), into ``clock.phase``."""
    from hf_fvo.grammar.budget.certified import CertifiedBudget

    for name in _PHASES:
        method = getattr(CertifiedBudget, name)

        def timed(self, *args, _method=method, _name=name, **kwargs):
            t0 = time.perf_counter()
            out = _method(self, *args, **kwargs)
            key = _name
            if _name in ("_searched", "_closed"):
                key += " found" if out is not None else " failed"
            clock.phase[key] = clock.phase.get(key, 0.0) + time.perf_counter() - t0
            return out

        setattr(CertifiedBudget, name, timed)


def _timed_processor(clock: _Clock) -> None:
    from hf_fvo.generation import processors

    call = processors.FVOLogitsProcessor.__call__

    def timed(self, input_ids, scores):
        clock.phase = {}
        t0 = time.perf_counter()
        out = call(self, input_ids, scores)
        seconds = time.perf_counter() - t0
        clock.steps.append((seconds, input_ids.shape[0]))
        if clock.budget is not None:  # (--phases: the room after this step's token)
            room = clock.budget - (input_ids.shape[1] - clock.prompt) - 2
            clock.phases.append((seconds, room, clock.phase))
        return out

    processors.FVOLogitsProcessor.__call__ = timed


def _open_values(schema) -> bool:
    """Whether some object of ``schema`` takes any value for a key it does not list."""
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return '"additionalProperties": {}' in text or '"additionalProperties":{}' in text


def main() -> None:
    import hf_fvo
    from hf_fvo import Grammar
    from hf_fvo.errors import BudgetTooSmallError, BudgetUndecidedError, GrammarError
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=40, help="every N-th row of each file")
    ap.add_argument("--longest", type=int, default=120, help="shortest members up to T tokens")
    ap.add_argument("--decoders", default="greedy,sampled,4 beams,8 particles")
    ap.add_argument("--margins", default="2,8,24,256", help="tokens beyond the shortest; 256")
    ap.add_argument("--phases", action="store_true", help="time the rule's phases (diagnostic)")
    ap.add_argument(
        "--open-values",
        action="store_true",
        help="instead of every N-th row: "
        "the rows whose objects take any value (additionalProperties: {})",
    )
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    decoders = set(args.decoders.split(","))
    margins = [None if m == "256" else int(m) for m in args.margins.split(",")]
    torch.set_num_threads(1)
    tok, model = load_default_tokenizer(), load_default_model()
    clock = _Clock(model)
    _timed_processor(clock)
    if args.phases:
        _timed_phases(clock)
    from realworld_generation import outcome, prompt_ids

    eos = {tok.eos_token_id}
    rows_of: dict[str, list] = defaultdict(list)  # decoder → per row-step seconds
    gaps_of: dict[str, list] = defaultdict(list)
    firsts: dict[str, list] = defaultdict(list)  # decoder → the first step's per row seconds
    outputs: dict[str, list] = defaultdict(list)  # decoder → (seconds, unconstrained seconds)
    status: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    schemas = 0
    clock_phases: list[tuple[float, int, dict[str, float]]] = []  # (--phases) every call
    for name in ("jsonschemabench-dev", "maskbench-dev"):
        rows = [json.loads(line) for line in (REAL / f"{name}.jsonl").open()]
        rows = (
            [r for r in rows if _open_values(r["schema"])]
            if args.open_values
            else rows[:: args.every]
        )
        for row in rows:
            try:
                g = Grammar.from_json_schema(row["schema"], tok, whitespace="",
                                             strict="tests" not in row,
                                             vocab_size=model.config.vocab_size)  # fmt: skip
            except GrammarError:
                continue
            shortest = g.shortest_bounds(g.initial_state)[1]
            if shortest is None or shortest > args.longest:
                continue
            schemas += 1
            ids = prompt_ids(tok, row["schema"])
            for margin in margins:
                budget = 256 if margin is None else shortest + 1 + margin
                label = "256" if margin is None else f"+{margin}"
                plain = {"grammar_draft": False}  # (the processor is then the whole step)
                runs = [("greedy", {"do_sample": False, **plain}),
                        ("sampled", {"do_sample": True, **plain})]  # fmt: skip
                if margin == 2:
                    runs += [("4 beams", {"do_sample": False, "num_beams": 4, **plain}),
                             ("8 particles", {"do_sample": True, "particles": 8})]  # fmt: skip
                for decoder, kwargs in runs:
                    if decoder not in decoders:
                        continue
                    key = f"{decoder} {label}"
                    torch.manual_seed(0)
                    clock.reset()
                    if args.phases:
                        clock.budget, clock.prompt = budget, ids.shape[1]
                    t0 = time.perf_counter()
                    try:
                        out = hf_fvo.generate(model, ids, grammar=g, max_new_tokens=budget,
                                              top_k=0, **kwargs)  # fmt: skip
                    except (BudgetTooSmallError, BudgetUndecidedError):
                        status[key]["refused"] += 1
                        continue
                    seconds = time.perf_counter() - t0
                    new = out[0, ids.shape[1] :].tolist()
                    _, state, valid, _ = outcome(tok, row["schema"], new, eos, None)
                    status[key][state] += 1
                    status[key]["valid"] += bool(valid)
                    clock_phases += clock.phases
                    steps = [s / r for s, r in clock.steps]
                    gaps = [s / r for s, r in clock.gaps]
                    firsts[key] += (steps or gaps)[:1]  # the start's sets
                    rows_of[key] += steps[1:]
                    gaps_of[key] += gaps[1:]
                    length = len(new)
                    plain = {"num_beams": 4} if "beams" in decoder else (
                        {"do_sample": True, "num_return_sequences": 8}
                        if "particles" in decoder else {})  # fmt: skip
                    t0 = time.perf_counter()
                    model.generate(ids, max_new_tokens=length, min_new_tokens=length,
                                   pad_token_id=tok.eos_token_id, top_k=0, **plain)  # fmt: skip
                    outputs[key].append((seconds, time.perf_counter() - t0))
            print(f"{schemas} schemas", flush=True)
    lines = [SECTION, "", provenance("llguidance", "transformers"), "",
             f"{schemas} schemas ("
             + ("the rows whose objects take any value, `additionalProperties: {}`, "
                if args.open_values else f"every {args.every}th row ")
             + "of each development file that "
             f"compiles, shortest member ≤ {args.longest} tokens); SmolLM2-135M-Instruct, "
             "float32, one thread. Per row-step: a processor call ÷ its rows (the time "
             "between two forwards ÷ the tokens the second feeds: particles pack their rows "
             "and runs); the first step of each output (the start's sets, the "
             "first time a grammar meets a budget) apart, its max in its own column, the "
             "others after it. 'over 2×': outputs whose wall time exceeds twice the "
             "unconstrained generate() of as many new tokens and rows.", "",
             "| decoder, budget | outputs | cut | valid | first step max ms | step p50 ms | "
             "step p99 ms | step max ms | between forwards p99 ms | max ms | output ÷ "
             "unconstrained median | max | over 2× |", "|---|" + "---|" * 12]  # fmt: skip
    for key in sorted(status, key=lambda k: (k.split()[-1], k)):
        s = status[key]
        done = s["complete"] + s["cut"]
        step = np.array(rows_of[key] or [np.nan]) * 1e3
        gap = np.array(gaps_of[key] or [np.nan]) * 1e3
        ratio = np.array([a / b for a, b in outputs[key]] or [np.nan])
        lines.append(
            f"| {key} | {done} | {s['cut']} | {s['valid']} | "
            f"{max(firsts[key] or [np.nan]) * 1e3:.0f} | {np.percentile(step, 50):.2f} | "
            f"{np.percentile(step, 99):.1f} | {step.max():.0f} | {np.percentile(gap, 99):.1f} | "
            f"{gap.max():.0f} | {np.median(ratio):.2f} | {ratio.max():.2f} | "
            f"{int((ratio > 2).sum())} |" + (f" ({s['refused']} refused)" if s["refused"] else "")
        )
    if args.phases:
        slow = [(sec, room, phase) for sec, room, phase in clock_phases if sec > 0.02]
        spent: dict[str, float] = defaultdict(float)
        by_room: dict[str, list[float]] = defaultdict(list)
        for sec, room, phase in slow:
            for name, t in phase.items():
                spent[name] += t
            by_room[str(room) if room < 5 else "5+"].append(sec)
        print(f"phases: {len(clock_phases)} processor calls, {len(slow)} over 20 ms "
              f"({sum(s for s, _, _ in slow):.2f} s); in those, seconds by phase:")  # fmt: skip
        for name, t in sorted(spent.items(), key=lambda kv: -kv[1]):
            print(f"  {t:8.3f}  {name}")
        print(
            "  by room:", {room: (len(v), round(sum(v), 2)) for room, v in sorted(by_room.items())}
        )
    publish(lines, args.write)


if __name__ == "__main__":
    main()
