"""Task suites built from MaskBench instances: what they ask is answerable and binding, the
scoring reads JSON as JSON, the intervals are Wilson's, and every engine row runs end to end
(``hf-fvo bench --suite transcribe``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import datasets
import jsonschema
import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.cli import main
from hf_fvo.errors import InvalidArgumentError
from hf_fvo.eval.instances import in_schema_order
from hf_fvo.eval.tasks import (
    ENGINES,
    build_tasks,
    load_tasks,
    parse_output,
    run_task,
    score,
    summarize,
)
from hf_fvo.models import tiny_random_llama

DATA = Path(__file__).resolve().parents[1] / "data"


def _valid(schema, value) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    return not any(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))


def _at(value, path):
    for key in path:
        value = value[key]
    return value


def test_the_transcription_suite_is_answerable_by_every_sampler(smol_tokenizer):
    """At least 150 tasks; each instance is valid under its schema, and hf_fvo's grammar (the
    default, and pretty) admits it, so a wrong answer is the sampler's, not the grammar's."""
    tasks = load_tasks("transcribe")
    assert len(tasks) >= 150
    for task in tasks[::10]:
        schema, instance = json.loads(task["schema"]), json.loads(task["instance"])
        assert _valid(schema, instance), task["name"]
        for whitespace, options in ((None, {}), ("pretty", {"indent": 2})):
            g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace=whitespace)
            text = json.dumps(in_schema_order(instance, schema), ensure_ascii=False, **options)
            state = g.walk(smol_tokenizer.encode(text))
            assert state is not None and g.is_accepting(state), (task["name"], text)
        assert "YAML" in task["prompt"] and task["max_new_tokens"] >= 32


def test_the_shortening_suite_binds(smol_tokenizer):
    """Each task's source string is longer than its new maxLength: the instance as it stands is
    invalid, and with that string cut to the limit it is valid."""
    tasks = load_tasks("shorten")
    assert len(tasks) >= 50
    for task in tasks:
        schema, instance = json.loads(task["schema"]), json.loads(task["instance"])
        path, source = task["field"], task["source"]
        assert _at(instance, path) == source
        assert not _valid(schema, instance), task["name"]
        node = schema
        for key in path:
            node = node["properties"][key]
        cut = json.loads(task["instance"])
        parent = _at(cut, path[:-1])
        parent[path[-1]] = source[: node["maxLength"]]
        assert node["maxLength"] == len(source) // 2 and _valid(schema, cut), task["name"]


def test_building_is_deterministic_and_refuses_an_unknown_kind(smol_tokenizer):
    rows = [json.loads(line) for line in (DATA / "maskbench_slice.jsonl").open()]
    first = build_tasks(rows, smol_tokenizer, "transcribe", count=5)
    assert first == build_tasks(rows, smol_tokenizer, "transcribe", count=5) and len(first) == 5
    with pytest.raises(InvalidArgumentError, match="kind"):
        build_tasks(rows, smol_tokenizer, "summarize")


@pytest.mark.parametrize(
    ("text", "instance", "exact", "leaves"),
    [
        ('{"b": [1, 2.0], "a": true}', {"a": True, "b": [1, 2]}, True, 1.0),  # order, 2.0 == 2
        ('{"a": 1, "b": [1, 2]}', {"a": True, "b": [1, 2]}, False, 2 / 3),  # 1 is not true
        ('{"a": true, "b": [1, 2], "c": 0}', {"a": True, "b": [1, 2]}, False, 1.0),  # extra key
        ('{"a": {}}', {"a": []}, False, 0.0),  # an empty object is not an empty array
        ('{"a": tru', {"a": True}, False, 0.0),  # not JSON
    ],
)
def test_scoring_reads_json_as_json(text, instance, exact, leaves):
    s = score(text, instance)
    assert s["exact"] is exact and math.isclose(s["leaves"], leaves)


def test_a_fence_is_removed_only_when_asked():
    text = 'Sure:\n```json\n{"a": 1}\n```'
    assert parse_output(text) == (False, None)
    assert parse_output(text, fenced=True) == (True, {"a": 1})


@pytest.mark.parametrize(
    ("written", "cut"),
    [("The quick br", True), ("The quick", False), ("The slow", False), ("", False)],
)
def test_a_cut_word_is_a_prefix_that_stops_between_two_letters(written, cut):
    source = "The quick brown fox"
    s = score(json.dumps({"t": written, "n": 1}), {"t": source, "n": 1}, field=["t"],
              source=source)  # fmt: skip
    assert s["cut_word"] is cut and s["exact"]  # the other leaves are all there


def test_summary_intervals_are_wilsons():
    """k = 0 of 10: the Wilson upper bound is z²/(n+z²) = 0.2775 (z = 1.96)."""
    base = {"task": "t", "engine": "e", "valid": True, "cut_word": None, "seconds": 2.0,
            "refused": None}  # fmt: skip
    rows = [{**base, "exact": False, "leaves": 0.5} for _ in range(10)]
    (s,) = summarize(rows)
    assert s["exact"] == 0 and s["exact_ci"][0] == 0.0
    assert math.isclose(s["exact_ci"][1], 1.96**2 / (10 + 1.96**2), rel_tol=1e-9)
    assert s["leaves"] == 0.5 and s["leaves_half"] == 0.0 and s["seconds"] == 2.0


@pytest.fixture(scope="module")
def tiny_task_setup(smol_tokenizer):
    model = tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)
    task = next(t for t in load_tasks("transcribe") if t["max_new_tokens"] <= 64)
    return model, task


@pytest.mark.parametrize(
    "engine",
    [
        *ENGINES,
        "particles=2",
        "beams=2 normalised",
        "beams=2 keep_greedy",
        "masked t=0.5",
        "particles=2 t=0.5",
        "xgrammar greedy",
        "llguidance greedy",
        "beams=2 lookahead",
        "particles=2 t=0.5 best",
    ],
)
def test_every_engine_runs_a_task_and_constrained_outputs_are_never_invalid(
    engine, tiny_task_setup, smol_tokenizer
):
    """On a tiny random model (its words are noise): every row of the table produces a scored
    record; a constrained engine's parsed output is valid under the task's schema. A peer row
    runs where its engine package is installed (XGrammar is not in the test extras: its wheel
    pulls triton)."""
    model, task = tiny_task_setup
    wrapped = None
    peer = engine.removesuffix(" greedy")
    if peer in ("xgrammar", "llguidance"):
        pytest.importorskip(peer, reason=f"the {engine} row needs {peer} installed")
        import outlines

        wrapped = outlines.from_transformers(model, smol_tokenizer)
    r = run_task(task, engine, model, smol_tokenizer, seed=1, wrapped=wrapped)
    assert r["engine"] == engine and r["tokens"] <= task["max_new_tokens"]
    assert r["logp"] is None or r["logp"] < 0.0  # the output's log-likelihood, when there is one
    if engine != "unconstrained" and r["parsed"]:
        assert r["valid"], (engine, r["text"])


def test_an_unknown_engine_is_refused_by_run_task(tiny_task_setup, smol_tokenizer):
    model, task = tiny_task_setup
    with pytest.raises(InvalidArgumentError, match="unknown engine"):
        run_task(task, "beam", model, smol_tokenizer)


def test_bench_cli_runs_a_task_suite(tmp_path):
    """``hf-fvo bench --suite transcribe``: a dataset and a table, on the embedded model."""
    argv = ["bench", "--suite", "transcribe", "--first", "1", "--engines", "masked greedy",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    (record,) = datasets.load_dataset("json", data_files=str(tmp_path / "results.jsonl"),
                                      split="train")  # fmt: skip
    assert record["engine"] == "masked greedy" and record["valid"]
    assert "| transcribe | masked greedy | 1 |" in (tmp_path / "results.md").read_text()


def test_bench_cli_refuses_an_unknown_engine(capsys):
    assert main(["bench", "--suite", "transcribe", "--engines", "beam"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown engine 'beam'" in err[0]


def test_engines_are_checked_before_any_task_runs(monkeypatch):
    """An unknown engine, a malformed particle count, or a peer without its packages installed
    is refused by name."""
    import importlib.util

    from hf_fvo.eval.tasks import check_engines

    for bad in (
        "beam",
        "particles=many",
        "beams=0",
        "beams=4 sideways",
        "particles=0",
        "beams=4 keep greedy",
        "masked t=0",
        "masked t=-1",
        "masked t=hot",
        "masked greedy t=0.5",
        "beams=4 t=0.5",
        "xgrammar greedy t=0.5",
        "particles greedy",
        "masked best",
        "beams=4 best",
        "particles=4 greedy best",
        "masked lookahead",
    ):
        with pytest.raises(InvalidArgumentError, match=r"unknown engine|above 0"):
            check_engines([bad])
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "xgrammar" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(InvalidArgumentError, match=r"need \['xgrammar'\] installed"):
        check_engines(["masked", "xgrammar"])
    assert check_engines(["masked", "llguidance"]) == ["llguidance"]


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ("masked", {"do_sample": True, "top_k": 0}),
        ("masked t=0.5", {"do_sample": True, "top_k": 0, "temperature": 0.5}),
        (
            "particles=3 t=0.25",
            {"do_sample": True, "top_k": 0, "temperature": 0.25, "particles": 3},
        ),
        ("masked greedy", {"do_sample": False, "top_k": None}),
        (
            "particles=3 t=0.25 best",
            {"temperature": 0.25, "particles": 3, "num_return_sequences": 3},
        ),
        (
            "beams=3 lookahead",
            {"do_sample": False, "num_beams": 3, "phi": "learned", "length_penalty": 0.0},
        ),
    ],
)
def test_an_engines_temperature_and_decoding_reach_generate(
    engine, expected, monkeypatch, tiny_task_setup, smol_tokenizer
):
    """``masked t=0.5`` samples at temperature 0.5 with no truncation; ``particles=N t=τ`` asks
    for N particles at τ (μ* of the warped model); greedy rows never sample; ``best`` draws N
    outputs from the weighted particles; ``lookahead`` beams run with learned Φ̂."""
    import hf_fvo.eval.tasks as T

    model, task = tiny_task_setup
    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        raise T.GrammarError("spied")

    monkeypatch.setattr(T, "generate", spy)
    record = run_task(task, engine, model, smol_tokenizer, seed=1)
    assert record["refused"] == "GrammarError: spied"
    assert {k: seen.get(k) for k in expected} == expected
    assert ("temperature" in seen) == ("temperature" in expected)


def test_the_best_of_the_particles_draws_is_the_likeliest(
    monkeypatch, tiny_task_setup, smol_tokenizer
):
    """``particles=N best`` returns, of the N draws generate hands back, the one of largest
    log p(x) under the model (EOS included), whichever row it is."""
    import hf_fvo.eval.tasks as T

    model, task = tiny_task_setup
    eos = smol_tokenizer.eos_token_id
    ids = T._chat_ids(smol_tokenizer, task["prompt"])
    rows = [[90, 91, eos, eos], [92, eos, eos, eos], [93, 94, 95, eos]]
    logps = [T._log_likelihood(model, ids, r[: r.index(eos) + 1]) for r in rows]
    assert len(set(logps)) == 3

    def three_draws(model_, input_ids, **kwargs):
        return torch.cat([input_ids.repeat(3, 1), torch.tensor(rows)], dim=1)

    monkeypatch.setattr(T, "generate", three_draws)
    record = run_task(task, "particles=3 best", model, smol_tokenizer, seed=1)
    assert record["logp"] == pytest.approx(max(logps))
    assert record["tokens"] == rows[max(range(3), key=logps.__getitem__)].index(eos)
