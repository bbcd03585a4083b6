"""Command line: ``hf-fvo demo``, ``hf-fvo audit``, ``hf-fvo bench`` and ``hf-fvo train-phi``:
parsing and printing only (the work is in :mod:`hf_fvo.eval` and :mod:`hf_fvo.training`).

Bad input (a missing model folder, an invalid schema) prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from hf_fvo.eval.demo import DEMO_PROMPT, DEMO_SCHEMA


class CLIError(Exception):
    """A user-facing problem: printed as one line, exit status 2."""


def _load(model_path: str | None):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if model_path is None:
        from hf_fvo.errors import DefaultModelUnavailableError
        from hf_fvo.models import load_default_model

        try:
            model = load_default_model()
        except DefaultModelUnavailableError as exc:
            raise CLIError(str(exc)) from exc
        from hf_fvo.models import load_default_tokenizer

        return model, load_default_tokenizer()
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise CLIError(f"no model folder at {model_path} (expected a config.json there)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _schema(path: str | None) -> dict:
    if path is None:
        return DEMO_SCHEMA
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise CLIError(f"schema file not found: {path}") from exc
    except json.JSONDecodeError as exc:
        raise CLIError(f"schema file {path} is not valid JSON: {exc}") from exc


def demo(args: argparse.Namespace) -> int:
    """Grammar-masked JSON generation on the embedded model, next to unconstrained output; then
    FVO-Spec on a finite schema, with each branch's probability under μ_proj and μ*."""
    from hf_fvo.errors import GrammarError
    from hf_fvo.eval.demo import SPEC_PROMPT, SPEC_SCHEMA, fvo_spec, masked_json
    from hf_fvo.grammar import Grammar, prepare_json_schema

    schema = _schema(args.schema)
    try:
        prepare_json_schema(schema)  # refuse a bad schema before the slow model load
    except GrammarError as exc:
        raise CLIError(f"cannot compile the schema: {exc}") from exc
    t0 = time.perf_counter()
    model, tokenizer = _load(args.model)
    print(f"model: {model.config._name_or_path or 'SmolLM2-135M-Instruct'} "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"loaded in {time.perf_counter() - t0:.1f}s)")  # fmt: skip
    t0 = time.perf_counter()
    try:
        grammar = Grammar.from_json_schema(
            schema, tokenizer, whitespace="", vocab_size=model.config.vocab_size
        )
    except GrammarError as exc:
        raise CLIError(f"cannot compile the schema: {exc}") from exc
    print(f"schema: {json.dumps(schema)}")
    print(f"grammar: {grammar.backend}, compiled in {time.perf_counter() - t0:.2f}s")
    print(f"prompt: {args.prompt!r}")
    completions = masked_json(model, tokenizer, grammar, args.prompt,
                              max_new_tokens=args.max_new_tokens, sample=args.sample,
                              seed=args.seed)  # fmt: skip
    for c in completions:
        print(f"{'grammar-masked' if c.constrained else 'unconstrained '}: {c.text!r}")
        print(f"  {c.tokens} tokens in {c.seconds:.2f}s; valid JSON: {c.is_json}; "
              f"member of the schema language: {c.member}")  # fmt: skip
    if args.particles:
        _open_demo(model, tokenizer, args)
    if args.samples == 0:
        return 0
    print(f"\nFVO-Spec on a finite schema: {json.dumps(SPEC_SCHEMA)}")
    print(f"prompt: {SPEC_PROMPT!r}")
    spec = fvo_spec(model, tokenizer, args.samples, args.seed)
    print(f"exact laws and Φ tables: {spec.forwards} prefix forwards, {spec.law_seconds:.1f}s")
    width = max(len(b) for b, *_ in spec.branches)
    print(f"{'branch':<{width}}  μ_proj (masking)  μ* (intended)  FVO-Spec, {spec.samples} samples")
    for branch, proj, star, freq in spec.branches:
        print(f"{branch:<{width}}  {proj:16.3f}  {star:13.3f}  {freq:.3f}")
    rate = spec.accepted / max(spec.proposals, 1)
    print(f"TV(μ_proj, μ*) over strings = {spec.tv:.3f}; proposals: {spec.from_draft} from the "
          f"bf16 draft model, {spec.proposals - spec.from_draft} from the grammar and exact Φ's "
          f"table; acceptance {rate:.2f}, {spec.tokens_per_second:.1f} tokens/s")  # fmt: skip
    return 0


def _open_demo(model: Any, tokenizer: Any, args: argparse.Namespace) -> None:
    """Masking against particles on an open schema (see :func:`hf_fvo.eval.demo.open_particles`)."""
    from hf_fvo.eval.demo import OPEN_PROMPT, OPEN_SCHEMA, open_particles

    print(f"\nParticles on an open schema: {json.dumps(OPEN_SCHEMA)}")
    print(f"prompt: {OPEN_PROMPT!r}")
    run = open_particles(model, tokenizer, args.draws, args.particles, seed=args.seed)
    print(f"{args.draws} outputs each at temperature {run.temperature}; p(end) is the model's "
          "probability of closing the title where it closed")  # fmt: skip
    width = max(len(repr(d.title)) for d in run.masked)
    print(f"{'masking (μ_proj)':<{width}}   p(end)   {run.count} particles (≈ μ*)   p(end)")
    for m, p in zip(run.masked, run.particles, strict=True):
        print(f"{m.title!r:<{width}}  {100 * m.end_probability:6.2f}%   "
              f"{p.title!r:<{max(width, 18)}}  {100 * p.end_probability:6.2f}%")  # fmt: skip
    print(f"titles cut where the model gave ending them < 1%: masking {run.cut(run.masked)}/"
          f"{args.draws}, particles {run.cut(run.particles)}/{args.draws}; log Ẑ (log Pr[a "
          f"valid output]) {run.log_z:.1f}; {run.masked_seconds:.1f}s masked, "
          f"{run.particle_seconds:.1f}s particles")  # fmt: skip


def audit(args: argparse.Namespace) -> int:
    """Exact (finite languages) or sampled audit of local masking on one grammar and prompt,
    printed and drawn to a PNG."""
    from hf_fvo.errors import GrammarError
    from hf_fvo.eval import audit as run_audit
    from hf_fvo.eval import plot_audit
    from hf_fvo.grammar import Grammar, prepare_json_schema
    from hf_fvo.grammar.sources import regex_source
    from hf_fvo.models import chat_prompt

    try:  # refuse a bad grammar before the slow model load
        if args.schema is not None:
            schema = _schema(args.schema)
            prepare_json_schema(schema)
        elif args.regex is not None:
            regex_source(args.regex)
    except GrammarError as exc:
        raise CLIError(f"cannot compile the grammar: {exc}") from exc
    model, tokenizer = _load(args.model)
    vocab = model.config.vocab_size
    try:
        if args.schema is not None:
            grammar = _schema_grammar(schema, tokenizer, vocab)
        elif args.regex is not None:
            grammar = Grammar.from_regex(args.regex, tokenizer, vocab_size=vocab)
        else:
            grammar = Grammar.from_choices(args.choices, tokenizer, vocab_size=vocab)
    except GrammarError as exc:
        raise CLIError(f"cannot compile the grammar: {exc}") from exc
    prompt = chat_prompt(tokenizer, args.prompt)
    report = run_audit(
        model, tokenizer, grammar, prompt, max_new_tokens=args.max_new_tokens, tol=args.tol,
        max_nodes=args.max_nodes, samples=args.samples, phi=args.phi, seed=args.seed,
        particles=args.particles,
    )  # fmt: skip
    print(report.summary())
    if report.exact:
        width = max(12, *(len(b.text) for b in report.branches[:20]))
        fvo = f"FVO (exact Φ, N={report.samples})" if report.samples else ""
        print(f"{'text':<{width}}  {'μ_proj':>8}  {'μ*':>8}  {fvo}")
        for b in report.branches[:20]:
            tail = f"{b.fvo:8.3f}" if b.fvo is not None else ""
            print(f"{b.text:<{width}}  {b.proj:8.3f}  {b.star:8.3f}  {tail}")
    try:
        path = plot_audit(report, args.png)
    except ImportError as exc:
        raise CLIError(str(exc)) from exc
    except OSError as exc:
        raise CLIError(f"cannot write {args.png}: {exc.strerror or exc}") from exc
    print(f"figure: {path}")
    return 0


def bench(args: argparse.Namespace) -> int:
    """Run a benchmark suite (a ``datasets`` dataset) and write its results as a dataset (JSONL)
    and a markdown table."""
    from tqdm.auto import tqdm

    from hf_fvo.eval.bench import load_suite, markdown, run_row
    from hf_fvo.eval.tasks import TASK_SUITES

    if args.suite in TASK_SUITES:
        return _bench_tasks(args)
    try:
        suite = load_suite(args.suite)
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
    except Exception as exc:  # datasets' own errors (offline Hub, bad file): one line
        raise CLIError(f"cannot load suite {args.suite!r}: {exc}".splitlines()[0]) from exc
    rows = [r for r in suite if not args.rows or any(k in r["name"] for k in args.rows)]
    if not rows:
        raise CLIError(f"no row of {args.suite!r} matches {args.rows}")
    out_dir = _output_folder(args.out)
    needs_default = any(r["model"] == "default" for r in rows)
    model, tokenizer = _load(args.model) if needs_default else (None, None)
    draft = None
    if args.draft == "bf16" and model is not None:
        draft = _bf16_copy(model)
    elif args.draft:
        draft, _ = _load(args.draft)
    results = []
    for row in tqdm(rows, desc=f"hf-fvo bench {args.suite}", unit="row"):
        results.append(run_row(row, model, tokenizer, phi=args.phi, draft=draft,
                               samples=args.samples, tol=args.tol, proj_tol=args.proj_tol,
                               particles=args.particles, beams=args.beams,
                               sampled_phi=args.sampled_phi,
                               max_nodes=args.max_nodes, seed=args.seed))  # fmt: skip
    return _write_results(out_dir, results, _provenance(args.argv) + markdown(results))


def _output_folder(path: str) -> Path:
    out_dir = Path(path)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create {out_dir}: {exc.strerror or exc}") from exc
    return out_dir


def _write_results(out_dir: Path, records: list[dict], table: str) -> int:
    """The records as a ``datasets`` JSONL and the table as markdown, in ``out_dir``."""
    import datasets

    datasets.Dataset.from_list(records).to_json(str(out_dir / "results.jsonl"))
    (out_dir / "results.md").write_text(table)
    print(table)
    print(f"results: {out_dir / 'results.jsonl'} (a datasets JSONL), {out_dir / 'results.md'}")
    return 0


def _bench_tasks(args: argparse.Namespace) -> int:
    """A task suite (``transcribe``, ``shorten``): accuracy per engine, a dataset and a table."""
    from tqdm.auto import tqdm

    from hf_fvo.errors import InvalidArgumentError
    from hf_fvo.eval import tasks as T

    engines = args.engines.split(",") if args.engines else list(T.ENGINES)
    try:
        T.check_engines(engines)
    except InvalidArgumentError as exc:
        raise CLIError(str(exc)) from exc
    rows = [t for t in T.load_tasks(args.suite)
            if not args.rows or any(k in t["name"] for k in args.rows)][: args.first]  # fmt: skip
    if not rows:
        raise CLIError(f"no task of {args.suite!r} matches {args.rows}")
    out_dir = _output_folder(args.out)
    model, tokenizer = _load(args.model)
    bar = tqdm(total=len(rows) * len(engines), desc=f"hf-fvo bench {args.suite}", unit="output")
    records = T.run_tasks(rows, engines, model, tokenizer, seed=args.seed,
                          whitespace=args.whitespace, progress=lambda _: bar.update())  # fmt: skip
    bar.close()
    table = _provenance(args.argv) + T.markdown(T.summarize(records))
    return _write_results(out_dir, records, table)


def train_phi(args: argparse.Namespace) -> int:
    """Build learned-Φ labels (Markov families, finite schemas from the suites and ``--schemas``,
    path labels on open schemas), train a :class:`~hf_fvo.phi.PhiModel`, write a Hub-ready
    folder (:func:`hf_fvo.training.train_phi`)."""
    from hf_fvo.eval.bench import load_suite
    from hf_fvo.training.pipeline import EMBEDDED, read_schema_rows, train_phi

    if args.labels and (args.suites or args.open or not args.no_markov):
        raise CLIError("--labels trains on that file only: pass --suites with no names, "
                       "--finite 0 and --no-markov, and no --open")  # fmt: skip
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create {args.out}: {exc.strerror or exc}") from exc
    rows = read_schema_rows(args.schemas) if args.schemas else []
    suites = [load_suite(name) for name in args.suites]
    needs_model = bool(args.labels or args.open or any(
        r["oracle"] == "trie" and r["family"] == "json" and r["model"] == "default"
        for s in suites for r in s) or (rows and args.finite))  # fmt: skip
    model, tokenizer = _load(args.model) if needs_model else (None, None)
    run = train_phi(
        args.out, model=model, tokenizer=tokenizer,
        base=EMBEDDED if args.model is None and model is not None else None,
        suites=suites, schema_rows=rows, finite=args.finite, open_count=args.open,
        open_draws=args.open_draws, max_new_tokens=args.max_new_tokens,
        markov=not args.no_markov, trajectories=args.trajectories, positions=args.positions,
        tol=args.tol, labels=args.labels, path_target=args.path_target, epochs=args.epochs,
        seed=args.seed, command="hf-fvo " + " ".join(args.argv),
        progress=lambda message: print(message, flush=True),
    )  # fmt: skip
    print(f"{run.positions} labelled positions in {run.label_seconds:.0f} s")
    m = run.metrics
    if "train_step_tv_learned" in m:
        print("visit-weighted per-step TV to μ* on the training positions: masking "
              f"{m['train_step_tv_masking']:.4f}, learned "
              f"{m['train_step_tv_learned']:.4f}")  # fmt: skip
    if "train_path_brier_learned" in m:
        goal = "W" if args.path_target == "mean" else "1[W > 0]"
        print(f"mean (Φ̂ − {goal})² on the path labels (W: one importance-weighted rollout): "
              f"masking {m['train_path_brier_masking']:.4f}, learned "
              f"{m['train_path_brier_learned']:.4f}")  # fmt: skip
    print(
        f"wrote {args.out}/model.safetensors, config.json, README.md (model card), labels.parquet"
    )
    return 0


def _schema_grammar(schema, tokenizer, vocab_size: int):
    """The token automaton where the schema is regular (exact audits need one), else the
    pushdown grammar (sampled audits)."""
    from hf_fvo.errors import UnsupportedSchemaError
    from hf_fvo.grammar import Grammar

    try:
        return Grammar.from_json_schema(schema, tokenizer, whitespace="", vocab_size=vocab_size,
                                        backend="automaton")  # fmt: skip
    except UnsupportedSchemaError:
        return Grammar.from_json_schema(schema, tokenizer, whitespace="", vocab_size=vocab_size)


def _provenance(argv: list[str]) -> str:
    """The command, machine and library versions behind a results table."""
    import platform
    import shlex

    import torch
    import transformers

    import hf_fvo

    return (
        f"Command: `hf-fvo {shlex.join(argv)}`\n\nMachine: {platform.machine()} CPU "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, hf_fvo {hf_fvo.__version__}\n\n"
    )


def _bf16_copy(model):
    import copy

    import torch

    return copy.deepcopy(model).to(torch.bfloat16)


def _count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be ≥ {minimum}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def _fraction(text: str) -> float:
    """A tolerance in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1), got {text}")
    return value


def _phi(text: str) -> str:
    from hf_fvo.phi import ESTIMATORS

    if text not in ESTIMATORS:
        raise argparse.ArgumentTypeError(f"unknown estimator {text!r}; choose one of "
                                         f"{', '.join(sorted(ESTIMATORS))}")  # fmt: skip
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, except that a bad argument is the CLI's one-line error (exit 2), not usage."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("hf-fvo").strip()
        raise CLIError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-fvo`` argument parser."""
    parser = _Parser(prog="hf-fvo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="grammar-constrained JSON on the embedded SmolLM2 model")
    p.add_argument("--model", help="local Transformers model folder (default: embedded SmolLM2)")
    p.add_argument("--schema", help="JSON schema file (default: a small person schema)")
    p.add_argument("--prompt", default=DEMO_PROMPT)
    p.add_argument("--max-new-tokens", type=_count(1), default=64)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--seed", type=_count(0), default=0)
    p.add_argument(
        "--samples",
        type=_count(0),
        default=20,
        help="FVO-Spec samples on the finite schema (0: skip)",
    )
    p.add_argument(
        "--particles",
        type=_count(0),
        default=16,
        help="particles per output on the open schema (0: skip that part)",
    )
    p.add_argument(
        "--draws",
        type=_count(1),
        default=8,
        help="outputs of masking and of particles on the open schema",
    )
    p.set_defaults(func=demo)

    p = sub.add_parser("audit", help="does local masking bias this grammar? (TV, branches, PNG)")
    p.add_argument("--model", help="local Transformers model folder (default: embedded SmolLM2)")
    p.add_argument("--prompt", default="Reply with a value that matches the requested format.")
    grammar = p.add_mutually_exclusive_group(required=True)
    grammar.add_argument("--schema", help="JSON schema file (compact JSON, no whitespace)")
    grammar.add_argument("--regex", help="regular expression the whole output must match")
    grammar.add_argument("--choices", nargs="+", help="the output must be one of these strings")
    p.add_argument("--max-new-tokens", type=_count(1), default=64)
    p.add_argument("--tol", type=_fraction, default=1e-6, help="unexplored mass of the exact laws")
    p.add_argument("--max-nodes", type=_count(1), default=20_000, help="forwards before sampling")
    p.add_argument("--samples", type=_count(0), default=50, help="FVO draws, or draws per sampler")
    p.add_argument("--phi", type=_phi, default="onestep", help="estimator of the sampled audit")
    p.add_argument("--particles", type=_count(0), default=0,
                   help="add one particle run of this size: log Ẑ (how likely a valid output "
                   "is unaided) and ESS")  # fmt: skip
    p.add_argument("--png", default="hf_fvo_audit.png", help="where to write the figure")
    p.add_argument("--seed", type=_count(0), default=0)
    p.set_defaults(func=audit)

    p = sub.add_parser("bench", help="run a benchmark suite; results as a dataset and a table")
    p.add_argument("--suite", default="paper", help="paper, structured, the task suites "
                   "transcribe and shorten, a .jsonl/.parquet file or a Hub id")  # fmt: skip
    p.add_argument("--model", help="local Transformers model folder (default: embedded SmolLM2)")
    p.add_argument("--draft", help="draft model folder, or 'bf16' (a bfloat16 copy): FVO-Spec")
    p.add_argument("--phi", type=_phi, default="exact", help="estimator compared with masking")
    p.add_argument("--samples", type=_count(0), default=100, help="draws where no oracle applies")
    p.add_argument("--sampled-phi", type=_phi, default="onestep",
                   help="estimator sampled instead of exact Φ where no oracle applies")  # fmt: skip
    p.add_argument("--tol", type=_fraction, default=1e-6, help="unexplored mass of μ* and exact Φ")
    p.add_argument("--proj-tol", type=_fraction, default=1e-3, help="unexplored mass of μ_proj")
    p.add_argument("--max-nodes", type=_count(1), default=50_000, help="forwards per exact law")
    p.add_argument("--particles", type=_count(0), default=0,
                   help="add sequential Monte Carlo with this many particles: one output per "
                   "run, --samples runs (TV to μ* where exact, log Ẑ, ESS, seconds)")  # fmt: skip
    p.add_argument("--beams", type=_count(0), default=0,
                   help="where μ* is exact: beam search with this many beams scored by log p(x), "
                   "and greedy masking, against μ*'s most likely member")  # fmt: skip
    p.add_argument("--rows", nargs="*", help="only rows whose name contains one of these")
    p.add_argument("--engines", help="task suites (transcribe, shorten): a comma list of "
                   "unconstrained, masked greedy, beams=N, beams=N normalised, "
                   "beams=N keep_greedy, masked, particles=N, xgrammar, llguidance, "
                   "xgrammar greedy, llguidance greedy; a sampling engine followed by ' t=τ' "
                   "samples at temperature τ (default: the table's rows, with beams=4, "
                   "particles=8 and particles=32)")  # fmt: skip
    p.add_argument("--first", type=_count(1), help="task suites: only the first N tasks")
    p.add_argument(
        "--whitespace",
        default="pretty",
        type=lambda w: None if w == "none" else w,
        help="task suites: hf_fvo's JSON layout ('pretty', '' compact, 'none': [ ]?)",
    )
    p.add_argument("--out", default="hf_fvo_bench", help="output folder")
    p.add_argument("--seed", type=_count(0), default=0)
    p.set_defaults(func=bench)

    p = sub.add_parser("train-phi", help="train learned-Φ weights; writes a Hub-ready folder")
    p.add_argument("--out", default="hf_fvo_phi", help="output folder (save_pretrained layout)")
    p.add_argument("--model", help="local Transformers model folder (default: embedded SmolLM2)")
    p.add_argument("--schemas", help="JSON lines of {name, schema} (e.g. the development set): "
                   "finite enum schemas for exact labels, open ones for path labels")  # fmt: skip
    p.add_argument("--finite", type=_count(0), default=12, help="enum schemas from --schemas")
    p.add_argument("--open", type=_count(0), default=0,
                   help="open schemas from --schemas (one per source in turn, file order), "
                   "labelled along masked draws (path labels)")  # fmt: skip
    p.add_argument("--open-draws", type=_count(1), default=4, help="masked draws per open schema")
    p.add_argument("--max-new-tokens", type=_count(1), default=192,
                   help="token budget of the open schemas' draws")  # fmt: skip
    p.add_argument("--suites", nargs="*", default=["paper", "structured"],
                   help="suites whose finite JSON rows are labelled exactly")  # fmt: skip
    p.add_argument("--no-markov", action="store_true", help="leave out the Markov families")
    p.add_argument("--trajectories", type=_count(1), default=40, help="per Markov group")
    p.add_argument("--positions", type=_count(1), default=150, help="per finite schema")
    p.add_argument("--tol", type=_fraction, default=1e-4, help="unexplored mass of the tries")
    p.add_argument("--labels", help="train on a labels.parquet written by an earlier run "
                   "(with the model it was labelled with) instead of building labels")  # fmt: skip
    p.add_argument("--path-target", choices=["finish", "mean"], default="finish",
                   help="what path labels are fitted to: ending within the budget (default) "
                   "or the one-rollout Φ itself")  # fmt: skip
    p.add_argument("--epochs", type=_count(1), default=60)
    p.add_argument("--seed", type=_count(0), default=0)
    p.set_defaults(func=train_phi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hf-fvo`` command."""
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        return args.func(args)
    except CLIError as exc:
        print(f"hf-fvo: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # hf_fvo's typed errors (GrammarError is a ValueError)
        from hf_fvo.errors import GrammarError

        if not isinstance(exc, GrammarError):
            raise
        print(f"hf-fvo: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
