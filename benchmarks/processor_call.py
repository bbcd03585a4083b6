"""One logits-processor call, hf_fvo beside the Outlines processors of outlines-core, XGrammar and
llguidance, interleaved in one run.

Each processor is called along the same valid path through a JSON schema (hf_fvo's greedy masked
output with SmolLM2), one call per position, batch 1, on the model's real logits at that position
(float32, 49,152 ids), exactly as ``generate`` calls it. The Outlines processors are stateful and
advance on the last token of each call, so every pass starts from a fresh processor; passes
alternate between the processors so that drift on the machine hits all alike. Reported: the median
and 90th percentile of the per-call time over all positions and passes, and the ratio of each
median to the fastest peer's.

Usage: python benchmarks/processor_call.py [--passes 30] [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import transformers

SECTION = "## One logits-processor call: hf_fvo beside outlines-core, XGrammar, llguidance"
SCHEMAS = {
    "finite (A)": {
        "type": "object",
        "properties": {"status": {"enum": ["ok", "error", "pending"]}},
        "required": ["status"],
    },
    "free text": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    },
}
PEERS = ("outlines_core", "xgrammar", "llguidance")
NOTES = """The Outlines processors are outlines 1.x's `OutlinesCoreLogitsProcessor`,
`XGrammarLogitsProcessor` and `LLGuidanceLogitsProcessor` (built with
`outlines.backends.get_json_schema_logits_processor`); hf_fvo's is `FVOLogitsProcessor` on its
default pushdown (llguidance) backend, and, in the rows marked "(automaton)", on its token
automaton (both schemas are regular). outlines-core precomputes a mask per DFA state when it
compiles; hf_fvo's pushdown backend, like the llguidance processor, asks the parser for each
mask at run time, its automaton reads the mask from its transition table.
The budget rows give the pushdown masking processor `max_new_tokens`: 256 (the schema's closing
bound never binds on this path: the parser's mask, unchanged), and the path's own length (every
position is at the end of the budget: each call certifies every admissible token, see
docs/grammar.md, "Budgets"; the free-text schema's string is where one probe mask answers for
~49k tokens).
hf_fvo's masking takes a fast path: the scores plus a bias that is 0.0 on A_t and −inf elsewhere,
written as bit patterns (on the pushdown backend straight from the parser's packed mask, one
table lookup per byte), added and checked for NaN/+inf in numpy; no log-softmax, no diagnostics
over the row. On the pushdown backend, Masking
+ OneStep scores up to 32 candidates per position, and each needs its next state's mask from the
parser: one call costs roughly as many mask computations as there are likely candidates; on the
automaton it sums p_t once per distinct next state."""


def main() -> None:
    import outlines
    from harness import provenance, publish
    from outlines.backends import get_json_schema_logits_processor

    import hf_fvo
    from hf_fvo.generation import FVOLogitsProcessor
    from hf_fvo.models import load_default_model, load_default_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    transformers.logging.set_verbosity_error()
    tok, model = load_default_tokenizer(), load_default_model()
    wrapped = outlines.from_transformers(model, tok)
    messages = [{"role": "user", "content": "Reply with a JSON object."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                     return_dict=True)["input_ids"]  # fmt: skip
    lines = [
        SECTION,
        "",
        provenance("outlines", "outlines-core", "xgrammar", "llguidance")
        + " SmolLM2-135M-Instruct's vocabulary and logits, compact JSON, batch 1.",
        "",
        "| schema | processor | calls | median | p90 | median ÷ fastest peer |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for label, schema in SCHEMAS.items():
        g = hf_fvo.Grammar.from_json_schema(schema, tok, whitespace="",
                                            vocab_size=model.config.vocab_size)  # fmt: skip
        out = hf_fvo.generate(model, prompt, grammar=g, max_new_tokens=32, do_sample=False,
                              output_logits=True, return_dict_in_generate=True)  # fmt: skip
        path = out.sequences[0, prompt.shape[1] :]
        logits = [x[0] for x in out.logits]
        width = prompt.shape[1]

        dfa = hf_fvo.Grammar.from_json_schema(schema, tok, whitespace="", backend="automaton",
                                              vocab_size=model.config.vocab_size)  # fmt: skip

        def fresh(name: str, g=g, dfa=dfa, width=width, schema=schema, path=path):
            if name.startswith("hf_fvo"):
                phi = "onestep" if "onestep" in name else "uniform"
                grammar = dfa if name.endswith("(automaton)") else g
                budget = 256 if "256" in name else len(path) if "binds" in name else None
                return FVOLogitsProcessor(grammar, phi=phi, model=model, prompt_length=width,
                                          max_new_tokens=budget)  # fmt: skip
            return get_json_schema_logits_processor(name, wrapped, json.dumps(schema))

        names = (*(f"{n}{b}" for b in ("", " (automaton)")
                   for n in ("hf_fvo mask", "hf_fvo mask + onestep")),
                 "hf_fvo mask, budget 256", "hf_fvo mask, budget binds", *PEERS)  # fmt: skip
        times: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(args.passes):
            for name in names:
                proc = fresh(name)
                for i, row in enumerate(logits):
                    ids = torch.cat([prompt[0], path[:i]])[None]
                    scores = row[None].clone()
                    t0 = time.perf_counter()
                    proc(ids, scores)
                    times[name].append(time.perf_counter() - t0)
        fastest = min(statistics.median(times[p]) for p in PEERS)
        for name in names:
            med = statistics.median(times[name])
            p90 = sorted(times[name])[int(0.9 * (len(times[name]) - 1))]
            lines.append(f"| {label} | {name} | {len(times[name])} | {med * 1e6:.0f} µs | "
                         f"{p90 * 1e6:.0f} µs | {med / fastest:.2f} |")  # fmt: skip
    lines += ["", NOTES]
    publish(lines, args.write)


if __name__ == "__main__":
    main()
