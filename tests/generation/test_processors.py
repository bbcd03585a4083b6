"""GrammarLogitsProcessor: a pure function of input_ids that keeps generation in the grammar."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList

from hf_fvo import Grammar
from hf_fvo.errors import InvalidArgumentError, OutOfGrammarError, TokenizerError
from hf_fvo.generation import GrammarLogitsProcessor
from hf_fvo.models import tiny_random_llama

CHOICES = ["ok", "error", "not found"]


@pytest.fixture(scope="module")
def tiny_model(smol_tokenizer):
    # wider than the tokenizer, like many real models
    return tiny_random_llama(len(smol_tokenizer) + 32, eos_token_id=smol_tokenizer.eos_token_id)


def _generate(model, grammar, prompt, **kwargs):
    proc = GrammarLogitsProcessor(grammar, prompt_length=prompt.shape[1])
    out = model.generate(
        prompt, logits_processor=LogitsProcessorList([proc]), max_new_tokens=12, **kwargs
    )
    return out[:, prompt.shape[1] :]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"do_sample": False},
        {"do_sample": True, "temperature": 1.3, "top_k": 50},
        {"num_beams": 3, "do_sample": False},
    ],
    ids=["greedy", "sampling", "beam_search"],
)
def test_generation_lands_in_the_language(tiny_model, smol_tokenizer, kwargs):
    g = Grammar.from_choices(CHOICES, smol_tokenizer, vocab_size=tiny_model.config.vocab_size)
    torch.manual_seed(1)
    prompt = torch.tensor([[1, 100, 200, 300]])
    for _ in range(5):
        generated = _generate(tiny_model, g, prompt, **kwargs)[0].tolist()
        assert g.walk(generated) == g.terminal_state  # ends with EOS (then only EOS/pad)
        text = smol_tokenizer.decode(generated, skip_special_tokens=True)
        assert text in CHOICES


def test_processor_is_a_pure_function_of_the_prefix(smol_tokenizer):
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    proc = GrammarLogitsProcessor(g, prompt_length=1)
    ok = smol_tokenizer.encode("ok")
    prefixes = [[], ok[:1], ok, [*ok, g.eos_token_id], [*ok, g.eos_token_id, g.eos_token_id]]
    scores = torch.zeros(1, g.vocab_size)
    first = [proc(torch.tensor([[1, *p]]), scores.clone()) for p in prefixes]
    again = [proc(torch.tensor([[1, *p]]), scores.clone()) for p in reversed(prefixes)]
    for a, b, p in zip(first, reversed(again), prefixes, strict=True):
        assert torch.equal(a, b)
        state = g.walk(p) if p else g.initial_state
        assert torch.equal(torch.isfinite(a[0]), g.allowed(state))
    # after EOS only EOS remains legal, so a finished row never gets an all -inf row
    assert torch.isfinite(first[-1][0]).sum() == 1


def test_batch_rows_are_constrained_independently(smol_tokenizer):
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    proc = GrammarLogitsProcessor(g, prompt_length=1)
    e = smol_tokenizer.encode("error")[:1]
    n = smol_tokenizer.encode("not found")[:1]
    out = proc(torch.tensor([[1, e[0]], [1, n[0]]]), torch.zeros(2, g.vocab_size + 5))
    assert torch.equal(torch.isfinite(out[0, : g.vocab_size]), g.allowed(g.walk(e)))
    assert torch.equal(torch.isfinite(out[1, : g.vocab_size]), g.allowed(g.walk(n)))
    assert not torch.isfinite(out[:, g.vocab_size :]).any()


def test_prefix_outside_the_grammar_is_a_typed_error(smol_tokenizer):
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    proc = GrammarLogitsProcessor(g, prompt_length=1)
    bad = smol_tokenizer.encode("zzz")
    with pytest.raises(OutOfGrammarError, match="position 0"):
        proc(torch.tensor([[1, *bad]]), torch.zeros(1, g.vocab_size))


def test_scores_narrower_than_the_grammar_are_a_tokenizer_mismatch(smol_tokenizer):
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    with pytest.raises(TokenizerError, match="scores 100 token ids"):
        GrammarLogitsProcessor(g, prompt_length=1)(torch.tensor([[1]]), torch.zeros(1, 100))


def test_constructor_validates_its_arguments(smol_tokenizer):
    with pytest.raises(TypeError, match="Grammar"):
        GrammarLogitsProcessor("not a grammar")
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    with pytest.raises(ValueError, match="prompt_length"):
        GrammarLogitsProcessor(g, prompt_length=-1)
    with pytest.raises(InvalidArgumentError, match="max_new_tokens must be an int ≥ 1"):
        GrammarLogitsProcessor(g, max_new_tokens=0)
    with pytest.raises(InvalidArgumentError, match="cache_size"):
        GrammarLogitsProcessor(g, cache_size="big")


@pytest.mark.parametrize("phi", ["onestep", "exact"])
def test_fvo_processor_under_beam_search_and_assisted_generation(tiny_model, smol_tokenizer, phi):
    from hf_fvo.generation import FVOLogitsProcessor

    g = Grammar.from_choices(CHOICES, smol_tokenizer, vocab_size=tiny_model.config.vocab_size)
    prompt = torch.tensor([[1, 100, 200, 300]])

    def run(**kwargs):
        proc = FVOLogitsProcessor(g, phi, tiny_model, prompt_length=4, max_new_tokens=12)
        out = tiny_model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                  logits_processor=LogitsProcessorList([proc]),
                                  max_new_tokens=12, do_sample=False, **kwargs)  # fmt: skip
        return out[0, 4:].tolist()

    greedy = run()
    assert smol_tokenizer.decode(greedy, skip_special_tokens=True) in CHOICES
    beams = run(num_beams=3)
    assert g.walk(beams) == g.terminal_state
    # the processor is prefix-pure, so the draft's discarded prefixes cannot change the result
    assert run(assistant_model=tiny_model) == greedy


def test_processor_keeps_scalar_diagnostics_per_prefix(smol_tokenizer):
    from hf_fvo.generation import FVOLogitsProcessor
    from hf_fvo.phi import PhiDiagnostics

    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    proc = FVOLogitsProcessor(g, "onestep", prompt_length=1)
    logits = torch.randn(1, g.vocab_size, generator=torch.Generator().manual_seed(0))
    proc(torch.tensor([[1]]), logits)
    diag = proc.step_at(())
    assert isinstance(diag, PhiDiagnostics) and 0.0 < diag.mean_phi <= 1.0
    assert diag.dispersion > 0 and diag.delta is None and diag.tv_bound == float("inf")
    assert proc.step_at((5,)) is None


def test_generate_wrapper_rejects_bad_arguments(tiny_model, smol_tokenizer):
    import hf_fvo

    g = Grammar.from_choices(CHOICES, smol_tokenizer, vocab_size=tiny_model.config.vocab_size)
    prompt = torch.tensor([[1, 100]])
    with pytest.raises(ValueError, match="unknown phi"):
        hf_fvo.generate(tiny_model, prompt, grammar=g, phi="magic", max_new_tokens=4)
    with pytest.raises(ValueError, match="input_ids"):
        hf_fvo.generate(tiny_model, grammar=g, max_new_tokens=4)
    infinite = Grammar.from_regex(r"(ab)+", smol_tokenizer, vocab_size=tiny_model.config.vocab_size)
    proc = hf_fvo.FVOLogitsProcessor(infinite, "exact", tiny_model, prompt_length=2)
    with pytest.raises(ValueError, match="infinite"):
        proc(prompt, torch.zeros(1, tiny_model.config.vocab_size))


def test_default_estimator_is_masking_the_one_never_worse_than_masking(smol_tokenizer):
    # onestep drove open real schemas to the token cap (docs/benchmarks.md); until an estimator
    # beats masking on every benchmark row, hf_fvo.generate and the processor default to it
    import inspect

    import hf_fvo
    from hf_fvo.generation import FVOLogitsProcessor

    g = Grammar.from_choices(["yes", "no"], smol_tokenizer)
    assert FVOLogitsProcessor(g, prompt_length=1).estimator.name == "uniform"
    assert inspect.signature(hf_fvo.generate).parameters["phi"].default == "uniform"


def test_pushdown_processor_keeps_a_bounded_number_of_parser_snapshots(smol_tokenizer):
    """A pushdown state holds an llguidance parser snapshot (megabytes): a long output must not
    keep one per prefix (16 rows × 256 tokens kept 10 GB), and an evicted prefix is rebuilt
    with the same admissible set."""
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, smol_tokenizer,
                                 whitespace="")  # fmt: skip
    kept = g.states_kept
    ids = smol_tokenizer.encode("[" + ",".join(["7"] * 200))
    proc = GrammarLogitsProcessor(g, prompt_length=0)
    first = {}
    for end in range(1, len(ids) + 1):
        out = proc(torch.tensor([ids[:end]]), torch.zeros(1, g.vocab_size))
        if end <= 3:
            first[end] = torch.isfinite(out)
    assert kept is not None and len(ids) > kept and len(proc.tracker._states) <= kept
    for end, mask in first.items():  # long evicted: rebuilt from the root
        assert torch.equal(
            torch.isfinite(proc(torch.tensor([ids[:end]]), torch.zeros(1, g.vocab_size))), mask
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_masking_keeps_the_scores_on_the_admissible_set_in_every_dtype(smol_tokenizer, dtype):
    # masking adds a 0/−inf bias on a CPU (float32/16, bfloat16) and uses torch.where otherwise:
    # either way the admissible scores pass bit for bit, the rest are −inf, and a NaN or +inf
    # outside A_t never leaks into the output
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, smol_tokenizer,
                                 "", vocab_size=len(smol_tokenizer) + 8)  # fmt: skip
    proc = GrammarLogitsProcessor(g, prompt_length=1, max_new_tokens=40)
    prefix = smol_tokenizer.encode("[12,")
    mask = g.admissible(g.walk(prefix), 40 - len(prefix))
    scores = torch.randn(2, g.vocab_size + 3, generator=torch.Generator().manual_seed(0))
    scores = scores.to(dtype)
    outside = (~mask).nonzero().flatten()
    scores[1, outside[:50]] = torch.nan
    scores[1, outside[50:60]] = torch.inf
    scores[1, -1] = torch.nan  # past the grammar's vocabulary
    out = proc(torch.tensor([[1, *prefix]] * 2), scores.clone())
    assert out.dtype == dtype
    for row in range(2):
        assert torch.equal(out[row, : g.vocab_size][mask], scores[row, : g.vocab_size][mask])
        assert bool(torch.isneginf(out[row, : g.vocab_size][~mask]).all())
        assert bool(torch.isneginf(out[row, g.vocab_size :]).all())
