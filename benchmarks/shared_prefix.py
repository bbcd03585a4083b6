"""The forward of N rows continuing one prompt: a repeated ``DynamicCache`` against the
shared-prefix cache particles use (``hf_fvo.models.shared_prefix``).

For development-set schemas (the prompt of ``realworld_generation.py``: the schema in a chat
message), SmolLM2 reads the prompt once, then decodes ``--steps`` tokens for N rows (random
tokens: only the arithmetic is timed), through N copies of the prompt's cache or through one
shared copy. Each pair runs twice, interleaved; the faster of each is kept.

Usage:
    python benchmarks/shared_prefix.py --schemas 2 --rows 1,8,32 --steps 256 --write
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from harness import DEV, provenance, publish
from realworld_generation import pick_schemas, prompt_ids


def main() -> None:
    from transformers import DynamicCache

    from hf_fvo.models import load_default_model, load_default_tokenizer
    from hf_fvo.models.cache import cache_argument
    from hf_fvo.models.shared_prefix import SharedPrefixCache, shared_prefix

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=2)
    ap.add_argument("--rows", default="1,8,32")
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    rows = [json.loads(line) for line in DEV.open()]
    chosen = [(r, g) for r, g in pick_schemas(rows, 30, tok, model.config.vocab_size)
              if g.is_finite is not True][: args.schemas]  # fmt: skip
    results = []
    for row, _ in chosen:
        ids = prompt_ids(tok, row["schema"])
        for n in (int(x) for x in args.rows.split(",")):
            best: dict[str, float] = {}
            for kind in ("dynamic", "shared") * 2:
                with torch.no_grad():
                    prompt = DynamicCache()
                    model(ids, use_cache=True, **cache_argument(model, prompt))
                    if kind == "dynamic":
                        prompt.batch_repeat_interleave(n)
                        cache = prompt
                    else:
                        cache = SharedPrefixCache.from_prompt(prompt, n)
                    x = torch.randint(100, 1000, (n, 1), generator=torch.Generator().manual_seed(0))
                    t0 = time.perf_counter()
                    for _ in range(args.steps):
                        if kind == "shared":
                            with shared_prefix(model, cache):
                                model(x, use_cache=True, **cache_argument(model, cache))
                        else:
                            model(x, use_cache=True, **cache_argument(model, cache))
                    spent = time.perf_counter() - t0
                best[kind] = min(best.get(kind, spent), spent)
            results.append((row["name"], ids.shape[1], n, best["dynamic"], best["shared"]))
            print(results[-1], flush=True)
    lines = [
        f"## The forward of N rows continuing one prompt ({args.steps} steps)",
        "",
        f"{provenance()} Embedded SmolLM2-135M-Instruct; the prompt: the schema in a chat "
        f"message; {args.steps} decoding steps of N rows after it; seconds (the faster of two "
        "interleaved runs). *repeated*: a `DynamicCache` repeated N times (Transformers' batch); "
        "*shared*: `SharedPrefixCache` (the prompt once, each row's tokens apart).",
        "",
        "| schema | prompt tokens | N | repeated (s) | shared (s) | repeated / shared "
        "| shared, × one row |",
        "|---|---|---|---|---|---|---|",
    ]
    one = {name: shared for name, _, n, _, shared in results if n == 1}
    for name, width, n, dynamic, shared in results:
        times_one = f"{shared / one[name]:.2f}" if name in one else "—"
        lines.append(f"| {name} | {width} | {n} | {dynamic:.1f} | {shared:.1f} | "
                     f"{dynamic / shared:.2f} | {times_one} |")  # fmt: skip
    publish(lines, args.write)


if __name__ == "__main__":
    main()
