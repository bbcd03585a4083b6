"""One served request's processor: a pure function of the request's output tokens (so vLLM may
preempt, resume, move or recompute a request), every draw a complete member within
``max_tokens``, and the law it samples the one the Transformers processor samples."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch

from hf_fvo.grammar import GrammarCompiler
from hf_fvo.vllm import KEY, RequestProcessor, RequestSpec, admit

DATA = Path(__file__).resolve().parents[1] / "data"
JSB = [json.loads(line) for line in (DATA / "jsonschemabench_slice.jsonl").open()]  # dev set


def _draw(proc: RequestProcessor, vocab: int, gen: torch.Generator, limit: int) -> list[int]:
    out: list[int] = []
    eos = set(proc.processor.grammar.eos_token_ids)
    for _ in range(limit):
        logits = torch.randn(vocab, generator=gen) * 3.0  # a stand-in model, seeded
        scores = proc(out, logits)
        tok = int(torch.multinomial(torch.softmax(scores, -1), 1, generator=gen))
        out.append(tok)
        if tok in eos:
            break
    return out


@pytest.fixture(scope="module")
def compiler(smol_tokenizer):
    return GrammarCompiler.shared(smol_tokenizer, len(smol_tokenizer))


def _served(compiler, row, slack):
    spec = RequestSpec.from_args({KEY: {"json_schema": row["schema"]}})
    g = admit(spec, compiler, None)
    budget = g.tokens_to_accept(g.initial_state) + 1 + slack
    return g, RequestProcessor(g, spec.estimator(g, budget), budget), budget


def test_draws_from_development_schemas_are_complete_members_within_a_binding_budget(
    compiler, smol_tokenizer
):
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for row in JSB:
        try:
            g, proc, budget = _served(compiler, row, slack=3)  # binds: 3 tokens of slack
        except ValueError:
            continue  # refused (needs a final check, or empty): not served
        if budget > 80 or row["name"] in LOOSE_WITNESS:
            continue  # kept short for CI; the loose-witness case is the test below
        out = _draw(proc, g.vocab_size, gen, budget)
        assert len(out) <= budget and out[-1] in g.eos_token_ids, row["name"]
        jsonschema.validate(json.loads(smol_tokenizer.decode(out[:-1])), row["schema"])
        checked += 1
        if checked == 12:
            break
    assert checked == 12


# Once a known gap of the pushdown budget rule: its completion search writes every optional
# property of this schema's 75 (schema order, three required ones late in it), 494 tokens where
# about 25 do, so a budget of 100 was refused. The member built from the schema
# (hf_fvo.grammar.schema.instance) is the initial state's witness now. Mid-request the gap
# remains (docs/grammar.md, "Budget rule: a known gap"): where the schema's closing bound
# admitted every token, a row whose room falls below it can be left with no completion the
# search finds, so the draws above pass this schema over.
LOOSE_WITNESS = {"sp_302_Normalized"}


def test_a_budget_that_fits_a_short_member_is_admitted_on_a_schema_with_many_optional_keys(
    compiler, smol_tokenizer
):
    row = next(r for r in JSB if r["name"] == "sp_302_Normalized")
    member = json.dumps([{"e": "", "p": "", "tv": ""}], separators=(",", ":"))
    jsonschema.validate(json.loads(member), row["schema"])
    assert len(smol_tokenizer.encode(member)) < 30
    admit(RequestSpec.from_args({KEY: {"json_schema": row["schema"]}}), compiler, 100)


def test_scores_depend_only_on_the_tokens_so_a_resumed_request_gets_the_same(compiler):
    spec = RequestSpec.from_args({KEY: {"json_schema": {"type": "array", "items": {
        "type": "integer"}, "maxItems": 3}}})  # fmt: skip
    g = admit(spec, compiler, 32)
    gen = torch.Generator().manual_seed(1)
    first = RequestProcessor(g, spec.estimator(g, 32), 32)
    out = _draw(first, g.vocab_size, gen, 32)
    logits = torch.randn(g.vocab_size, generator=gen)
    for k in range(len(out)):
        resumed = RequestProcessor(g, spec.estimator(g, 32), 32)  # a fresh one, mid-request
        assert torch.equal(resumed(out[:k], logits), first(out[:k], logits))


def test_the_request_processor_applies_the_transformers_processors_law(compiler):
    from hf_fvo.generation import FVOLogitsProcessor

    spec = RequestSpec.from_args({KEY: {"choices": ["yes", "yesterday", "no"], "phi": "onestep"}})
    g = admit(spec, compiler, 6)
    logits = torch.randn(g.vocab_size, generator=torch.Generator().manual_seed(2))
    proc = RequestProcessor(g, spec.estimator(g, 6), 6)
    ref = FVOLogitsProcessor(g, "onestep", prompt_length=0, max_new_tokens=6)
    assert torch.equal(proc([], logits), ref(torch.zeros(1, 0, dtype=torch.long),
                                             logits[None])[0])  # fmt: skip


def test_a_failure_inside_the_engine_ends_the_request_instead_of_the_server(compiler, caplog):
    spec = RequestSpec.from_args({KEY: {"choices": ["yes"]}})
    g = admit(spec, compiler, 8)
    proc = RequestProcessor(g, spec.estimator(g, 8), 8)
    out = proc([99999999], torch.zeros(g.vocab_size))  # a token outside the grammar
    assert torch.isfinite(out).nonzero().flatten().tolist() == list(g.eos_token_ids)
    assert "failed" in caplog.text
