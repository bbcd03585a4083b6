"""Tokens/s of FVO-Spec's drafts against plain masked sampling, interleaved in one run.

On the JSON benchmark schemas (benchmarks/schemas.py) with the embedded SmolLM2-135M-Instruct,
``do_sample=True, top_k=0``, each configuration samples once per schema per repetition, in a
round-robin (so drift on a shared machine hits every configuration alike):

- ``masked``: plain masked sampling, no draft (``grammar_draft=False``; the baseline, ratios are
  to it);
- ``default``: ``hf_fvo.generate`` with no flags: no draft model, the grammar's spelled-out text
  as free point-mass drafts (what ``grammar_draft=None`` does for one sequence);
- ``bf16``: a bfloat16 copy as draft, with the grammar's free runs (FVO-Spec's default flags);
- ``bf16, no runs``: the same draft without them (``grammar_draft=False``: FVO-Spec before).

With ``--exact``, also exact Φ against mask-only speculation with the same draft and flags
(grammar-only drafts, and the bf16 draft with runs), on the finite schemas; exact Φ explores each
prompt's token trie once, before the timed runs (as a cached table would be).

With ``--open N``, the schemas are instead the first N development-set schemas that compile
(benchmarks/realworld_generation.py's choice and prompt; default pushdown backend), where strings
and numbers are open: the grammar spells out less of the output.

Usage: python benchmarks/spec_speed.py [--schemas A B C D E | --open 8] [--reps 5] [--exact]
       [--write]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
import transformers

SECTION = "## FVO-Spec speed: free grammar drafts against plain masked sampling"


def main() -> None:
    from harness import provenance, publish
    from schemas import SCHEMAS, compiled

    import hf_fvo
    from hf_fvo.models import load_default_model, load_default_tokenizer
    from hf_fvo.phi import ExactPhi, PrefixLM

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", nargs="*", default=[k.split()[0] for k in SCHEMAS])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4, help="draft-model tokens per round")
    ap.add_argument("--exact", action="store_true", help="add exact Φ vs mask-only rows")
    ap.add_argument("--open", type=int, default=0, help="N development-set schemas instead")
    ap.add_argument("--device", default="cpu", help="where the models run (e.g. cuda)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    transformers.logging.set_verbosity_error()
    tok, model = load_default_tokenizer(), load_default_model().to(args.device)
    draft = copy.deepcopy(model).to(torch.bfloat16)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    if args.open and args.exact:
        ap.error("--exact needs the finite schemas, not --open")
    if args.open:
        from realworld_generation import DEV, pick_schemas, prompt_ids

        rows = [json.loads(line) for line in DEV.open()]
        chosen = pick_schemas(rows, args.open, tok, model.config.vocab_size)
        grammars = {r["name"]: (prompt_ids(tok, r["schema"])[0].tolist(), g) for r, g in chosen}
    else:
        keys = [k for k in SCHEMAS if any(k.startswith(s) for s in args.schemas)]
        grammars = {k: compiled(k, tok, model.config.vocab_size) for k in keys}
    configs: dict[str, dict] = {
        "masked": {"grammar_draft": False},
        "default": {},
        "bf16": {"assistant_model": draft, "num_assistant_tokens": args.gamma},
        "bf16, no runs": {
            "assistant_model": draft,
            "num_assistant_tokens": args.gamma,
            "grammar_draft": False,
        },
    }
    exact = {}
    if args.exact:
        for k, (prompt, g) in grammars.items():  # explored once, before the timed runs
            exact[k] = ExactPhi(g, PrefixLM(model, batch_size=64), tol=1e-6, max_nodes=200_000)
            exact[k].root_exploration(prompt)
        configs["default, exact Φ"] = {"phi": "exact"}
        configs["bf16, exact Φ"] = {**configs["bf16"], "phi": "exact"}
    seconds = {c: 0.0 for c in configs}
    forwards = {c: [0.0, 0.0, 0] for c in configs}  # first forward s, later forwards s, later n
    clock: list[float] = []  # the target's forward times within one call
    forward = model.forward

    def timed_forward(*a, **kw):
        sync()  # on a GPU, time the forward's kernels, not their launch
        t0 = time.perf_counter()
        out = forward(*a, **kw)
        sync()
        clock.append(time.perf_counter() - t0)
        return out

    model.forward = timed_forward  # the target's only (the bf16 draft is a copy made before)
    tokens = {c: 0 for c in configs}
    counts = {c: [0, 0, 0] for c in configs}  # accepted, offered, rounds
    torch.manual_seed(0)
    t_all = time.perf_counter()
    for _ in range(args.reps):
        for k, (prompt, g) in grammars.items():
            ids = torch.tensor([prompt], device=model.device)
            for name, kw in configs.items():
                kw = dict(kw)
                phi = kw.pop("phi", "uniform")
                if phi == "exact":
                    phi = exact[k]
                clock.clear()
                t0 = time.perf_counter()
                out = hf_fvo.generate(model, ids, grammar=g, phi=phi, do_sample=True, top_k=0,
                                      max_new_tokens=args.max_new_tokens,
                                      return_dict_in_generate=True, **kw)  # fmt: skip
                sync()
                seconds[name] += time.perf_counter() - t0
                forwards[name][0] += clock[0]
                forwards[name][1] += sum(clock[1:])
                forwards[name][2] += len(clock) - 1
                tokens[name] += out.sequences.shape[1] - ids.shape[1]
                stats = out.get("speculation")
                if stats is not None:
                    counts[name][0] += sum(stats.accepted)
                    counts[name][1] += stats.candidates
                    counts[name][2] += stats.rounds
    model.forward = forward
    rate = {c: tokens[c] / seconds[c] for c in configs}
    # without each call's first forward (the prompt's, whose cost does not depend on the law)
    rate_after = {c: tokens[c] / (seconds[c] - forwards[c][0]) for c in configs}
    calls = args.reps * len(grammars)
    # one forward of a prompt alone, as every call starts with
    prompts = [torch.tensor([p], device=model.device) for p, _ in grammars.values()]
    prefill = statistics.median(_timed(lambda x=x: (model(x), sync())) for x in prompts
                                for _ in range(3))  # fmt: skip
    section = SECTION + (" (with exact Φ)" if args.exact else "")
    section += " (open schemas)" if args.open else ""
    if model.device.type == "cuda":
        section += f" ({torch.cuda.get_device_name()})"
    lines = [
        section,
        "",
        f"{provenance(device=model.device)} {time.perf_counter() - t_all:.0f} s. Target "
        "SmolLM2-135M-Instruct float32, `do_sample=True, top_k=0`, `phi='uniform'` unless "
        f"named; schemas {', '.join(k.split()[0] for k in grammars)}; each configuration "
        f"{args.reps} samples per schema, interleaved.",
        "",
        "| configuration | tokens | tokens per call | tokens/s | ratio to masked | "
        "tokens per target forward | ms per target forward | first forward ms | "
        "ms per later forward | ms outside target forwards per call | acceptance |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        acc, offered, rounds = counts[c]
        rounds = rounds or tokens[c]  # plain decoding: one forward per token
        accept = f"{acc / offered:.3f}" if offered else "—"
        first, later, n_later = forwards[c]
        outside = seconds[c] - first - later
        lines.append(f"| {c} | {tokens[c]} | {tokens[c] / calls:.1f} | {rate[c]:.1f} | "
                     f"{rate[c] / rate['masked']:.2f} | {tokens[c] / rounds:.2f} | "
                     f"{1e3 * seconds[c] / rounds:.0f} | {1e3 * first / calls:.0f} | "
                     f"{1e3 * later / max(n_later, 1):.0f} | {1e3 * outside / calls:.0f} | "
                     f"{accept} |")  # fmt: skip
    lines += ["", f"One forward of a prompt alone (the first forward of every call): "
              f"{1e3 * prefill:.0f} ms (median over the prompts, 3 each)."]  # fmt: skip
    if args.exact:
        pairs = ("default", "bf16")
        ratio = {c: rate[f"{c}, exact Φ"] / rate[c] for c in pairs}
        after = {c: rate_after[f"{c}, exact Φ"] / rate_after[c] for c in pairs}
        lines += ["", "Exact Φ ÷ mask-only speculation with the same draft and flags, in "
                  f"tokens/s: {ratio['default']:.2f} (grammar-only drafts), "
                  f"{ratio['bf16']:.2f} (bf16 draft with runs); leaving out each call's "
                  f"first forward (the prompt's): {after['default']:.2f} and "
                  f"{after['bf16']:.2f}."]  # fmt: skip
    publish(lines, args.write)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
