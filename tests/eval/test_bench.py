"""Benchmark suites load as datasets with the documented columns; rows with an exact oracle
reproduce the published figures; hf-fvo bench writes a dataset and refuses bad input."""

from __future__ import annotations

import json

import datasets
import pytest

from hf_fvo.cli import main
from hf_fvo.eval.bench import COLUMNS, SUITES, load_suite, markdown, run_row, suite_grammar


@pytest.mark.parametrize("name", sorted(SUITES))
def test_shipped_suites_load_and_their_grammars_compile(name, smol_tokenizer):
    suite = load_suite(name)
    assert len(suite) >= 7 and set(COLUMNS) <= set(suite.column_names)
    for row in suite:
        assert row["oracle"] in {"trie", "markov", "sampled"}
        grammar, prompt = suite_grammar(row, smol_tokenizer, 49152)
        assert grammar.allowed(grammar.initial_state).any() and len(prompt) >= 1
        if row["oracle"] in ("trie", "markov"):  # exact oracles run on token automata
            assert grammar.backend == "automaton"
        if row["oracle"] != "sampled":
            assert grammar.is_finite


def test_a_local_file_is_a_suite_and_columns_are_checked(tmp_path):
    row = {"name": "yes/no", "family": "choices", "grammar": json.dumps(["yes", "no"]),
           "prompt": "Yes?", "model": "default", "oracle": "trie", "max_new_tokens": 4}  # fmt: skip
    good = tmp_path / "mine.jsonl"
    good.write_text(json.dumps(row) + "\n")
    assert load_suite(str(good))[0]["name"] == "yes/no"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"name": "x"}) + "\n")
    with pytest.raises(ValueError, match="lacks the columns"):
        load_suite(str(bad))
    with pytest.raises(FileNotFoundError, match="no suite"):
        load_suite("no-such-suite")


def test_markov_rows_reproduce_seed_table_8():
    row = next(r for r in load_suite("paper") if r["name"] == "budget n=24 K=8 p1=0.7")
    result = run_row(row, None, None, phi="exact")
    assert round(result["tv_proj_star"], 3) == 0.961 and result["tv_phi_star"] <= 1e-12


def test_paper_row_a_with_smollm2_reproduces_the_published_exact_figures(smol_tokenizer):
    """docs/benchmarks.md, exact terminal laws, row A: TV(μ_proj, μ*) 0.924 over token sequences
    and 0.466 over texts, exact Φ at float precision (benchmarks/exact_laws_smollm2.py)."""
    from hf_fvo.models import load_default_model

    row = next(r for r in load_suite("paper") if r["name"].startswith("json A"))
    result = run_row(row, load_default_model(), smol_tokenizer, phi="exact", tol=1e-9)
    assert round(result["tv_proj_star"], 3) == 0.924
    assert round(result["tv_proj_star_strings"], 3) == 0.466
    assert result["tv_phi_star"] < 1e-12 and result["residual"] < 2e-3


def test_trie_rows_give_exact_tvs_from_one_exploration(smol_tokenizer):
    from hf_fvo.eval import grammar_conditional_law, sampling_law
    from hf_fvo.models import tiny_random_llama

    row = {"name": "pets", "family": "choices", "grammar": json.dumps(["cat", "dog", "bird"]),
           "prompt": "Pet?", "model": "default", "oracle": "trie", "max_new_tokens": 8}  # fmt: skip
    model = tiny_random_llama(len(smol_tokenizer), seed=1)
    result = run_row(row, model, smol_tokenizer, phi="exact", tol=0.0, proj_tol=0.0)
    g, prompt = suite_grammar(row, smol_tokenizer, len(smol_tokenizer))
    star = grammar_conditional_law(g, model, prompt)  # fresh explorations, no row cache
    proj = sampling_law(g, model, prompt, "uniform")
    assert result["exact"] and result["residual"] == 0.0
    assert abs(result["tv_proj_star"] - proj.tv(star)) < 1e-12 and result["tv_proj_star"] > 0.01
    assert result["tv_phi_star"] < 1e-12
    onestep = run_row(row, model, smol_tokenizer, phi="onestep", tol=0.0, proj_tol=0.0)
    assert onestep["tv_phi_star"] > 1e-6  # the check can fail: OneStep is not exact here


def test_particle_rows_report_log_z_ess_and_a_tv_to_mu_star_within_its_null(smol_tokenizer):
    """``particles=N``: 200 independent runs of 16 particles, one output each; their law lies
    within the 99th percentile of the TV of 200 draws from μ* itself (the row's own p95 is
    reported beside it), and log Ẑ (a probability) is at most 0."""
    from hf_fvo.eval import grammar_conditional_law, null_tv_percentiles
    from hf_fvo.models import tiny_random_llama

    row = {"name": "pets", "family": "choices", "grammar": json.dumps(["cat", "dog", "bird"]),
           "prompt": "Pet?", "model": "default", "oracle": "trie", "max_new_tokens": 8}  # fmt: skip
    model = tiny_random_llama(len(smol_tokenizer), seed=1)
    result = run_row(row, model, smol_tokenizer, phi="exact", tol=0.0, proj_tol=0.0,
                     samples=200, particles=16)  # fmt: skip
    g, prompt = suite_grammar(row, smol_tokenizer, len(smol_tokenizer))
    star = grammar_conditional_law(g, model, prompt)
    p95, p99 = null_tv_percentiles(star, 200, seed=0)
    assert result["particles"] == 16 and result["tv_smc_null_p95"] == pytest.approx(p95, abs=0.02)
    assert result["tv_smc_star"] <= p99
    assert result["smc_log_z"] <= 0.0 and 1.0 <= result["smc_min_ess"] <= 16.0
    assert "TV(SMC, μ*)" in markdown([result])


def test_mode_rows_compare_beams_and_greedy_with_mu_stars_most_likely_member(smol_tokenizer):
    """``beams=N`` on a trie row: each decoder's output (greedy, N beams, two look-ahead beams
    with exact Φ) is checked against μ*'s argmax, and its gap is log μ*(mode) − log μ*(output)
    (0 at the mode, never negative)."""
    from hf_fvo.eval import grammar_conditional_law
    from tests.lms import tiny_llama

    row = {"name": "pets", "family": "choices", "grammar": json.dumps(["cat", "dog", "bird"]),
           "prompt": "Pet?", "model": "default", "oracle": "trie", "max_new_tokens": 8}  # fmt: skip
    model = tiny_llama(len(smol_tokenizer), smol_tokenizer.eos_token_id, seed=2)
    result = run_row(row, model, smol_tokenizer, tol=0.0, proj_tol=0.0, samples=0, beams=16)
    g, prompt = suite_grammar(row, smol_tokenizer, len(smol_tokenizer))
    star = grammar_conditional_law(g, model, prompt)
    widest = max(len({s[:i] for s in star.probs if len(s) > i}) for i in range(8))
    assert widest <= 16  # 16 beams hold every prefix: beam search is exhaustive here
    assert result["beams"] == 16 and result["beam_is_mode"] and result["beam_gap"] == 0.0
    assert result["greedy_gap"] >= 0.0 and result["greedy_is_mode"] == (result["greedy_gap"] == 0)
    assert result["lookahead_gap"] >= 0.0
    assert result["lookahead_is_mode"] == (result["lookahead_gap"] == 0)
    assert "beams = μ* mode" in markdown([result]) and "2 look-ahead beams" in markdown([result])


def test_rows_without_an_oracle_sample_a_feasible_estimator_instead_of_exact(smol_tokenizer):
    from hf_fvo.models import tiny_random_llama

    row = {"name": "digits", "family": "regex", "grammar": json.dumps("[0-9]+"), "prompt": "N?",
           "model": "default", "oracle": "sampled", "max_new_tokens": 4}  # fmt: skip
    model = tiny_random_llama(len(smol_tokenizer), seed=2)
    result = run_row(row, model, smol_tokenizer, phi="exact", samples=20, sampled_phi="onestep")
    assert not result["exact"] and result["phi"] == "onestep"
    assert 0.0 <= result["sampled_tv"] <= 1.0 and result["samples"] == 20
    assert "| digits | sampled | onestep |" in markdown([result])
    # beside an importance-sampled μ* reference: every draw fits the budget of 4 tokens
    assert 1.0 <= result["ref_ess"] <= 20 and 2.0 <= result["ref_length"] <= 4.0
    assert result["capped_masked"] == result["capped_phi"] == 0.0
    for key in ("first_tv_masked", "first_tv_phi", "first_tv_null_p95"):
        assert 0.0 <= result[key] <= 1.0


def test_a_trie_row_beyond_max_nodes_is_sampled_and_says_why(smol_tokenizer):
    from hf_fvo.models import tiny_random_llama

    row = {"name": "pets", "family": "choices", "grammar": json.dumps(["cat", "dog", "bird"]),
           "prompt": "Pet?", "model": "default", "oracle": "trie", "max_new_tokens": 8}  # fmt: skip
    model = tiny_random_llama(len(smol_tokenizer), seed=1)
    result = run_row(row, model, smol_tokenizer, phi="exact", tol=0.0, max_nodes=1, samples=10)
    assert not result["exact"] and result["phi"] == "onestep" and result["samples"] == 10
    assert "max_nodes=1" in result["note"]
    assert f"- pets: {result['note']}" in markdown([result])


def test_bench_cli_writes_a_dataset_and_a_table(tmp_path, capsys):
    assert main(["bench", "--rows", "dyck D3,12", "--out", str(tmp_path)]) == 0
    results = datasets.load_dataset("json", data_files=str(tmp_path / "results.jsonl"),
                                    split="train")  # fmt: skip
    assert results[0]["name"] == "dyck D3,12" and results[0]["exact"]
    table = (tmp_path / "results.md").read_text()
    assert "| dyck D3,12 | markov |" in table
    assert f"Command: `hf-fvo bench --rows 'dyck D3,12' --out {tmp_path}`" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--suite", "/no/such/file.jsonl"], "no suite"),
        (["bench", "--rows", "no row has this name"], "no row"),
    ],
)
def test_bench_bad_input_prints_one_line_and_exits_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
