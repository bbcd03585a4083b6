"""Property: whatever schema (malformed ones included) and whatever ``generate()`` keywords a user
passes, hf_fvo answers with one of its typed errors or with valid output — never another
exception, never NaN, never a hang.

Schemas come from a small generator of nested JSON-Schema fragments; keywords from the sampling,
length and processor options of ``model.generate``. A complete output (ended by EOS) must parse
and validate against the *original* schema with ``jsonschema``; a cut-off one must still be a
prefix of the grammar's language. The model is a tiny random Llama over the SmolLM2 vocabulary.
"""

from __future__ import annotations

import json
import signal

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

import hf_fvo
from hf_fvo import Grammar, GrammarError
from hf_fvo.models import tiny_random_llama

SECONDS_PER_EXAMPLE = 60  # a hang is an example that outlives this

_leaf = st.one_of(
    st.just({"type": "integer"}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
    st.builds(
        lambda a, b: {"type": "integer", "minimum": a, "maximum": b},
        st.integers(-5, 5),
        st.integers(-5, 5),
    ),
    st.builds(
        lambda xs: {"enum": xs},
        st.lists(st.sampled_from(["a", 1, None, True, "bc"]), max_size=3),
    ),
    st.sampled_from(
        [
            {"const": "x"},
            {"type": "string", "pattern": "^[a-c]{1,2}$"},
            {"type": "string", "format": "date"},
            {"type": "number", "multipleOf": 0.5},
            True,
            False,
            {},
            # malformed or unenforceable: a typed error is the only right answer
            {"type": "foo"},
            {"required": "a"},
            {"properties": [1]},
            {"anyOf": []},
            {"type": "integer", "minimum": "x"},
            {"$ref": "#/nowhere"},
            {"pattern": "(a)\\1"},
            {"type": "array", "minItems": 3, "maxItems": 1},
            {"$defs": []},
            {"enum": "a"},
        ]
    ),
)


def _nest(children):
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.builds(
            lambda props, req, extra: {"type": "object", "properties": props,
                                       "required": [k for k in req if k in props],
                                       **({"additionalProperties": extra} if extra else {})},
            st.dictionaries(names, children, max_size=3), st.lists(names, max_size=2),
            st.sampled_from([None, False, True]),
        ),
        st.builds(lambda item, n: {"type": "array", "items": item, "maxItems": n},
                  children, st.integers(0, 3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda x: {"not": x}, children),
    )  # fmt: skip


SCHEMAS = st.recursive(_leaf, _nest, max_leaves=6)

_budget = st.one_of(
    st.builds(lambda n: {"max_new_tokens": n}, st.integers(1, 12)),
    st.builds(lambda n: {"max_length": 3 + n}, st.integers(1, 12)),
    st.builds(
        lambda n: {"generation_config": GenerationConfig(max_new_tokens=n)}, st.integers(1, 12)
    ),
)
_options = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.sampled_from([0.7, 1.0, 1.5]),
        "top_k": st.sampled_from([0, 5]),
        "top_p": st.sampled_from([0.5, 1.0]),
        "no_repeat_ngram_size": st.sampled_from([1, 2]),
        "repetition_penalty": st.sampled_from([1.0, 1.3]),
        "min_new_tokens": st.integers(1, 8),
        "suppress_tokens": st.sampled_from([[2], [13]]),
        "num_beams": st.just(2),
    },
)


@pytest.fixture(scope="module")
def model(smol_tokenizer):
    return tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang(f"an example ran past {SECONDS_PER_EXAMPLE} s")


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    schema=SCHEMAS,
    whitespace=st.sampled_from([None, ""]),
    strict=st.booleans(),
    phi=st.sampled_from(["uniform", "onestep"]),
    do_sample=st.booleans(),
    budget=_budget,
    options=_options,
    seed=st.integers(0, 2**16),
)
def test_a_typed_error_or_valid_output_never_anything_else(
    smol_tokenizer, model, schema, whitespace, strict, phi, do_sample, budget, options, seed
):
    tok = smol_tokenizer
    if not do_sample:
        options = {k: v for k, v in options.items() if k not in ("temperature", "top_k", "top_p")}
    outputs = {"return_dict_in_generate": True, "output_scores": True}
    if "generation_config" in budget:
        config = budget["generation_config"]
        for key, value in {**options, **outputs, "do_sample": do_sample}.items():
            setattr(config, key, value)
        kwargs = budget
    else:
        kwargs = {**budget, **options, **outputs, "do_sample": do_sample}
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS_PER_EXAMPLE)
    try:
        try:
            g = Grammar.from_json_schema(schema, tok, whitespace=whitespace, strict=strict)
            torch.manual_seed(seed)
            out = hf_fvo.generate(
                model, torch.tensor([[1, 9690, 28]]), grammar=g, phi=phi, **kwargs
            )
        except GrammarError as exc:
            event(f"typed error: {type(exc).__name__}")
            return  # a typed error: the right answer for bad input or a conflicting option
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not any(bool(s.isnan().any()) for s in out.scores), "NaN in the processed scores"
    eos = set(g.eos_token_ids)
    for row in out.sequences[:, 3:].tolist():
        end = next((i for i, t in enumerate(row) if t in eos), None)
        state = g.walk(row if end is None else row[:end])
        assert state is not None, f"output left the grammar: {tok.decode(row)!r}"
        # the budget is part of the language: no output is ever cut off
        assert end is not None, f"output cut off by the budget: {tok.decode(row)!r}"
        event("complete output")
        if end is not None:
            assert g.is_accepting(state)
            value = json.loads(tok.decode(row[:end]))
            jsonschema.validators.validator_for(schema)(schema).validate(value)
