"""The ``hf-fvo`` command: the demo runs on the embedded model; bad input gets one line."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

from hf_fvo.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_demo_generates_a_member_of_the_schema_language(capsys):
    assert main(["demo", "--max-new-tokens", "48", "--samples", "0", "--particles", "0"]) == 0
    out = capsys.readouterr().out
    masked = next(line for line in out.splitlines() if line.startswith("grammar-masked"))
    text = masked.split(": ", 1)[1]
    assert set(json.loads(ast.literal_eval(text))) == {"name", "age", "mood"}
    assert "member of the schema language: True" in out


def test_demo_shows_each_branch_under_both_laws_and_fvo_spec_samples(capsys):
    assert main(["demo", "--max-new-tokens", "8", "--samples", "4", "--particles", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line.rsplit(maxsplit=3) for line in out.splitlines() if line.startswith('{"status"')]
    assert sorted(json.loads(r[0])["status"] for r in rows) == ["error", "ok", "pending"]
    proj, star, sampled = ([float(r[i]) for r in rows] for i in (1, 2, 3))
    assert sum(star) == pytest.approx(1.0, abs=2e-3)  # three rounded cells
    assert sum(proj) == pytest.approx(1.0, abs=2e-3)
    assert sum(sampled) == pytest.approx(1.0) and all(4 * f == int(4 * f) for f in sampled)
    tv = float(out.split("TV(μ_proj, μ*) over strings = ")[1].split(";")[0])
    assert tv == pytest.approx(
        0.5 * sum(abs(a - b) for a, b in zip(proj, star, strict=True)), abs=3e-3
    )
    # a share of the draft's and the grammar's candidates (free ones counted on both sides)
    assert 0.0 <= float(out.split("acceptance ")[1].split(",")[0]) <= 1.0


def test_demo_draws_valid_titles_on_the_open_schema_with_masking_and_particles(capsys):
    from hf_fvo.eval.demo import OPEN_SCHEMA

    argv = ["demo", "--max-new-tokens", "8", "--samples", "0", "--particles", "4", "--draws", "2"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("masking (μ_proj)"))
    rows = [re.fullmatch(r"('.*'|\".*\")\s+([\d.]+)%\s+('.*'|\".*\")\s+([\d.]+)%", line)
            for line in lines[head + 1 : head + 3]]  # fmt: skip
    assert all(rows)
    limit = OPEN_SCHEMA["properties"]["title"]["maxLength"]
    for row in rows:
        for title, percent in ((row[1], row[2]), (row[3], row[4])):
            assert len(ast.literal_eval(title)) <= limit  # every output is a member
            assert 0.0 <= float(percent) <= 100.0
    summary = lines[head + 3]
    masked_cut = sum(float(r[2]) < 1.0 for r in rows)  # the count agrees with the table
    particles_cut = sum(float(r[4]) < 1.0 for r in rows)
    assert f"masking {masked_cut}/2, particles {particles_cut}/2" in summary
    assert math.isfinite(float(summary.split("log Ẑ (log Pr[a valid output]) ")[1].split(";")[0]))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--model", "/no/such/folder"], "no model folder"),
        (["demo", "--schema", "/no/such/schema.json"], "schema file not found"),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_unsupported_schema_is_refused_before_loading_the_model(tmp_path, capsys):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"properties": {"a": {"$ref": "https://example.com/a.json"}}}))
    assert main(["demo", "--schema", str(schema)]) == 2
    assert "#/properties/a: $ref 'https://example.com/a.json' points outside" in (
        capsys.readouterr().err
    )


def test_audit_prints_the_tv_and_writes_a_figure(tmp_path, capsys):
    schema = str(ROOT / "examples" / "status_schema.json")
    png = tmp_path / "audit.png"
    prompt = "Reply with a JSON object with status in ['ok', 'error', 'pending']."
    argv = ["audit", "--schema", schema, "--samples", "3", "--tol", "1e-4", "--png", str(png),
            "--prompt", prompt]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    tv = float(out.split("TV(μ_proj, μ*) over texts = ")[1].split()[0])
    rows = [line.split() for line in out.splitlines() if line.startswith('{"status"')]
    proj, star = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert len(rows) == 3 and tv > 0.05
    assert tv == pytest.approx(0.5 * sum(abs(a - b) for a, b in zip(proj, star, strict=True)),
                               abs=3e-3)  # fmt: skip
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "--schema", "/no/such/schema.json"], "schema file not found"),
        (["audit", "--regex", "(unclosed"], "cannot compile the grammar"),
        (["audit", "--choices", "a", "--model", "/no/such/folder"], "no model folder"),
        (["audit", "--choices", "a", "--samples", "-1"], "--samples"),
        (["audit", "--choices", "a", "--phi", "exakt"], "unknown estimator 'exakt'"),
        (["audit", "--choices", "a", "--max-new-tokens", "0"], "--max-new-tokens: must be ≥ 1"),
        (["audit", "--choices", "a", "--tol", "-1"], "--tol: must lie in [0, 1)"),
        (["bench", "--max-nodes", "many"], "--max-nodes: expected an integer"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_audit_bad_input_prints_one_line_and_exits_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_train_phi_writes_a_hub_folder_that_loads(tmp_path, capsys):
    from hf_fvo.phi import PhiModel

    out = tmp_path / "phi"
    argv = ["train-phi", "--out", str(out), "--suites", "--finite", "0", "--trajectories", "1",
            "--epochs", "2"]  # fmt: skip
    assert main(argv) == 0
    assert {"model.safetensors", "config.json", "README.md", "labels.parquet"} <= {
        p.name for p in out.iterdir()}  # fmt: skip
    weights = PhiModel.from_pretrained(out)
    assert weights.base_models == ["markov-lm"] and weights.training_data["positions"] > 0
    assert "train-phi" in weights.training_data["command"]
    assert "learned" in capsys.readouterr().out


def test_train_phi_open_schemas_get_path_labels_and_retrain_from_them(tmp_path, capsys):
    from hf_fvo.phi import PhiModel

    rows = Path(__file__).parent / "data" / "jsonschemabench_slice.jsonl"
    out = tmp_path / "open"
    argv = ["train-phi", "--out", str(out), "--schemas", str(rows), "--suites", "--finite", "0",
            "--no-markov", "--open", "2", "--open-draws", "1", "--max-new-tokens", "12",
            "--epochs", "2"]  # fmt: skip
    assert main(argv) == 0
    weights = PhiModel.from_pretrained(out)
    assert weights.domain == "any" and weights.training_data["path_target"] == "finish"
    assert len(weights.training_data["open_schemas"]) == 2
    sources = {json.loads(line)["name"]: json.loads(line)["source"]
               for line in rows.read_text().splitlines()}  # fmt: skip
    # one schema per source in turn: the two come from different sources
    assert len({sources[n] for n in weights.training_data["open_schemas"]}) == 2
    assert "1[W > 0]" in capsys.readouterr().out
    # train again from the written labels, on the other target
    again = tmp_path / "again"
    argv = [
        "train-phi",
        "--out",
        str(again),
        "--labels",
        str(out / "labels.parquet"),
        "--suites",
        "--finite",
        "0",
        "--no-markov",
        "--path-target",
        "mean",
        "--epochs",
        "2",
    ]
    assert main(argv) == 0
    retrained = PhiModel.from_pretrained(again)
    assert retrained.domain == "any" and retrained.training_data["path_target"] == "mean"
    assert sorted(retrained.training_data["open_schemas"]) == sorted(
        weights.training_data["open_schemas"]
    )
    # a labels file that is not there is one line naming it
    missing = tmp_path / "nowhere.parquet"
    argv = ["train-phi", "--out", str(again), "--labels", str(missing), "--suites", "--finite",
            "0", "--no-markov"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read labels from" in err[0] and "nowhere" in err[0]
    # --labels trains on that file only
    assert main(["train-phi", "--out", str(again), "--labels", str(out / "labels.parquet")]) == 2
    assert "--labels trains on that file only" in capsys.readouterr().err


def test_train_phi_bad_schema_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"nope": 1}\n')
    assert main(["train-phi", "--out", str(tmp_path / "o"), "--schemas", str(bad)]) == 2
    assert "name" in capsys.readouterr().err


def test_the_open_schema_demo_refuses_no_draws_with_a_typed_error(smol_tokenizer):
    from hf_fvo.errors import InvalidArgumentError
    from hf_fvo.eval.demo import open_particles

    with pytest.raises(InvalidArgumentError, match="draws"):
        open_particles(None, smol_tokenizer, 0)
    with pytest.raises(InvalidArgumentError, match="particles"):
        open_particles(None, smol_tokenizer, 2, 0)
