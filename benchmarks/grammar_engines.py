"""hf_fvo's grammar backends beside XGrammar, outlines-core and raw llguidance, on real schemas.

For every schema of the development set (``../shared/realworld/jsonschemabench-dev.jsonl``), in
one interleaved run, each engine compiles the schema for the SmolLM2 tokenizer (compact JSON,
each engine's strict-object default) in its own worker process with a time limit, then takes a
20-step random walk through the grammar timing each mask. Recorded per engine: compiled /
refused with an error / crashed / timed out, compile time, mask time, and memory (the worker's
heap growth per compiled grammar, kept alive; plus what the engine reports itself).

XGrammar is not an hf_fvo dependency: ``pip install --no-deps xgrammar apache-tvm-ffi``.

Usage:
    python benchmarks/grammar_engines.py --timeout 60 --write
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import random
import resource
import statistics
import sys
import time
from collections import defaultdict

from harness import DEV, provenance

ENGINES = ("hf_fvo", "hf_fvo_automaton", "xgrammar", "outlines_core", "llguidance")
STEPS = 20


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                  "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def _heap() -> int:
    """Bytes of heap in use (glibc ``mallinfo2``): every engine's native allocations included,
    exact to the allocation, unlike resident-set size, which the allocator's reuse hides."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


class _Engine:
    """Compile, then walk: ``walk`` returns mask times (s) along a seeded random walk."""

    def __init__(self, name: str) -> None:
        from hf_fvo.models import load_default_tokenizer

        self.name = name
        self.tok = load_default_tokenizer()
        self.vocab = len(self.tok)
        if name == "xgrammar":
            import xgrammar as xgr

            info = xgr.TokenizerInfo.from_huggingface(self.tok, vocab_size=self.vocab)
            self.compiler = xgr.GrammarCompiler(info, cache_enabled=False, max_threads=1)
        elif name == "outlines_core":
            from outlines_core import Vocabulary

            from hf_fvo.grammar import TokenVocabulary

            v = TokenVocabulary.from_tokenizer(self.tok)
            self.oc_vocab = Vocabulary(v.eos_token_ids[0], v.byte_map())
        elif name == "llguidance":
            import llguidance.hf

            self.llg_tok = llguidance.hf.from_tokenizer(self.tok)
        self.keep: list = []

    def compile(
        self, schema: dict, strict: bool = True, formats: str = "assert", key_order: str = "schema"
    ) -> tuple[object, int | None]:
        """Compile with the engine's strict-object convention, or the spec's language
        (``formats``: hf_fvo's assertion or annotation of ``format``; peers keep theirs)."""
        text = json.dumps(schema)
        if self.name in ("hf_fvo", "hf_fvo_automaton"):
            from hf_fvo import Grammar

            backend = "pushdown" if self.name == "hf_fvo" else "automaton"
            g = Grammar.from_json_schema(
                schema, self.tok, whitespace="", backend=backend, strict=strict, formats=formats,
                key_order=key_order,
            )  # fmt: skip
            return g, getattr(g, "nbytes", None)
        if self.name == "xgrammar":
            g = self.compiler.compile_json_schema(
                text, any_whitespace=False, separators=(",", ":"), strict_mode=strict
            )
            return g, g.memory_size_bytes
        if self.name == "outlines_core":
            from outlines_core import Index
            from outlines_core.json_schema import build_regex_from_schema

            index = Index(build_regex_from_schema(text, whitespace_pattern=""), self.oc_vocab)
            return index, None
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            text, defaults={"whitespace_flexible": False}
        )
        m = llguidance.LLMatcher(self.llg_tok, grammar, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m, None

    def accepts(self, g: object, ids: list[int]) -> bool:
        """Whether the engine accepts the token sequence as a complete member."""
        eos = self.tok.eos_token_id
        if self.name in ("hf_fvo", "hf_fvo_automaton"):
            state = g.walk(ids)  # the masks, then the final check where the grammar has one
            return state is not None and g.is_accepting(state) and g.check(ids) is None
        if self.name == "xgrammar":
            import xgrammar as xgr

            m = xgr.GrammarMatcher(g)
            return all(m.accept_token(t) for t in ids) and m.accept_token(eos)
        if self.name == "outlines_core":
            from outlines_core import Guide

            guide = Guide(g)
            for t in ids:
                if t not in guide.get_tokens():
                    return False
                guide.advance(t)
            return eos in guide.get_tokens()
        m = g.deep_copy()
        return m.consume_tokens(ids) and m.is_accepting()

    def walk(self, g: object) -> list[float]:
        rng = random.Random(0)
        times: list[float] = []
        if self.name in ("hf_fvo", "hf_fvo_automaton"):
            state = g.initial_state
            for _ in range(STEPS):
                t0 = time.perf_counter()
                mask = g.allowed(state)
                times.append(time.perf_counter() - t0)
                choices = [t for t in mask.nonzero().flatten().tolist() if t != g.eos_token_id]
                if not choices:
                    break
                state = g.next_state(state, rng.choice(choices))
            return times
        import numpy as np
        import torch

        if self.name == "xgrammar":
            import xgrammar as xgr

            matcher = xgr.GrammarMatcher(g)
            bitmask = xgr.allocate_token_bitmask(1, self.vocab)
            for _ in range(STEPS):
                t0 = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                times.append(time.perf_counter() - t0)
                bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")
                choices = [t for t in np.flatnonzero(bits[: self.vocab]) if t > 16]
                if not choices or not matcher.accept_token(int(rng.choice(choices))):
                    break
            return times
        if self.name == "outlines_core":
            from outlines_core import Guide
            from outlines_core.kernels.torch import allocate_token_bitmask, fill_next_token_bitmask

            guide = Guide(g)
            bitmask = allocate_token_bitmask(self.vocab)
            for _ in range(STEPS):
                t0 = time.perf_counter()
                fill_next_token_bitmask(guide, bitmask)
                times.append(time.perf_counter() - t0)
                choices = [t for t in guide.get_tokens() if t > 16]
                if not choices:
                    break
                guide.advance(int(rng.choice(choices)))
            return times
        import llguidance.torch as lt

        matcher = g.deep_copy()
        bitmask = lt.allocate_token_bitmask(1, self.vocab)
        for _ in range(STEPS):
            t0 = time.perf_counter()
            lt.fill_next_token_bitmask(matcher, bitmask)
            times.append(time.perf_counter() - t0)
            bits = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")
            choices = [t for t in np.flatnonzero(bits[: self.vocab]) if t > 16]
            if not choices or not matcher.consume_token(int(rng.choice(choices))):
                break
        _ = torch
        return times


class _NativeStderr:
    """Captures what native code writes to file descriptor 2 (XGrammar logs the constructs it
    approximates there: "oneOf … falling back to anyOf semantics", "ignoring minLength")."""

    def __enter__(self) -> _NativeStderr:
        import os
        import tempfile

        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc) -> None:
        import os

        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()


def _worker(name: str, conn, memory_gb: float) -> None:
    import gc

    # An engine that runs out of memory (outlines-core on some schemas) crashes its own worker,
    # recorded as a crash, instead of the machine.
    cap = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    engine = _Engine(name)
    gc.collect()
    gc.freeze()  # setup objects (tokenizer, imports) are not rescanned by every collection
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        before = _heap()
        t0 = time.perf_counter()
        try:
            with _NativeStderr() as native:
                g, reported = engine.compile(
                    job["schema"], job.get("strict", True), job.get("formats", "assert"),
                    job.get("key_order", "schema"),
                )  # fmt: skip
        except Exception as exc:  # a refusal: every engine raises its own types
            conn.send({"status": "refused", "error": f"{type(exc).__name__}: {exc}"[:300],
                       "compile_s": time.perf_counter() - t0})  # fmt: skip
            continue
        seconds = time.perf_counter() - t0
        warnings = [line for line in native.text.splitlines() if "Warning" in line]
        if job.get("texts") is not None:  # an exactness check: accept these token sequences?
            accepted = [engine.accepts(g, ids) for ids in job["texts"]]
            conn.send({"status": "ok", "compile_s": seconds, "accepted": accepted})
            continue
        engine.keep.append(g)
        masks = engine.walk(g)  # lazily built tables (llguidance's lexer) count as memory too
        grown = _heap() - before
        conn.send({"status": "ok", "compile_s": seconds, "mask_s": masks, "heap_bytes": grown,
                   "reported_bytes": reported, "warnings": warnings})  # fmt: skip


class Pool:
    """One engine's worker process; a job that times out or crashes the worker restarts it."""

    def __init__(self, name: str, memory_gb: float) -> None:
        self.name = name
        self.memory_gb = memory_gb
        self.proc = None
        self.start()

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        args = (self.name, child, self.memory_gb)
        self.proc = ctx.Process(target=_worker, args=args, daemon=True)
        self.proc.start()
        deadline = time.monotonic() + 300
        while not self.conn.poll(1):  # a worker that fails to import dies: say so at once
            if not self.proc.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} worker did not start (exit {self.proc.exitcode})")
        self.conn.recv()

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join(5)

    def run(self, job: dict, timeout: float) -> dict:
        self.conn.send(job)
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
            status = "crash"
        elif not self.proc.is_alive():
            status = "crash"
        else:
            status = "timeout"
        code = self.proc.exitcode
        self.proc.kill()
        self.proc.join()
        self.start()
        return {"status": status, "error": f"exit code {code}" if status == "crash" else ""}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per compile")
    ap.add_argument("--limit", type=int, default=None, help="first N schemas only")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space cap per worker")
    ap.add_argument("--out", default="/tmp/hf_fvo_grammar_engines.jsonl")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows = [json.loads(line) for line in DEV.open()][: args.limit]
    pools = {name: Pool(name, args.memory_gb) for name in engines}
    records = []
    for i, row in enumerate(rows):
        order = engines[i % len(engines) :] + engines[: i % len(engines)]  # rotate: interleaved
        for name in order:
            result = pools[name].run({"schema": row["schema"]}, args.timeout)
            records.append({"engine": name, "source": row["source"], "name": row["name"],
                            **result})  # fmt: skip
        if (i + 1) % 25 == 0:
            print(f"{i + 1}/{len(rows)} schemas", flush=True)
    for pool in pools.values():
        pool.close()
    with open(args.out, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    table = summarize(records, len(rows), args)
    print(table)
    if args.write:
        from harness import write_section

        write_section(table.splitlines()[0], table)


def summarize(records: list[dict], n: int, args) -> str:

    by = defaultdict(list)
    for r in records:
        by[r["engine"]].append(r)
    lines = [
        "## Real-world schemas: hf_fvo's backends beside XGrammar, outlines-core and llguidance",
        "",
        f"{provenance('llguidance', 'xgrammar', 'outlines-core')} {n} schemas "
        f"of `jsonschemabench-dev.jsonl`, SmolLM2 tokenizer, compact JSON, one worker process per "
        "engine, engines interleaved per schema. Masks: 20-step seeded random walks "
        "(full-vocabulary mask per step; hf_fvo's include its UTF-8 and EOS handling and build a "
        "`torch.bool` mask; the first mask of a lazily compiled grammar pays its lexer build). "
        "Each worker freezes its setup objects out of the garbage collector and runs under an "
        f"address-space cap of {args.memory_gb:g} GB (an engine that runs out of memory crashes "
        "its worker: a crash). *First mask*: compile plus the first mask, the time before "
        "generation can start (lazy engines build their lexers then). Memory: heap bytes in "
        "use (glibc `mallinfo2`, native allocations included) grown by compiling a grammar and "
        "walking it, the grammar kept alive (median and p99 over compiled schemas after each "
        "worker's first, which also builds the tables a tokenizer shares), and what the engine "
        "reports (XGrammar's `memory_size_bytes`, the automaton's `nbytes`).",
        "",
        "*Warned*: compiled, but the engine logged that it approximates a construct (XGrammar: "
        "`oneOf` treated as `anyOf`, `minLength`/`maxLength` ignored beside a `pattern`, "
        "`multipleOf` ignored on numbers, anchors inside a pattern ignored…), so the grammar's "
        "language is not the schema's.",
        "",
        "| engine | compiled | warned | refused | crash | timeout | compile median | compile p99 "
        "| first mask median | first mask p99 | mask median | mask p99 | heap/grammar median | "
        "heap p99 | reported median |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in by.items():
        ok = [r for r in rs if r["status"] == "ok"]
        compile_s = [r["compile_s"] for r in ok]
        masks = [m for r in ok for m in r["mask_s"]]
        heap = [r["heap_bytes"] for r in ok[1:]]  # the first compile also builds shared tables
        first = [r["compile_s"] + (r["mask_s"][0] if r["mask_s"] else 0.0) for r in ok]
        reported = [r["reported_bytes"] for r in ok if r.get("reported_bytes") is not None]
        status = [r["status"] for r in rs]
        lines.append(
            f"| {name} | {len(ok)}/{len(rs)} | {sum(bool(r.get('warnings')) for r in ok)} | "
            f"{status.count('refused')} | "
            f"{status.count('crash')} | {status.count('timeout')} | "
            f"{statistics.median(compile_s) * 1e3:.1f} ms | "
            f"{_pct(compile_s, 0.99) * 1e3:.0f} ms | {statistics.median(first) * 1e3:.1f} ms | "
            f"{_pct(first, 0.99) * 1e3:.0f} ms | {statistics.median(masks) * 1e6:.0f} µs | "
            f"{_pct(masks, 0.99) * 1e6:.0f} µs | {statistics.median(heap) / 1e6:.3f} MB | "
            f"{_pct(heap, 0.99) / 1e6:.2f} MB | "
            + (f"{statistics.median(reported) / 1e6:.2f} MB |" if reported else "— |")
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
