"""Sampling from real-world schemas with the embedded model: every complete output validates.

The schemas come from the development-set slice (tests/data); outputs are checked with
``jsonschema`` (format checker on) against the original schema. benchmarks/realworld_generation.py
runs the same on 20 schemas × 3 samples and records the figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch

import hf_fvo
from hf_fvo import Grammar

DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench_slice.jsonl"
NAMES = ("calculate_area_97b98fa2", "sp_166_Normalized")


def _schema(name: str) -> dict:
    for line in DATA.open():
        row = json.loads(line)
        if row["name"] == name:
            return row["schema"]
    raise KeyError(name)


@pytest.fixture(scope="module")
def smollm2():
    from hf_fvo.models import load_default_model, load_default_tokenizer

    return load_default_tokenizer(), load_default_model()


@pytest.mark.parametrize("phi", ["uniform", "onestep"])
@pytest.mark.parametrize("name", NAMES)
def test_complete_outputs_validate_against_the_original_schema(smollm2, name, phi):
    tok, model = smollm2
    schema = _schema(name)
    grammar = Grammar.from_json_schema(schema, tok, whitespace="",
                                       vocab_size=model.config.vocab_size)  # fmt: skip
    message = f"Write one JSON value valid under this schema: {json.dumps(schema)[:800]}"
    chat = [{"role": "user", "content": message}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)
    ids = torch.tensor([prompt["input_ids"]])
    torch.manual_seed(0)
    out = hf_fvo.generate(model, ids.expand(2, -1), grammar=grammar, phi=phi, do_sample=True,
                          top_k=0, max_new_tokens=48)  # fmt: skip
    cls = jsonschema.validators.validator_for(schema)
    for row in out[:, ids.shape[1] :].tolist():
        eos = grammar.eos_token_id
        body = row[: row.index(eos)] if eos in row else row
        assert grammar.walk(body) is not None  # every prefix stays in the language
        if eos in row:
            value = json.loads(tok.decode(body))
            cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
