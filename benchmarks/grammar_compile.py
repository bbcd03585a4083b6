"""Grammar layer costs at the SmolLM2 vocabulary: compile time, per-step mask time, memory.

Usage: python benchmarks/grammar_compile.py [--repeats 5] [--steps 2000]
Prints a markdown table (recorded in docs/benchmarks.md). Memory compares the automaton's
tables (``Grammar.nbytes``) with outlines-core's own ``Index`` for the same regex.
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import time

from harness import provenance

from hf_fvo import Grammar
from hf_fvo.grammar import TokenVocabulary, clear_cache
from hf_fvo.grammar.compiler import json_schema_source
from hf_fvo.grammar.sources import choices_source, dyck_source, regex_source
from hf_fvo.models import load_default_tokenizer

# the grammars tests/grammar/cases.py checks against independent oracles
NESTED_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "required": ["k", "v"],
            "properties": {"k": {"type": "string"}, "v": {"type": "integer"}}}},
    },
    "required": ["name", "age", "role", "tags"],
}  # fmt: skip
EMAIL = r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}"
AC_BUG = r"(ac|[^a])+"  # outlines-core 0.2.14 misses hundreds of tokens here
CHOICES = ["ok", "error", "pending", "not found", "a.b*c", "naïve"]
GRAMMARS = [  # (name, build, the regex outlines-core compiles)
    ("json_nested", lambda tok: Grammar.from_json_schema(NESTED_SCHEMA, tok, backend="automaton"),
     json_schema_source(NESTED_SCHEMA).regex),
    ("dyck_3_16", lambda tok: Grammar.dyck(3, 16, tok), dyck_source(3).regex),
    ("dyck2_2_8", lambda tok: Grammar.dyck(2, 8, tok, brackets="()[]"),
     dyck_source(2, "()[]").regex),
    ("email", lambda tok: Grammar.from_regex(EMAIL, tok), regex_source(EMAIL).regex),
    ("ac_bug", lambda tok: Grammar.from_regex(AC_BUG, tok), regex_source(AC_BUG).regex),
    ("choices", lambda tok: Grammar.from_choices(CHOICES, tok), choices_source(CHOICES).regex),
]  # fmt: skip


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _mask_times(g: Grammar, steps: int, rng: random.Random) -> list[float]:
    times, state = [], g.initial_state
    for _ in range(steps):
        t0 = time.perf_counter()
        mask = g.allowed(state)
        times.append(time.perf_counter() - t0)
        choices = mask.nonzero().flatten().tolist()
        token = rng.choice(choices)
        nxt = g.next_state(state, token)
        state = g.initial_state if nxt is None or nxt == g.terminal_state else nxt
    return times


def _outlines_index_memory(regex: str, vocab) -> tuple[int, int]:
    """outlines-core's Index for the same regex: (8 bytes × its transitions, serialised size).

    Each transition is a (u32 token, u32 state) pair in a hash map, so 8 bytes per transition
    is a lower bound on its memory (hash-table slack comes on top). Resident-set deltas were
    tried and read 0 for most grammars: the allocator reuses freed pages.
    """
    from outlines_core import Index

    index = Index(regex, vocab)
    pairs = sum(len(row) for row in index.get_transitions().values())
    return 8 * pairs, len(pickle.dumps(index))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    from outlines_core import Vocabulary

    tok = load_default_tokenizer()
    vocab = TokenVocabulary.from_tokenizer(tok)
    oc_vocab = Vocabulary(vocab.eos_token_ids[0], vocab.byte_map())
    print(provenance("outlines-core"))
    print(f"tokenizer: SmolLM2-135M-Instruct, {len(tok)} ids; repeats={args.repeats}, "
          f"mask steps={args.steps}\n")  # fmt: skip
    print(
        "| grammar | states | transitions | compile (median) | cached compile | "
        "mask median | mask p99 | hf_fvo tables | Index ≥ 8 B/transition | "
        "Index serialised | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    rng = random.Random(0)
    for name, build, regex in GRAMMARS:
        compile_s = []
        for _ in range(args.repeats):
            clear_cache()
            t0 = time.perf_counter()
            g = build(tok)
            compile_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        build(tok)
        cached = time.perf_counter() - t0
        masks = _mask_times(g, args.steps, rng)
        lower, ser = _outlines_index_memory(regex, oc_vocab)
        mask_med, mask_p99 = statistics.median(masks) * 1e6, _percentile(masks, 0.99) * 1e6
        print(f"| {name} | {g.num_states} | {g.num_transitions} | "
              f"{statistics.median(compile_s) * 1e3:.0f} ms | {cached * 1e6:.0f} µs | "
              f"{mask_med:.0f} µs | {mask_p99:.0f} µs | "
              f"{g.nbytes / 1e3:.1f} kB | {lower / 1e3:.1f} kB | {ser / 1e3:.1f} kB | "
              f"{g.nbytes / max(lower, 1):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
