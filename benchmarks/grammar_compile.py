"""Grammar layer costs at the SmolLM2 vocabulary: compile time, per-step mask time, memory.

Usage: python benchmarks/grammar_compile.py [--repeats 5] [--steps 2000]
Prints a markdown table (recorded in docs/benchmarks.md). Memory compares the automaton's
tables (``Grammar.nbytes``) with outlines-core's own ``Index`` for the same regex.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import outlines_core
import torch
import transformers

from hf_fvo import Grammar
from hf_fvo.grammar import TokenVocabulary, clear_cache
from hf_fvo.models import load_default_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.grammar.cases import CASES


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
    py = platform.python_version()
    oc_version = getattr(outlines_core, "__version__", "0.2.14")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {py}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"outlines-core {oc_version}")  # fmt: skip
    print(f"tokenizer: SmolLM2-135M-Instruct, {len(tok)} ids; repeats={args.repeats}, "
          f"mask steps={args.steps}\n")  # fmt: skip
    print(
        "| grammar | states | transitions | compile (median) | cached compile | "
        "mask median | mask p99 | hf_fvo tables | Index ≥ 8 B/transition | "
        "Index serialised | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    rng = random.Random(0)
    for case in CASES:
        name, build, source = case.name, case.build, case.source
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
        lower, ser = _outlines_index_memory(source.regex, oc_vocab)
        mask_med, mask_p99 = statistics.median(masks) * 1e6, _percentile(masks, 0.99) * 1e6
        print(f"| {name} | {g.num_states} | {g.num_transitions} | "
              f"{statistics.median(compile_s) * 1e3:.0f} ms | {cached * 1e6:.0f} µs | "
              f"{mask_med:.0f} µs | {mask_p99:.0f} µs | "
              f"{g.nbytes / 1e3:.1f} kB | {lower / 1e3:.1f} kB | {ser / 1e3:.1f} kB | "
              f"{g.nbytes / max(lower, 1):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
