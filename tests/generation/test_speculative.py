"""FVO-Spec through assisted generation: the verifier's target decides the law, the draft only the
speed.

Sampling tests use thresholds from the null distribution (the 95th percentile of TV between N
draws from the exact law and the law itself) with a power check against the other law, as in
test_sampling_laws.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LogitsProcessorList

import hf_fvo
from hf_fvo import CUSTOM_GENERATE
from hf_fvo.errors import InvalidArgumentError
from hf_fvo.eval import empirical_tv, null_tv_percentiles
from hf_fvo.generation import FVOLogitsProcessor, GrammarAwareCandidateGenerator
from hf_fvo.models.cache import output_cache
from hf_fvo.phi import ExactPhi
from tests.generation.finite import MAX_NEW, PROMPT, N, finite_setting
from tests.lms import tiny_llama


@pytest.fixture(scope="module")
def setting(sp_tokenizer):
    """(target, draft, grammar, μ*, μ_proj): the draft is another random model."""
    target, grammar, star, proj = finite_setting(sp_tokenizer, seed=1)
    draft = tiny_llama(len(sp_tokenizer), sp_tokenizer.eos_token_id, seed=2)
    return target, draft, grammar, star, proj


def _spec(target, draft, grammar, phi, n=1, seed=0, **kwargs):
    """n FVO-Spec samples (batch 1, as assisted generation requires) and their stats."""
    torch.manual_seed(seed)
    ids = torch.tensor([PROMPT])
    samples, stats = [], []
    for _ in range(n):
        out = hf_fvo.generate(
            target, ids, grammar=grammar, phi=phi, assistant_model=draft,  # None: grammar only
            max_new_tokens=MAX_NEW, return_dict_in_generate=True, **kwargs,
        )  # fmt: skip
        row = out.sequences[0, len(PROMPT) :].tolist()
        samples.append(tuple(row[: row.index(grammar.eos_token_id) + 1]))
        stats.append(out.speculation)
    return samples, stats


@pytest.mark.parametrize(
    ("phi", "draft_kwargs", "law", "other"),
    [
        ("exact", {"draft_phi": "onestep"}, 3, 4),  # Φ̂-reweighted draft, exact verifier → μ*
        ("uniform", {"blind_draft": True}, 4, 3),  # unconstrained draft, masking verifier → μ_proj
    ],
)
def test_assisted_sampling_draws_the_verifiers_law(setting, phi, draft_kwargs, law, other):
    target, draft, grammar = setting[:3]
    if phi == "exact":  # one exploration shared by the N calls
        phi = ExactPhi(grammar, target, tol=0.0)
    samples, stats = _spec(
        target, draft, grammar, phi, n=N, do_sample=True, top_k=0, num_assistant_tokens=3,
        **draft_kwargs,
    )  # fmt: skip
    p95, _ = null_tv_percentiles(setting[law], N, seed=1)
    _, p99_other = null_tv_percentiles(setting[other], N, seed=2)
    assert empirical_tv(samples, setting[law]) <= p95
    assert empirical_tv(samples, setting[other]) > p99_other  # the test has power
    accepted = sum(sum(s.accepted) for s in stats)
    offered = sum(sum(s.proposed) + sum(s.free) for s in stats)
    assert 0 < accepted < offered  # drafts are used, not all kept


@pytest.mark.parametrize("phi", ["uniform", "onestep", "exact"])
def test_greedy_assisted_output_equals_plain_greedy(setting, sp_tokenizer, phi):
    grammar, eos = setting[2], sp_tokenizer.eos_token_id
    # float64 copies: no near-ties that the two paths' rounding could break differently
    target64 = tiny_llama(len(sp_tokenizer), eos, seed=1).double()
    draft64 = tiny_llama(len(sp_tokenizer), eos, seed=2).double()
    for prompt in (PROMPT, (1, 7), (1, 4, 4, 8)):
        ids = torch.tensor([prompt])
        plain = hf_fvo.generate(
            target64, ids, grammar=grammar, phi=phi, max_new_tokens=MAX_NEW, do_sample=False
        )
        spec = hf_fvo.generate(
            target64, ids, grammar=grammar, phi=phi, assistant_model=draft64,
            max_new_tokens=MAX_NEW, do_sample=False,
        )  # fmt: skip
        assert torch.equal(plain, spec)


def test_identical_draft_is_always_accepted_under_temperature(setting):
    """The draft reports the distribution it sampled, with the target's warpers applied once:
    with the target's own weights and Φ̂ every token passes (with warpers applied twice, as
    Transformers does by default, temperature 0.5 becomes 0.25 and tokens get rejected).
    OneStep reads each model's own logits, so the two laws are the same (under exact Φ the
    table, not the draft model, would propose: see the table-draft tests below); the grammar's
    point-mass runs are off, as they are accepted with probability μ̂_t(token) only."""
    target, _, grammar = setting[:3]
    _, stats = _spec(
        target, target, grammar, "onestep", n=40, do_sample=True, temperature=0.5, top_k=0,
        draft_phi="same", num_assistant_tokens=4, grammar_draft=False,
    )  # fmt: skip
    assert sum(sum(s.proposed) for s in stats) > 40
    for s in stats:  # every candidate is kept
        assert s.accepted == s.drafted == [p + f for p, f in zip(s.proposed, s.free, strict=True)]


def test_round_counts_add_up_to_the_output(setting):
    target, draft, grammar = setting[:3]
    samples, stats = _spec(
        target, draft, grammar, "onestep", n=30, do_sample=True, num_assistant_tokens=2
    )
    for seq, s in zip(samples, stats, strict=True):
        assert len(seq) == sum(s.emitted)
        rounds = zip(s.accepted, s.emitted, s.drafted, s.proposed, s.free, strict=True)
        # each round: the accepted drafts plus the target's token, unless an accepted EOS ended
        # it; the draft model proposes at most 2, the grammar spells out the rest for free
        assert all(a <= e <= a + 1 and a <= d <= p + f and p <= 2 for a, e, d, p, f in rounds)
        assert 0.0 <= s.acceptance_rate <= 1.0


def test_blind_drafts_are_cut_at_their_first_inadmissible_token(setting):
    target, draft, grammar = setting[:3]
    samples, stats = _spec(
        target, draft, grammar, "uniform", n=30, do_sample=True, blind_draft=True,
        num_assistant_tokens=3,
    )  # fmt: skip
    assert all(seq in setting[4].probs for seq in samples)  # still in the language
    assert any(d < p for s in stats for d, p in zip(s.drafted, s.proposed, strict=True))


def test_draft_samples_only_admissible_tokens(setting):
    target, draft, grammar = setting[:3]
    _, stats = _spec(target, draft, grammar, "uniform", n=30, do_sample=True)
    for s in stats:
        assert s.drafted == [p + f for p, f in zip(s.proposed, s.free, strict=True)]


def test_custom_generate_recipe_matches_hf_fvo_generate(setting):
    target, draft, grammar = setting[:3]
    ids = torch.tensor([PROMPT])
    expected = hf_fvo.generate(
        target, ids, grammar=grammar, phi="exact", assistant_model=draft,
        max_new_tokens=MAX_NEW, do_sample=False,
    )  # fmt: skip
    out = target.generate(
        ids, custom_generate=CUSTOM_GENERATE, trust_remote_code=True, grammar=grammar,
        phi="exact", assistant_model=draft, max_new_tokens=MAX_NEW, do_sample=False,
    )  # fmt: skip
    assert torch.equal(out, expected)


def test_custom_generate_recipe_keeps_draft_phi_none(setting):
    """draft_phi=None (a mask-only draft) reaches hf_fvo.generate through the recipe instead of
    being dropped as unset (which would mean "auto": the verifier's OneStep on the draft)."""
    target, draft, grammar = setting[:3]
    ids = torch.tensor([PROMPT])
    kw = {"grammar": grammar, "phi": "onestep", "assistant_model": draft, "do_sample": True,
          "max_new_tokens": MAX_NEW, "return_dict_in_generate": True}  # fmt: skip

    torch.manual_seed(3)
    out = target.generate(ids, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
                          draft_phi=None, **kw)  # fmt: skip
    torch.manual_seed(3)
    expected = hf_fvo.generate(target, ids, draft_phi=None, **kw)
    assert torch.equal(out.sequences, expected.sequences)
    assert out.speculation.proposed == expected.speculation.proposed


def test_bad_speculative_input_is_refused(setting):
    target, draft, grammar = setting[:3]
    ids = torch.tensor([PROMPT])
    with pytest.raises(ValueError, match="need assistant_model"):
        hf_fvo.generate(target, ids, grammar=grammar, draft_phi="onestep", max_new_tokens=4)
    with pytest.raises(InvalidArgumentError, match="num_assistant_tokens must be an int ≥ 1"):
        hf_fvo.generate(
            target, ids, grammar=grammar, assistant_model=draft, num_assistant_tokens=0,
            max_new_tokens=4,
        )  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="grammar_draft must be True, False or None"):
        hf_fvo.generate(target, ids, grammar=grammar, grammar_draft="yes", max_new_tokens=4)
    with pytest.raises(InvalidArgumentError, match="cannot run with use_cache=False"):
        hf_fvo.generate(target, ids, grammar=grammar, assistant_model=draft, use_cache=False,
                        max_new_tokens=4)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="output_scores with speculative decoding"):
        hf_fvo.generate(
            target, ids.repeat(2, 1), grammar=grammar, assistant_model=draft, max_new_tokens=4,
            output_scores=True, return_dict_in_generate=True,
        )  # fmt: skip


def test_grammar_only_draft_draws_the_verifiers_law(setting):
    """No draft model: the grammar's point-mass proposals (some of them rejected: after "a" the
    grammar spells "b" or "bc", and "bc" is proposed) leave the verifier's law unchanged (here
    masking's, μ_proj: its estimator knows no law without a forward, so the proposals are the
    grammar's runs)."""
    target, _, grammar = setting[:3]
    samples, stats = _spec(target, None, grammar, "uniform", n=N, do_sample=True, top_k=0,
                           grammar_draft=True)  # fmt: skip
    p95, _ = null_tv_percentiles(setting[4], N, seed=1)
    _, p99_other = null_tv_percentiles(setting[3], N, seed=2)
    assert empirical_tv(samples, setting[4]) <= p95
    assert empirical_tv(samples, setting[3]) > p99_other
    free = sum(sum(s.free) for s in stats)
    assert sum(sum(s.proposed) for s in stats) == 0  # no draft model ran
    assert 0 < sum(sum(s.accepted) for s in stats) < free  # proposals used, some rejected


def test_exact_tables_draft_the_whole_output_and_keep_the_law(setting):
    """With exact Φ the grammar-only drafts come from the explored table, which holds μ*_t
    itself (the exploration's forwards times Φ): the verifier samples μ*, every proposal
    passes (the proposal is the target up to float rounding between batched and incremental
    forwards) and one target forward verifies a whole output (at most MAX_NEW + 1 tokens)."""
    target, _, grammar = setting[:3]
    phi = ExactPhi(grammar, target, tol=0.0)
    phi.root_exploration(PROMPT)  # else the first call's first round has no table to draw from
    samples, stats = _spec(target, None, grammar, phi, n=N, do_sample=True, top_k=0)
    p95, _ = null_tv_percentiles(setting[3], N, seed=1)
    _, p99_other = null_tv_percentiles(setting[4], N, seed=2)
    assert empirical_tv(samples, setting[3]) <= p95
    assert empirical_tv(samples, setting[4]) > p99_other
    assert all(s.proposed == [0] and s.free == s.accepted for s in stats)
    assert all(s.emitted[0] == len(seq) for s, seq in zip(stats, samples, strict=True))


def test_exact_tables_take_the_draft_models_place(setting):
    """With a draft model too, the explored table proposes where it knows μ*_t: the draft model
    never runs, every proposal passes, and the law stays μ*."""
    target, draft, grammar = setting[:3]
    phi = ExactPhi(grammar, target, tol=0.0)
    phi.root_exploration(PROMPT)
    samples, stats = _spec(target, draft, grammar, phi, n=1000, do_sample=True, top_k=0)
    p95, _ = null_tv_percentiles(setting[3], 1000, seed=1)
    _, p99_other = null_tv_percentiles(setting[4], 1000, seed=2)
    assert empirical_tv(samples, setting[3]) <= p95
    assert empirical_tv(samples, setting[4]) > p99_other
    assert all(s.proposed == [0] and s.free == s.accepted for s in stats)


def test_exact_table_drafts_follow_the_verifiers_temperature(setting):
    """At temperature T the table proposes from μ*_t^{1/T}, the verifier's warped law: every
    proposal still passes (a T = 1 proposal would be rejected where the laws differ)."""
    target, _, grammar = setting[:3]
    phi = ExactPhi(grammar, target, tol=0.0)
    phi.root_exploration(PROMPT)
    _, stats = _spec(target, None, grammar, phi, n=200, do_sample=True, top_k=0,
                     temperature=0.5)  # fmt: skip
    assert all(s.proposed == [0] and s.free == s.accepted for s in stats)


def test_grammar_runs_do_not_change_greedy_output(setting, sp_tokenizer):
    grammar, eos = setting[2], sp_tokenizer.eos_token_id
    target64 = tiny_llama(len(sp_tokenizer), eos, seed=1).double()
    for prompt in (PROMPT, (1, 7), (1, 4, 4, 8)):
        ids = torch.tensor([prompt])
        plain = hf_fvo.generate(target64, ids, grammar=grammar, phi="onestep", grammar_draft=False,
                                max_new_tokens=MAX_NEW, do_sample=False)  # fmt: skip
        free = hf_fvo.generate(target64, ids, grammar=grammar, phi="onestep", grammar_draft=True,
                               max_new_tokens=MAX_NEW, do_sample=False)  # fmt: skip
        assert torch.equal(plain, free)


def test_one_sequence_is_drafted_by_the_grammar_by_default(setting):
    """Without a draft model, a single sequence runs on the grammar's free drafts unless asked
    otherwise; batches, per-step outputs, caches assisted decoding refuses and
    grammar_draft=False decode plainly."""
    target, _, grammar = setting[:3]
    ids = torch.tensor([PROMPT])
    kw = {"max_new_tokens": MAX_NEW, "do_sample": True, "return_dict_in_generate": True}
    out = hf_fvo.generate(target, ids, grammar=grammar, **kw)
    assert out.speculation.rounds > 0 and sum(out.speculation.free) > 0
    plain = [
        hf_fvo.generate(target, ids, grammar=grammar, grammar_draft=False, **kw),
        hf_fvo.generate(target, ids.repeat(2, 1), grammar=grammar, **kw),
        hf_fvo.generate(target, ids, grammar=grammar, output_scores=True, **kw),
        hf_fvo.generate(target, ids, grammar=grammar, num_return_sequences=2, **kw),
        hf_fvo.generate(target, ids, grammar=grammar, use_cache=False, **kw),  # refused there
        hf_fvo.generate(target, ids, grammar=grammar, cache_implementation="static", **kw),
    ]
    assert all("speculation" not in o for o in plain)
    assert len(plain[2].scores) == plain[2].sequences.shape[1] - len(PROMPT)


def test_a_stateful_model_drafts_only_where_transformers_can_roll_its_state_back(sp_tokenizer):
    """Mamba keeps a recurrent state. Transformers up to 5.24 refuses assisted decoding for it
    (``_is_stateful``: the state could not be rolled back), so the default grammar drafts step
    aside and ``grammar_draft=True`` is refused by name; from 5.25 its cache records past states
    and rolls back as far as the candidate generator says a round proposes, so the drafts run,
    and greedy decoding with them (the grammar's runs; a draft model whose proposals are
    rejected, rolling back up to six tokens) writes what plain greedy writes. Either way the
    output is a member."""
    from transformers import MambaConfig, MambaForCausalLM

    from tests.generation.finite import CHOICES

    torch.manual_seed(0)
    config = MambaConfig(vocab_size=len(sp_tokenizer), hidden_size=16, state_size=4,
                         num_hidden_layers=1, eos_token_id=sp_tokenizer.eos_token_id,
                         tie_word_embeddings=False)  # fmt: skip
    model = MambaForCausalLM(config).eval()
    grammar = hf_fvo.Grammar.from_choices(CHOICES, sp_tokenizer, vocab_size=config.vocab_size)
    out = hf_fvo.generate(model, torch.tensor([PROMPT]), grammar=grammar, do_sample=True,
                          max_new_tokens=MAX_NEW, return_dict_in_generate=True)  # fmt: skip
    row = out.sequences[0, len(PROMPT) :].tolist()
    assert grammar.is_accepting(grammar.walk(row[: row.index(grammar.eos_token_id)]))
    if getattr(model, "_is_stateful", False):  # Transformers ≤ 5.24
        assert "speculation" not in out
        with pytest.raises(InvalidArgumentError, match="MambaForCausalLM is stateful"):
            hf_fvo.generate(model, torch.tensor([PROMPT]), grammar=grammar, grammar_draft=True,
                            max_new_tokens=MAX_NEW)  # fmt: skip
        return
    assert "speculation" in out
    draft = copy.deepcopy(model)  # the target's weights, its head perturbed
    with torch.no_grad():
        head = draft.get_output_embeddings().weight
        noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(1))
        head.add_(noise * 3 * head.std())
    pairs = hf_fvo.Grammar.from_regex("([abc][xyz]){6}", sp_tokenizer, vocab_size=config.vocab_size)
    settings = [(grammar, {"grammar_draft": True}),
                (pairs, {"assistant_model": draft, "num_assistant_tokens": 6})]  # fmt: skip
    for language, helper in settings:
        drafted, plain = (
            hf_fvo.generate(model, torch.tensor([PROMPT]), grammar=language, **kwargs,
                            do_sample=False, max_new_tokens=16, return_dict_in_generate=True)
            for kwargs in (helper, {"grammar_draft": False})
        )  # fmt: skip
        assert drafted.sequences.tolist() == plain.sequences.tolist()
    rounds = drafted.speculation
    assert max(p - a for p, a in zip(rounds.proposed, rounds.accepted, strict=True)) >= 2


BATCH_PROMPTS = [(1, 5, 9), (1, 7), (1, 4, 4, 8), (1, 6, 3)]
N_BATCH = 1000  # batches per law test (each row gets that many draws; TV(μ*, μ_proj) ≥ 0.69 here)


def test_batch_of_prompts_samples_each_rows_own_law(setting, sp_tokenizer):
    """Four prompts of different lengths, left-padded into one batch through FVO-Spec: each row
    is a draw of μ* for its own prompt (and not of its μ_proj). Four rows are four tests: each
    uses the 1 − 0.05/4 quantile of its null TV (Bonferroni), so the family fails a correct
    sampler with probability ≤ 5 %."""
    from hf_fvo.eval import grammar_conditional_law, sampling_law

    target, draft, grammar = setting[:3]
    width = max(map(len, BATCH_PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in BATCH_PROMPTS])
    mask = torch.arange(width) >= torch.tensor([width - len(p) for p in BATCH_PROMPTS])[:, None]
    phi = ExactPhi(grammar, target, tol=0.0)
    torch.manual_seed(0)
    rows: list[list[tuple[int, ...]]] = [[] for _ in BATCH_PROMPTS]
    for _ in range(N_BATCH):
        out = hf_fvo.generate(target, ids, attention_mask=mask.long(), grammar=grammar, phi=phi,
                              assistant_model=draft, max_new_tokens=MAX_NEW, do_sample=True,
                              top_k=0, num_assistant_tokens=2)  # fmt: skip
        for r, row in enumerate(out[:, width:].tolist()):
            rows[r].append(tuple(row[: row.index(grammar.eos_token_id) + 1]))
    for r, prompt in enumerate(BATCH_PROMPTS):
        star = grammar_conditional_law(grammar, target, prompt, max_new_tokens=MAX_NEW)
        proj = sampling_law(grammar, target, prompt, "uniform", max_new_tokens=MAX_NEW)
        (bound,) = null_tv_percentiles(star, N_BATCH, q=(1 - 0.05 / 4,), reps=2000, seed=1 + r)
        _, p99_other = null_tv_percentiles(proj, N_BATCH, seed=11 + r)
        assert empirical_tv(rows[r], star) <= bound, prompt
        assert empirical_tv(rows[r], proj) > p99_other, prompt
    with pytest.raises(ValueError, match="needs grammar="):
        target.generate(ids, custom_generate=CUSTOM_GENERATE, trust_remote_code=True)
    processors = LogitsProcessorList([])
    with pytest.raises(ValueError, match="exactly one FVOLogitsProcessor"):
        GrammarAwareCandidateGenerator(
            ids, draft, target.generation_config, {}, logits_processor=processors
        )
    both = LogitsProcessorList([FVOLogitsProcessor(grammar), FVOLogitsProcessor(grammar)])
    with pytest.raises(ValueError, match="found 2"):
        GrammarAwareCandidateGenerator(
            ids, draft, target.generation_config, {}, logits_processor=both
        )


def test_draft_reweights_with_the_verifiers_estimator_by_default(setting):
    """draft_phi="auto": the verifier's own Φ̂ object where it is cheap at draft positions (no
    forwards of its own, or an exact table), the mask alone where it runs the model."""
    from hf_fvo.generation.speculative import _draft_processor

    target, draft, grammar = setting[:3]
    for phi in ("onestep", ExactPhi(grammar, target, tol=0.0)):
        proc = FVOLogitsProcessor(grammar, phi=phi, model=target, prompt_length=len(PROMPT))
        assert _draft_processor(proc, "auto", draft).estimator is proc.estimator
    costly = FVOLogitsProcessor(grammar, phi="onestep_true", model=target,
                                prompt_length=len(PROMPT))  # fmt: skip
    assert costly.estimator.needs_model
    assert _draft_processor(costly, "auto", draft).estimator.name == "uniform"
    assert _draft_processor(costly, None, draft).estimator.name == "uniform"


@pytest.mark.parametrize("draft_kwargs", [{"blind_draft": True}, {}])
def test_the_drafts_cache_holds_the_sequence_it_continues(setting, sp_tokenizer, draft_kwargs):
    """Each time the draft model drafts, the keys and values in its cache are those of the
    sequence it continues, as a fresh forward computes them. Our rounds add the grammar's
    spelled-out tokens around the draft's and cut its inadmissible ones, so a cache cropped by
    lengths alone (Transformers' rule) would keep the keys of tokens the sequence no longer
    holds. Sampling with a blind draft (cut at its first inadmissible token, then a spelled-out
    tail) and with a masked one, on a language with shared spelled-out stretches."""
    target, draft = setting[:2]
    grammar = hf_fvo.Grammar.from_choices(
        ["alphabet soup", "alpha beta gamma", "beta alphabet"], sp_tokenizer
    )
    checked = []

    def generate(input_ids, cache=None, **kwargs):
        held = 0 if cache is None else cache.get_seq_length()
        if held:
            fresh = output_cache(draft(input_ids[:, :held], use_cache=True))
            for mine, theirs in zip(cache.layers, fresh.layers, strict=True):
                torch.testing.assert_close(mine.keys[..., :held, :], theirs.keys)
                torch.testing.assert_close(mine.values[..., :held, :], theirs.values)
            checked.append(held)
        return type(draft).generate(draft, input_ids=input_ids, cache=cache, **kwargs)

    draft.generate = generate
    try:
        for seed in range(4):
            torch.manual_seed(seed)
            hf_fvo.generate(target, torch.tensor([PROMPT]), grammar=grammar, assistant_model=draft,
                            do_sample=True, max_new_tokens=24, **draft_kwargs)  # fmt: skip
    finally:
        del draft.generate
    assert len(checked) >= 2  # the draft continued from its cache
