"""One grammar step for a batch: B concurrent rows per engine step, hf_fvo beside XGrammar, in
one interleaved run.

Rows follow the valid instances of MaskBench development schemas (compact JSON, tokenized by
SmolLM2's tokenizer), B rows a schema at staggered positions, one token a row per step; each
step advances every row and masks a (B × 49,152) float32 logits tensor:

- *hf_fvo per row*: the vLLM adapter's per-request processor
  (:class:`hf_fvo.vllm.request.RequestProcessor`, what serves a request today), row by row;
- *hf_fvo batched*: what vLLM's engine step (``FVOProcessor.apply``) does with the same
  per-request processors: each row's state read from its tokens (``RequestProcessor.row``),
  the batch's sets packed in one call (:meth:`Grammar.admissible_words`: distinct parser masks
  together, in llguidance's thread pool) and applied in one operation
  (:func:`hf_fvo.generation.processors.mask_batch`);
- *XGrammar*: ``GrammarMatcher.accept_token`` per row, ``BatchGrammarMatcher.
  batch_fill_next_token_bitmask`` and ``apply_token_bitmask_inplace`` (its CPU kernel).

Budgets: *far* (none: the parser's mask) and *binding* (each row's budget ends with its
instance: every step certifies its tokens; XGrammar has no budget rule, its time is the far
one). Reported: the median milliseconds per step over the timed steps and rounds (engines
alternate per round), and hf_fvo batched ÷ XGrammar.

Usage: python benchmarks/batch_step.py [--schemas 4] [--sizes 1,16,64,256] [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from harness import MASKBENCH, provenance, publish

SECTION = "## One grammar step for a batch: hf_fvo beside XGrammar"
STEPS = 12  # timed steps per round


def _paths(tok, count: int, least: int) -> list[tuple[dict, list[int]]]:
    """Schemas whose first valid instance hf_fvo and XGrammar both accept, as token paths."""
    import xgrammar as xgr

    from hf_fvo import Grammar
    from hf_fvo.errors import GrammarError

    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    out = []
    for line in MASKBENCH.open():
        row = json.loads(line)
        data = next((t["data"] for t in row["tests"] if t["valid"]), None)
        if data is None:
            continue
        ids = tok.encode(json.dumps(data, separators=(",", ":"), ensure_ascii=False))
        if len(ids) < least:
            continue
        try:
            g = Grammar.from_json_schema(row["schema"], tok, whitespace="")
            xg = compiler.compile_json_schema(json.dumps(row["schema"]), any_whitespace=False,
                                              separators=(",", ":"), strict_mode=False)  # fmt: skip
        except (GrammarError, RuntimeError, ValueError):
            continue
        m = xgr.GrammarMatcher(xg)
        if g.walk(ids) is None or not all(m.accept_token(t) for t in ids):
            continue
        out.append(({"name": row["description"], "grammar": g, "xgrammar": xg}, ids))
        if len(out) == count:
            break
    return out


def _round(engine: str, case: dict, ids: list[int], rows: int, binding: bool, seed: int):
    """Milliseconds of each of STEPS steps of ``rows`` rows (setup untimed)."""
    import xgrammar as xgr

    from hf_fvo.generation.processors import mask_batch
    from hf_fvo.phi import UniformPhi
    from hf_fvo.vllm.request import RequestProcessor

    g = case["grammar"]
    room = len(ids) - STEPS
    starts = [(r * 7 + seed) % room for r in range(rows)]
    budgets = [len(ids) + 1 if binding else None for _ in range(rows)]
    logits = torch.randn(rows, g.vocab_size, generator=torch.Generator().manual_seed(seed))
    times = []
    if engine == "hf_fvo per row":
        procs = [RequestProcessor(g, UniformPhi(g), b) for b in budgets]
        outs = [list(ids[:s]) for s in starts]
        for _ in range(STEPS):
            scores = logits.clone()
            t0 = time.perf_counter()
            for r in range(rows):
                outs[r].append(ids[len(outs[r])])
                scores[r] = procs[r](outs[r], scores[r])
            times.append(time.perf_counter() - t0)
        return times
    if engine == "hf_fvo batched":
        procs = [RequestProcessor(g, UniformPhi(g), b) for b in budgets]
        outs = [list(ids[:s]) for s in starts]
        for out, proc in zip(outs, procs, strict=True):
            proc.row(out)  # the state at the start, as the per-row processor had it
        for _ in range(STEPS):
            scores = logits.clone()
            t0 = time.perf_counter()
            for out in outs:
                out.append(ids[len(out)])
            rows = [(p.processor, p.row(outs[r], r)) for r, p in enumerate(procs)]
            mask_batch(torch.empty_like(scores), scores, rows)
            times.append(time.perf_counter() - t0)
        return times
    matchers = [xgr.GrammarMatcher(case["xgrammar"]) for _ in range(rows)]
    for m, s in zip(matchers, starts, strict=True):
        for t in ids[:s]:
            m.accept_token(t)
    batch = xgr.BatchGrammarMatcher()
    bitmask = xgr.allocate_token_bitmask(rows, g.vocab_size)
    pos = list(starts)
    for _ in range(STEPS):
        scores = logits.clone()
        t0 = time.perf_counter()
        for r, m in enumerate(matchers):
            m.accept_token(ids[pos[r]])
            pos[r] += 1
        batch.batch_fill_next_token_bitmask(matchers, bitmask)
        xgr.apply_token_bitmask_inplace(scores, bitmask)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    from hf_fvo.models import load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=4)
    ap.add_argument("--sizes", default="1,16,64,256")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok = load_default_tokenizer()
    cases = _paths(tok, args.schemas, least=STEPS + 24)
    sizes = [int(x) for x in args.sizes.split(",")]
    engines = ("hf_fvo per row", "hf_fvo batched", "xgrammar")
    table: dict[tuple[str, int, bool], list[float]] = {}
    for rows in sizes:
        for binding in (False, True):
            for k in range(args.rounds):
                for case, ids in cases:
                    for engine in engines:
                        if engine == "xgrammar" and binding:
                            continue
                        t = _round(engine, case, ids, rows, binding, seed=k)
                        table.setdefault((engine, rows, binding), []).extend(t)
            print(rows, "binding" if binding else "far", {
                e: round(1e3 * statistics.median(table[(e, rows, binding)]), 2)
                for e in engines if (e, rows, binding) in table}, flush=True)  # fmt: skip
    lines = [SECTION, "", provenance("llguidance", "xgrammar"), "",
             f"{len(cases)} MaskBench development schemas: "
             + ", ".join(f"`{c['name']}`" for c, _ in cases)
             + f". Median milliseconds per step ({STEPS} steps × {args.rounds} rounds × "
             "schemas); XGrammar has no budget rule (its far time is the reference).", "",
             "| rows B | budget | hf_fvo per row | hf_fvo batched | XGrammar "
             "| batched ÷ XGrammar |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for rows in sizes:
        x = statistics.median(table[("xgrammar", rows, False)])
        for binding in (False, True):
            per = statistics.median(table[("hf_fvo per row", rows, binding)])
            bat = statistics.median(table[("hf_fvo batched", rows, binding)])
            lines.append(f"| {rows} | {'binding' if binding else 'far'} | {1e3 * per:.2f} | "
                         f"{1e3 * bat:.2f} | {1e3 * x:.2f} | {bat / x:.1f}× |")  # fmt: skip
    publish(lines, args.write)


if __name__ == "__main__":
    main()
