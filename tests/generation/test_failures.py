"""Generation fails loudly, early and clearly: budgets, conflicting options, bad scores, padding,
continuations, tokenizer mismatches and unexplorable exact Φ (issue: "Fail loudly…").

Each test names the behaviour it protects; before these fixes each case crashed inside
Transformers (NaN probabilities), hung, or silently produced a cut-off or garbage output.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GenerationConfig

import hf_fvo
from hf_fvo import FVOLogitsProcessor, Grammar
from hf_fvo.errors import (
    BudgetTooSmallError,
    ConstraintConflictError,
    EmptyLanguageError,
    GrammarTooLargeError,
    InvalidArgumentError,
    NonFiniteScoresError,
    OutOfGrammarError,
    TokenizerError,
)
from hf_fvo.eval import sampling_law
from hf_fvo.models import tiny_random_llama
from hf_fvo.phi import ExactPhi

V, EOS = 16, 2
PROMPT = [7, 8, 9]


@pytest.fixture(scope="module")
def small_model():
    return tiny_random_llama(V, eos_token_id=EOS)


@pytest.fixture(scope="module")
def smol_model(smol_tokenizer):
    return tiny_random_llama(len(smol_tokenizer), eos_token_id=smol_tokenizer.eos_token_id)


def chain(*members: list[int]) -> Grammar:
    """A token automaton accepting exactly the given token sequences (a trie)."""
    transitions: dict[int, dict[int, int]] = {0: {}}
    accepting = []
    for member in members:
        state = 0
        for tok in member:
            row = transitions.setdefault(state, {})
            if tok not in row:
                row[tok] = len(transitions)
                transitions[row[tok]] = {}
            state = row[tok]
        accepting.append(state)
    return Grammar.from_transitions(transitions, accepting, vocab_size=V, eos_token_id=EOS)


def generated(model, grammar, seed=0, **kw):
    torch.manual_seed(seed)
    out = hf_fvo.generate(model, torch.tensor([PROMPT]), grammar=grammar, phi="uniform", **kw)
    return out[0, len(PROMPT) :].tolist()


@pytest.mark.parametrize("do_sample", [True, False])
def test_a_budget_shorter_than_every_member_is_refused_before_generating(small_model, do_sample):
    g = chain([3, 4, 5, 6])
    with pytest.raises(EmptyLanguageError, match=r"budget of 3 new .* needs 4 tokens plus EOS"):
        generated(small_model, g, max_new_tokens=3, do_sample=do_sample)


@pytest.mark.parametrize(
    "budget",
    [
        {"max_new_tokens": 3},
        {"generation_config": GenerationConfig(max_new_tokens=3, do_sample=True)},
        {"max_length": len(PROMPT) + 3},
        {},  # Transformers' default budget: 20 new tokens
    ],
    ids=["max_new_tokens", "generation_config", "max_length", "default"],
)
def test_the_budget_comes_from_wherever_transformers_takes_it(small_model, budget):
    # only the one-token member fits; the 30-token one would be cut off by any budget here
    g = chain([3], [4] * 30)
    kw = budget if "generation_config" in budget else {"do_sample": True, **budget}
    for seed in range(12):
        assert generated(small_model, g, seed, **kw) == [3, EOS]


@pytest.mark.parametrize("do_sample", [True, False])
def test_a_processor_removing_every_admissible_token_is_a_named_conflict(small_model, do_sample):
    g = chain([5, 5])  # no_repeat_ngram_size=1 bans the second 5
    with pytest.raises(ConstraintConflictError, match=r"NoRepeatNGram.*no_repeat_ngram_size"):
        generated(small_model, g, max_new_tokens=5, do_sample=do_sample, no_repeat_ngram_size=1)


@pytest.mark.parametrize(
    "option", [{"suppress_tokens": [EOS]}, {"bad_words_ids": [[EOS]]}], ids=["suppress", "bad"]
)
def test_banning_eos_is_refused_before_generating(small_model, option):
    with pytest.raises(ConstraintConflictError, match="ban every EOS"):
        generated(small_model, chain([3]), max_new_tokens=4, do_sample=True, **option)


def test_a_minimum_length_beyond_the_longest_member_is_refused(small_model):
    g = chain([3], [4, 4, 4])
    with pytest.raises(ConstraintConflictError, match=r"longest member .* has 3"):
        generated(small_model, g, max_new_tokens=10, min_new_tokens=5, do_sample=True)
    assert generated(small_model, g, max_new_tokens=10, min_new_tokens=3, do_sample=True) == [
        4, 4, 4, EOS,
    ]  # fmt: skip


def test_nan_scores_are_masked_off_the_admissible_set_and_refused_on_it():
    g = chain([3], [4, 5])
    proc = FVOLogitsProcessor(g, "uniform", prompt_length=1)
    ids = torch.tensor([[7]])
    clean = proc(ids, torch.zeros(1, V))
    for bad in (float("nan"), float("inf")):
        scores = torch.zeros(1, V)
        scores[0, 9] = bad  # token 9 is not admissible
        out = proc(ids, scores)  # the same law: only the (irrelevant) normaliser may shift
        assert not out.isnan().any()
        torch.testing.assert_close(out.softmax(-1), clean.softmax(-1), rtol=0, atol=1e-7)
        scores[0, 3] = bad  # token 3 is
        with pytest.raises(NonFiniteScoresError, match="admissible token 3"):
            proc(ids, scores)


def test_scores_with_no_admissible_token_left_are_a_conflict():
    g = chain([3], [4, 5])
    scores = torch.zeros(2, V)
    scores[0, [3, 4]] = -torch.inf  # what an earlier processor did to row 0
    with pytest.raises(ConstraintConflictError, match="admits 2 token"):
        FVOLogitsProcessor(g, "uniform", prompt_length=1)(torch.tensor([[7], [7]]), scores)
    # under beam search a dead row is a beam the search drops; a dead batch is a conflict
    beams = FVOLogitsProcessor(g, "uniform", prompt_length=1)
    beams.beam_search = True
    out = beams(torch.tensor([[7], [7]]), scores)
    assert not torch.isfinite(out[0]).any() and torch.isfinite(out[1]).sum() == 2
    scores[1, [3, 4]] = -torch.inf
    with pytest.raises(ConstraintConflictError):
        beams(torch.tensor([[7], [7]]), scores)


def test_a_grammar_for_another_vocabulary_or_tokenizer_is_refused(
    smol_tokenizer, sp_tokenizer, smol_model
):
    g = Grammar.from_choices(["yes", "no"], smol_tokenizer)
    ids = torch.tensor([[1, 5]])
    with pytest.raises(TokenizerError, match="scores 1000 token ids"):
        hf_fvo.generate(tiny_random_llama(1000), ids, grammar=g, max_new_tokens=4)
    with pytest.raises(TokenizerError, match="draft model scores 1000"):
        hf_fvo.generate(smol_model, ids, grammar=g, max_new_tokens=4,
                        assistant_model=tiny_random_llama(1000))  # fmt: skip
    other = Grammar.from_choices(["yes", "no"], sp_tokenizer, vocab_size=len(smol_tokenizer))
    with pytest.raises(TokenizerError, match="another tokenizer"):
        hf_fvo.generate(smol_model, ids, grammar=other, max_new_tokens=4, tokenizer=smol_tokenizer)
    with pytest.raises(TokenizerError, match="another tokenizer"):
        FVOLogitsProcessor(other, "uniform", tokenizer=smol_tokenizer)


def test_left_padding_never_enters_what_exact_phi_conditions_on(smol_tokenizer, smol_model):
    g = Grammar.from_choices(["yes", "no", "maybe"], smol_tokenizer)
    prompt, pad = [1, 9690, 28, 253], smol_tokenizer.eos_token_id
    scores = torch.randn(1, g.vocab_size, generator=torch.Generator().manual_seed(0))
    alone = FVOLogitsProcessor(g, "exact", smol_model)(torch.tensor([prompt]), scores)
    batch = torch.tensor([[pad, pad, *prompt], [5, 6, 7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    padded = FVOLogitsProcessor(g, "exact", smol_model, attention_mask=mask)(
        batch, scores.repeat(2, 1)
    )
    admissible = torch.isfinite(alone[0])
    assert torch.equal(admissible, torch.isfinite(padded[0]))
    torch.testing.assert_close(padded[0][admissible], alone[0][admissible], rtol=0, atol=1e-9)
    with pytest.raises(InvalidArgumentError, match="left padding"):
        FVOLogitsProcessor(g, "uniform", attention_mask=torch.tensor([[1, 0, 1]]))


def test_a_padded_batch_generates_members_in_every_row(smol_tokenizer, smol_model):
    g = Grammar.from_choices(["yes", "no"], smol_tokenizer, vocab_size=len(smol_tokenizer))
    pad = smol_tokenizer.eos_token_id
    ids = torch.tensor([[pad, pad, 1, 5], [1, 5, 6, 7]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    torch.manual_seed(0)
    out = hf_fvo.generate(smol_model, ids, grammar=g, phi="exact", attention_mask=mask,
                          max_new_tokens=4, do_sample=True)  # fmt: skip
    texts = smol_tokenizer.batch_decode(out[:, 4:], skip_special_tokens=True)
    assert set(texts) <= {"yes", "no"}


def test_continuing_a_partial_output_resumes_the_grammar(smol_tokenizer, smol_model):
    tok = smol_tokenizer
    g = Grammar.from_choices(["yes please", "no thanks"], tok, vocab_size=len(tok))
    prompt = [1, 9690, 28]
    partial = tok.encode("yes")
    ids = torch.tensor([prompt + partial])
    for seed in range(4):
        torch.manual_seed(seed)
        out = hf_fvo.generate(
            smol_model, ids, grammar=g, prompt_length=len(prompt), max_new_tokens=8,
            do_sample=True, return_dict_in_generate=True,
        )  # fmt: skip
        assert tok.decode(out.sequences[0, len(prompt) :], skip_special_tokens=True) == (
            "yes please"
        )
        new = out.sequences.shape[1] - ids.shape[1]
        assert len(out.certificates[0].steps) == new  # the new tokens' steps only
    with pytest.raises(OutOfGrammarError, match="continuation given as input"):
        hf_fvo.generate(smol_model, torch.tensor([prompt + tok.encode("maybe")]), grammar=g,
                        prompt_length=len(prompt), max_new_tokens=8)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="exceeds the input's width"):
        hf_fvo.generate(smol_model, ids, grammar=g, prompt_length=99, max_new_tokens=8)


@pytest.mark.parametrize(
    ("input_ids", "match"),
    [
        ([[1, 2]], "2-D torch.LongTensor"),
        (torch.tensor([1, 2]), "add the batch dimension"),
        (torch.tensor([[1.0, 2.0]]), "token ids"),
        (None, "needs input_ids"),
    ],
)
def test_input_ids_must_be_a_2d_integer_tensor(small_model, input_ids, match):
    with pytest.raises(InvalidArgumentError, match=match):
        hf_fvo.generate(small_model, input_ids, grammar=chain([3]), max_new_tokens=4)


def test_unknown_or_foreign_estimators_are_refused(small_model):
    g = chain([3])
    with pytest.raises(InvalidArgumentError, match="unknown phi 'exakt'"):
        hf_fvo.generate(small_model, torch.tensor([PROMPT]), grammar=g, phi="exakt")
    with pytest.raises(InvalidArgumentError, match="built for"):
        FVOLogitsProcessor(g, ExactPhi(chain([4]), small_model))


def test_exact_phi_on_a_language_too_wide_to_explore_stops_with_a_typed_error(
    smol_tokenizer, smol_model
):
    # [a-z]+ within 6 tokens: ~10⁴ admissible tokens per prefix under a near-uniform model
    g = Grammar.from_regex("[a-z]+", smol_tokenizer)
    phi = ExactPhi(g, smol_model, max_stored=300_000)
    with pytest.raises(GrammarTooLargeError, match=r"max_stored=300000 .* unexplored mass"):
        hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=g, phi=phi,
                        max_new_tokens=6, do_sample=True)  # fmt: skip
    with pytest.raises(GrammarTooLargeError, match="max_stored=300000"):
        sampling_law(g, smol_model, (1, 5), "uniform", max_new_tokens=6, max_stored=300_000)


def test_a_pushdown_budget_below_the_shortest_member_is_a_typed_error(smol_tokenizer, smol_model):
    # the shortest member, {"status":"done"}, is more than 3 tokens: refused, never cut off
    schema = {"type": "object", "properties": {"status": {"enum": ["pending", "done"]}},
              "required": ["status"]}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
    with pytest.raises(BudgetTooSmallError, match="budget of 3 new tokens"):
        hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=g, phi="uniform",
                        max_new_tokens=3, do_sample=True)  # fmt: skip


def test_a_budget_below_the_schemas_bound_is_refused_naming_the_bound(smol_tokenizer, smol_model):
    # every member has 10 002 bytes: no search for one, the schema's bound refuses 16 tokens
    g = Grammar.from_json_schema({"type": "string", "pattern": "(.{10}){1000}"}, smol_tokenizer)
    with pytest.raises(BudgetTooSmallError, match="needs at least 124 tokens plus EOS"):
        hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=g, phi="uniform",
                        max_new_tokens=16, do_sample=True)  # fmt: skip


def test_many_required_keys_refuse_a_budget_below_their_bound_in_either_key_order(
    smol_tokenizer, smol_model
):
    """Twelve required keys: a budget no member fits is refused with a proof before the first
    forward, in the schema's key order and in any order — whose masks leave the required keys
    to the final check, so only a bound that counts them can refuse (it was (1, 1): `{}`, which
    the check fails, fitted every budget). A budget that fits the built member is admitted;
    in the schema's order the output is complete and valid there."""
    names = [f"k{i}" for i in range(12)]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "required": names}  # fmt: skip
    calls: list[int] = []
    hook = smol_model.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        for key_order in ("schema", "any"):
            g = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="",
                                         key_order=key_order)  # fmt: skip
            lower, upper = g.shortest_bounds(g.initial_state)
            assert 2 * len(names) < lower <= upper, key_order  # ≥ 2 tokens a key
            witness = g.completion(g.initial_state)  # the masks' shortest text found
            assert (len(witness) == upper) == (key_order == "schema")
            assert (g.check(witness) is None) == (key_order == "schema")  # any: `{}`, refused
            with pytest.raises(BudgetTooSmallError, match=f"needs (at least )?{lower} tokens"):
                hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=g, phi="uniform",
                                max_new_tokens=lower, do_sample=False)  # fmt: skip
            assert not calls  # refused before the first forward
            assert g.budget_refusal(g.initial_state, upper + 1) is None
        refusal = g.budget_refusal(g.initial_state, lower)
        assert "passes its final check (#: properties)" in str(refusal)  # it names the check
        ordered = Grammar.from_json_schema(schema, smol_tokenizer, whitespace="")
        budget = ordered.shortest_bounds(ordered.initial_state)[1] + 1
        out = hf_fvo.generate(smol_model, torch.tensor([[1, 5]]), grammar=ordered,
                              max_new_tokens=budget, do_sample=False)  # fmt: skip
        text = smol_tokenizer.decode(out[0, 2:], skip_special_tokens=True)
        assert sorted(json.loads(text)) == sorted(names), text
    finally:
        hook.remove()
