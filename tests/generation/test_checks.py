"""Sampling with a final check: what the masks only over-approximate is decided on the finished
text, exactly — weight 0 under particles, a zero leaf under exact Φ, a redraw under masking.

The references are independent of hf_fvo's check: the members are the superset grammar's
outputs that ``jsonschema`` (its plain validator) accepts, and μ* is the model's likelihood
renormalised over them (:func:`hf_fvo.eval.sequence_law`).
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.errors import CheckFailedError, InvalidArgumentError
from hf_fvo.eval import TerminalLaw, empirical_tv, null_tv_percentiles, sampling_law, sequence_law
from hf_fvo.grammar import TokenVocabulary
from hf_fvo.models import MarkovLM
from hf_fvo.phi import ExactPhi

# a small vocabulary (several spellings of one number: "1","0" and "10") and a Markov LM over it
SPELLINGS = [b"[", b"]", b",", b"0", b"1", b"2", b"3", b"5", b"6", b"9", b"10", b"12", b"15",
             b"18", b"20", b"[0", b"1,"]  # fmt: skip
EOS, BOS = len(SPELLINGS), len(SPELLINGS) + 1
VOCAB = TokenVocabulary([*SPELLINGS, None, None], eos_token_ids=[EOS])
PROMPT = (BOS,)
BUDGET = 10
DRAWS = 400

UNIQUE = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 2},
          "maxItems": 3, "uniqueItems": True}  # fmt: skip
ONE_OF = {"type": "integer", "minimum": 0, "maximum": 20,
          "oneOf": [{"multipleOf": 3}, {"multipleOf": 5}]}  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return MarkovLM.random(len(VOCAB), order=2, seed=3, temperature=0.7, bos_token_id=BOS,
                           eos_token_id=EOS, pad_token_id=EOS)  # fmt: skip


def _setting(model, schema, budget=None):
    """(grammar, μ* by brute force, the masked law of the superset grammar), on the whole
    (finite) language or within ``budget`` tokens."""
    g = Grammar.from_json_schema(schema, VOCAB, whitespace="")
    superset = sampling_law(g, model, PROMPT, "uniform", max_new_tokens=budget)
    validator = jsonschema.Draft202012Validator(schema)
    members = [s for s in superset.probs
               if validator.is_valid(json.loads(VOCAB.decode(s[:-1])))]  # fmt: skip
    assert 0 < len(members) < len(superset.probs)  # the check has work to do
    return g, sequence_law(model, PROMPT, members), superset


@pytest.mark.parametrize("schema", [UNIQUE, ONE_OF], ids=["uniqueItems", "overlapping oneOf"])
def test_exact_phi_with_leaf_checks_is_mu_star(model, schema):
    g, star, superset = _setting(model, schema)
    assert g.checked and g.is_finite
    exact = sampling_law(g, model, PROMPT, ExactPhi(g, model))
    assert exact.tv(star) < 1e-9
    assert superset.tv(star) > 0.3  # masking the superset alone is far from it


@pytest.mark.parametrize("schema", [UNIQUE, ONE_OF], ids=["uniqueItems", "overlapping oneOf"])
def test_particles_give_failed_checks_weight_zero_and_sample_mu_star(model, schema):
    g, star, _ = _setting(model, schema)
    _, p99 = null_tv_percentiles(star, DRAWS, seed=4)
    torch.manual_seed(7)
    ids = torch.tensor([PROMPT] * DRAWS)
    out = hf_fvo.generate(model, ids, grammar=g, particles=128, do_sample=True,
                          max_new_tokens=BUDGET, pad_token_id=g.eos_token_id)  # fmt: skip
    drawn = [_until_eos(row[len(PROMPT) :].tolist(), g.eos_token_id) for row in out]
    assert all(g.check(s[:-1]) is None for s in drawn)
    assert empirical_tv(drawn, star) <= p99


def test_masking_redraws_what_fails_the_check(model):
    g, _, superset = _setting(model, UNIQUE, BUDGET)
    passing = {s: p for s, p in superset.probs.items() if g.check(s[:-1]) is None}
    conditioned = TerminalLaw({s: p / sum(passing.values()) for s, p in passing.items()})
    _, p99 = null_tv_percentiles(conditioned, DRAWS, seed=5)
    torch.manual_seed(8)
    ids = torch.tensor([PROMPT] * DRAWS)
    out = hf_fvo.generate(model, ids, grammar=g, do_sample=True, max_new_tokens=BUDGET,
                          check_tries=50, return_dict_in_generate=True,
                          pad_token_id=g.eos_token_id)  # fmt: skip
    drawn = [_until_eos(row[len(PROMPT) :].tolist(), g.eos_token_id) for row in out.sequences]
    assert all(g.check(s[:-1]) is None for s in drawn)
    assert max(out["draws"]) > 1  # some outputs were redrawn
    assert empirical_tv(drawn, conditioned) <= p99  # the masked law given the check passes


def test_a_check_that_never_passes_is_a_typed_error_naming_the_keyword(model):
    never = {"type": "array", "maxItems": 2, "items": {"type": "integer"},
             "contains": {"const": 7}}  # no token spells a 7  # fmt: skip
    g = Grammar.from_json_schema(never, VOCAB, whitespace="")
    ids = torch.tensor([PROMPT])
    with pytest.raises(CheckFailedError, match=r"the only draw.*#/contains"):
        hf_fvo.generate(model, ids, grammar=g, do_sample=False, max_new_tokens=6)
    with pytest.raises(CheckFailedError, match=r"the only draw.*#/contains"):  # per-step outputs
        hf_fvo.generate(model, ids, grammar=g, do_sample=True, max_new_tokens=6,
                        output_scores=True, return_dict_in_generate=True)  # fmt: skip
    with pytest.raises(CheckFailedError, match=r"3 draws.*#/contains"):
        hf_fvo.generate(model, ids, grammar=g, do_sample=True, max_new_tokens=6, check_tries=3)
    with pytest.raises(CheckFailedError, match="particles failed the final check"):
        hf_fvo.generate(model, ids, grammar=g, do_sample=True, max_new_tokens=6, particles=4)
    with pytest.raises(InvalidArgumentError, match="check_tries"):
        hf_fvo.generate(model, ids, grammar=g, do_sample=True, max_new_tokens=6, check_tries=0)
    assert g.check_text("[1, 2").startswith("the text is not one JSON value")
    assert "appears twice" in g.check_text('{"a": 1, "a": 2}')


def _until_eos(row: list[int], eos: int) -> tuple[int, ...]:
    return tuple(row[: row.index(eos) + 1])


CONSTRUCTS = {
    "uniqueItems": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                    "minItems": 2, "maxItems": 3, "uniqueItems": True},
    "contains": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                 "maxItems": 3, "contains": {"minimum": 5}},
    "not pattern": {"type": "string", "maxLength": 8, "not": {"pattern": "^a"}},
    "overlapping oneOf": ONE_OF,
    "propertyNames": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 8},
                      "maxProperties": 2, "additionalProperties": {"type": "integer"}},
    "look-around": {"type": "string", "pattern": "^(?!x)[a-z]{1,6}$"},
    "unevaluatedProperties": {"type": "object", "properties": {"a": {"type": "integer"}},
                              "anyOf": [{"required": ["a"]}], "unevaluatedProperties": False},
    "hostname": {"type": "string", "format": "hostname", "maxLength": 16},
}  # fmt: skip


@pytest.fixture(scope="module")
def smollm2():
    from hf_fvo.models import load_default_model, load_default_tokenizer

    return load_default_tokenizer(), load_default_model()


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_the_embedded_model_writes_only_valid_instances_of_each_checked_construct(smollm2, name):
    tok, model = smollm2
    schema = CONSTRUCTS[name]
    g = Grammar.from_json_schema(schema, tok, whitespace="", vocab_size=model.config.vocab_size)
    assert g.checked  # the construct is decided by the check, not the masks
    chat = [{"role": "user", "content": f"Write one JSON value valid under {json.dumps(schema)}"}]
    prompt = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)
    ids = torch.tensor([prompt["input_ids"]] * 2)
    torch.manual_seed(0)
    out = hf_fvo.generate(model, ids, grammar=g, do_sample=True, top_k=0, max_new_tokens=32,
                          check_tries=32)  # fmt: skip
    cls = jsonschema.validators.validator_for(schema)
    for row in out[:, ids.shape[1] :].tolist():
        body = row[: row.index(g.eos_token_id)]  # never cut: the budget is part of the language
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(tok.decode(body)))
