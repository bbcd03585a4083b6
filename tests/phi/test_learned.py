"""Learned Φ: the estimator contract, Hub I/O (safetensors only, offline cache), typed refusals
for the wrong tokenizer or base model, the features' exactness where they claim it, and that
training lowers TV to μ* on grammars and LMs it did not see."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from hf_fvo import Grammar
from hf_fvo.errors import OutsideTrainingWarning, WeightsMismatchError
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models import MarkovLM, tiny_random_llama
from hf_fvo.phi import LearnedPhi, MarkovExactPhi, PhiContext, PhiModel, make_estimator
from hf_fvo.phi.features import FEATURE_NAMES, candidate_features
from hf_fvo.phi.learned import DEFAULT_WEIGHTS, model_fingerprint
from hf_fvo.training.fit import path_brier, step_tv, train_phi_model
from hf_fvo.training.labels import labels_dataset, markov_labels, path_labels
from tests.phi.conformance import EstimatorConformance
from tests.phi.conformance import world as world  # the shared fixture


def random_weights(seed: int = 0, **config) -> PhiModel:
    torch.manual_seed(seed)
    net = PhiModel(hidden=8, **config)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()
        # inputs of order 1, as training's standardisation makes them (log-features reach
        # LOG_FLOOR = −40, which would saturate a random network into a constant)
        net.scale.fill_(40.0)
    return net


class TestLearned(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        return LearnedPhi(grammar, weights=random_weights(domain="any"))


class TestLearnedFiniteOnly(EstimatorConformance):
    varies = "somewhere"  # scores finite grammars, masks (with a warning) the others

    def make(self, grammar, model):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OutsideTrainingWarning)
            return LearnedPhi(grammar, weights=random_weights())


def test_save_and_load_round_trip_bit_for_bit(tmp_path):
    net = random_weights(3, base_model="m", tokenizers=["t"], training={"positions": 5})
    net.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "README.md", "config.json", "model.safetensors"]  # fmt: skip
    back = PhiModel.from_pretrained(tmp_path)
    a, b = net.state_dict(), back.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert back.config == net.config
    card = (tmp_path / "README.md").read_text()
    assert "Base model: m" in card and "positions" in card and "library_name: hf-fvo" in card


def test_retrained_weights_rewrite_their_model_card_but_not_a_users(tmp_path):
    random_weights(training={"positions": 5}).save_pretrained(tmp_path)
    random_weights(training={"positions": 7}).save_pretrained(tmp_path)
    assert "positions: 7" in (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text("my own card")
    random_weights(training={"positions": 9}).save_pretrained(tmp_path)
    assert (tmp_path / "README.md").read_text() == "my own card"


def test_only_safetensors_are_loaded(tmp_path):
    net = random_weights()
    net.save_pretrained(tmp_path)
    torch.save(net.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(WeightsMismatchError, match=r"model\.safetensors"):
        PhiModel.from_pretrained(tmp_path)


def test_a_hub_id_resolves_from_the_offline_cache(tmp_path, monkeypatch):
    # huggingface_hub's cache layout: models--org--name/{refs/main, snapshots/<commit>/...}
    net = random_weights(5)
    commit = "0" * 40
    snap = tmp_path / "models--org--phi" / "snapshots" / commit
    net.save_pretrained(snap)
    (tmp_path / "models--org--phi" / "refs").mkdir()
    (tmp_path / "models--org--phi" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    back = PhiModel.from_pretrained("org/phi", cache_dir=tmp_path)
    a, b = net.state_dict(), back.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_wrong_tokenizer_or_base_model_is_a_typed_error(sp_tokenizer):
    g = Grammar.from_choices(["ab", "b"], sp_tokenizer)
    with pytest.raises(WeightsMismatchError, match="tokenizers"):
        LearnedPhi(g, weights=random_weights(tokenizers=["another tokenizer"]))
    net = random_weights(tokenizers=[g.tokenizer_fingerprint], base_models=["llama:0000"])
    with pytest.raises(WeightsMismatchError, match="not for this model"):
        LearnedPhi(g, tiny_random_llama(len(sp_tokenizer)), weights=net)
    LearnedPhi(g, weights=net)  # no model given: only the tokenizer is checked
    with pytest.raises(WeightsMismatchError, match="features"):
        PhiModel(feature_names=["something else"])


def test_shipped_weights_refuse_other_models_and_tokenizers(sp_tokenizer):
    config = json.loads((DEFAULT_WEIGHTS / "config.json").read_text())
    assert config["base_models"] and config["tokenizers"]
    g = Grammar.from_choices(["ab", "b"], sp_tokenizer)
    with pytest.raises(WeightsMismatchError):
        make_estimator("learned", g)


def test_shipped_weights_load_for_the_embedded_model():
    from hf_fvo.models import load_default_model, load_default_tokenizer

    tok, model = load_default_tokenizer(), load_default_model()
    g = Grammar.from_json_schema({"enum": ["yes", "no"]}, tok, whitespace="",
                                 vocab_size=model.config.vocab_size)  # fmt: skip
    est = make_estimator("learned", g, model)
    assert isinstance(est, LearnedPhi) and model_fingerprint(model) in est.weights.base_models
    row = est.log_phi(PhiContext(g.initial_state, (), torch.zeros(model.config.vocab_size), 8))
    assert torch.isfinite(row).any() and not torch.isnan(row).any() and (row <= 0).all()


def test_phi_iid_is_exact_phi_when_the_lm_is_context_free():
    # Under an LM whose every row is the same, "every future token ~ p_t" is the LM itself.
    p1, e = 0.6, 0.1
    lm = MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3, eos_token_id=2)
    g = Grammar.budget(12, 5, zero=0, one=1, eos_token_id=2, vocab_size=3)
    exact = MarkovExactPhi(g, lm)
    state, generated = g.initial_state, ()
    for tok in (1, 1, 0, 1, 0):
        ctx = PhiContext(state, generated, lm.log_probs[0], 13 - len(generated), (0,))
        f = candidate_features(g, ctx)
        true = exact.log_phi(ctx)[f.tokens].float()
        assert torch.allclose(f.features[:, FEATURE_NAMES.index("log_phi_iid")], true, atol=1e-5)
        state, generated = g.next_state(state, tok), (*generated, tok)


@pytest.mark.parametrize("backend", ["automaton", "pushdown"])
def test_extension_feature_marks_splits_the_tokenizer_would_merge(backend):
    # with equal logits, feature 11 is log(#admissible tokens strictly extending the candidate's
    # bytes), LOG_FLOOR where none does: "EN" is extended by the longer admissible tokens
    from hf_fvo.models import load_default_tokenizer
    from hf_fvo.phi.features import LOG_FLOOR

    tok = load_default_tokenizer()
    g = Grammar.from_json_schema({"enum": ["ENABLED", "DISABLED"]}, tok, whitespace="",
                                 backend=backend)  # fmt: skip
    state = g.walk(tok.encode('"'))
    f = candidate_features(g, PhiContext(state, (), torch.zeros(g.vocab_size), 12),
                           coverage=1.0, max_candidates=1000)  # fmt: skip
    texts = {int(t): g.vocabulary.token_bytes[int(t)] for t in g.admissible(state, 11).nonzero()}
    column = f.features[:, FEATURE_NAMES.index("log_extensions")]
    assert len(f.tokens) == len([t for t in texts if t not in g.eos_token_ids])
    for y, value in zip(f.tokens.tolist(), column.tolist(), strict=True):
        longer = sum(1 for t, b in texts.items() if b and b != texts[y] and b.startswith(texts[y]))
        assert value == pytest.approx(math.log(longer) if longer else LOG_FLOOR, abs=1e-5), y
    assert (column > LOG_FLOOR).any() and (column == LOG_FLOOR).any()


def test_pushdown_grammars_score_the_mass_and_report_the_rest():
    from hf_fvo.models import load_default_tokenizer

    tok = load_default_tokenizer()
    g = Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string"}}},
                                 tok, whitespace="")  # fmt: skip
    state = g.walk(tok.encode('{"s":"'))
    est = LearnedPhi(g, weights=random_weights(domain="any"))
    logits = torch.randn(g.vocab_size, generator=torch.Generator().manual_seed(0))
    step = est.step(PhiContext(state, (), logits, 30))
    finite = torch.isfinite(step.log_phi)
    assert torch.equal(finite, g.admissible(state, 30))
    assert 0 < step.diagnostics.unscored < 1  # a string admits thousands of tokens
    f = candidate_features(g, PhiContext(state, (), logits, 30))
    assert (f.features[:, FEATURE_NAMES.index("iid_available")] == 0).all()


def test_weights_trained_on_finite_languages_mask_open_grammars_and_say_so(tmp_path):
    # the shipped weights' labels come from finite languages; on open schemas they drove most
    # outputs to the token cap (docs/benchmarks.md), so there the estimator is masking
    from hf_fvo.models import load_default_tokenizer
    from hf_fvo.phi import UniformPhi

    tok = load_default_tokenizer()
    open_g = Grammar.from_json_schema({"type": "object", "properties": {"n": {"type": "number"}}},
                                      tok, whitespace="")  # fmt: skip
    with pytest.warns(OutsideTrainingWarning, match="finite languages only"):
        est = LearnedPhi(open_g, weights=random_weights())
    state = open_g.walk(tok.encode('{"n":1'))
    logits = torch.randn(open_g.vocab_size, generator=torch.Generator().manual_seed(1))
    ctx = PhiContext(state, (), logits, 30)
    step = est.step(ctx)
    assert est.is_masking and torch.equal(step.log_phi, UniformPhi(open_g).log_phi(ctx))
    assert step.diagnostics == UniformPhi(open_g).step(ctx).diagnostics
    # so sampling is masking's: seeded alike, the same draws as phi="uniform" bit for bit
    # (loading the weights must not consume the random stream either)
    import hf_fvo
    from hf_fvo.models import tiny_random_llama

    random_weights().save_pretrained(tmp_path)
    model = tiny_random_llama(open_g.vocab_size)
    draws = []
    for make in (lambda: "uniform", lambda: LearnedPhi.from_pretrained(tmp_path, open_g)):
        torch.manual_seed(4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OutsideTrainingWarning)
            phi = make()
        draws.append(hf_fvo.generate(model, torch.tensor([[1, 2]] * 8), grammar=open_g, phi=phi,
                                     max_new_tokens=48, do_sample=True, top_k=0))  # fmt: skip
    assert torch.equal(*draws)
    # the same weights told they cover any grammar score it (and differ from masking)
    anywhere = LearnedPhi(open_g, weights=random_weights(domain="any")).log_phi(ctx)
    assert not torch.equal(anywhere, step.log_phi)
    # a finite schema on the default (pushdown) backend is inside: scored, no warning
    finite_g = Grammar.from_json_schema({"type": "object", "properties": {
        "level": {"enum": ["low", "high", "highest"]}}, "required": ["level"]}, tok,
        whitespace="")  # fmt: skip
    assert finite_g.backend == "pushdown" and finite_g.is_finite is True
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideTrainingWarning)
        inside = LearnedPhi(finite_g, weights=random_weights())
    state = finite_g.walk(tok.encode('{"level":"'))
    row = inside.log_phi(PhiContext(state, (), logits, 30))
    assert torch.isfinite(row).sum() >= 2 and not torch.equal(
        row, UniformPhi(finite_g).log_phi(PhiContext(state, (), logits, 30))
    )


def test_phi_learned_picks_the_shipped_weights_by_the_grammar(sp_tokenizer):
    # finite languages: the weights trained on exact labels; open ones: those trained on path
    # labels of open development-set schemas (no warning, not masking)
    from hf_fvo.models import load_default_tokenizer

    tok = load_default_tokenizer()
    open_g = Grammar.from_json_schema({"type": "object", "properties": {"n": {"type": "number"}}},
                                      tok, whitespace="")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", OutsideTrainingWarning)
        est = LearnedPhi(open_g)
    assert est.weights.domain == "any" and not est.is_masking
    assert len(est.weights.training_data["open_schemas"]) >= 20
    assert LearnedPhi(Grammar.from_choices(["yes", "no"], tok)).weights.domain == "finite"
    # neither set fits another tokenizer: the finite ones are tried last and say why
    with pytest.raises(WeightsMismatchError, match="tokenizers"):
        LearnedPhi(Grammar.from_json_schema({"type": "string"}, sp_tokenizer))


def test_domain_is_checked_and_saved(tmp_path):
    with pytest.raises(ValueError, match="domain"):
        PhiModel(domain="open")
    net = random_weights(domain="any")
    net.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["domain"] == "any"
    assert PhiModel.from_pretrained(tmp_path).domain == "any"
    assert PhiModel.from_pretrained(DEFAULT_WEIGHTS).domain == "finite"


def test_learned_phi_works_through_generate(sp_tokenizer):
    import hf_fvo

    g = Grammar.from_choices(["ab", "abc", "ba"], sp_tokenizer)
    model = tiny_random_llama(len(sp_tokenizer))
    out = hf_fvo.generate(model, torch.tensor([[5]]), grammar=g, phi=random_weights(),
                          max_new_tokens=8, do_sample=True)  # fmt: skip
    text = sp_tokenizer.decode([t for t in out[0, 1:].tolist() if t != g.eos_token_id])
    assert text.replace(" ", "") in {"ab", "abc", "ba"}


def _groups(seeds, lengths, depth=3):
    labels = []
    for seed in seeds:
        lm = MarkovLM.random(4, seed=seed, bos_token_id=3, eos_token_id=2, pad_token_id=2)
        for n in lengths:
            labels += markov_labels(Grammar.dyck(depth, n, BRACKETS), lm, (3,), n + 1,
                                    trajectories=8, seed=seed, group=f"{seed}/{n}")  # fmt: skip
    return labels_dataset(labels)


def test_training_lowers_step_tv_on_unseen_lms_and_lengths():
    train, test = _groups(range(6), (8, 12)), _groups(range(50, 53), (10,))
    model = train_phi_model(train, epochs=40, hidden=16, seed=0)
    w = np.array(test["weight"])
    masking = float(np.average(step_tv(None, test), weights=w))
    learned = float(np.average(step_tv(model, test), weights=w))
    assert learned < 0.8 * masking, (learned, masking)


def test_step_tv_of_a_model_predicting_phi_exactly_is_zero():
    rows = [{"source": "s", "group": "g", "features": [[0.0] * len(FEATURE_NAMES)] * 2,
             "log_p": [-1.0, -2.0], "log_phi": [-0.1, -0.1], "half_width": [0.0, 0.0],
             "log_p_eos": -math.inf, "weight": 1.0}]  # fmt: skip
    net = PhiModel()  # Φ̂ ≈ σ(6) everywhere: the same shift on both candidates, no EOS
    assert float(step_tv(net, labels_dataset(rows))[0]) < 1e-9


def _empirical_bernstein(values: list[float], alpha: float) -> float:
    """Maurer–Pontil half-width for the mean of n i.i.d. values in [0, 1], at level 1 − α."""
    n, v = len(values), float(np.var(values, ddof=1))
    return math.sqrt(2 * v * math.log(3 / alpha) / n) + 3 * math.log(3 / alpha) / n


def test_path_labels_average_to_exact_phi_under_a_markov_lm():
    # W_t = ∏_{s>t} p_s(A_s) along masked draws is an unbiased one-rollout estimate of Φ_t(x_t):
    # at the first two positions (told apart by the inverse-budget feature) the mean label of
    # each sampled token is within an empirical-Bernstein interval (α = 1e-3) of exact Φ
    lm = MarkovLM.random(4, seed=0, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    g = Grammar.dyck(2, 6, BRACKETS)
    labels = path_labels(g, lm, (3,), 7, draws=2000, seed=0)
    inv = FEATURE_NAMES.index("inverse_budget")
    exact, table = MarkovExactPhi(g, lm), lm.log_probs.detach().double()
    checked = 0
    for t, prefix in ((0, ()), (1, (0,))):
        state = g.initial_state
        for y in prefix:
            state = g.next_state(state, y)
        ctx = PhiContext(state, prefix, table[lm.context_of((3, *prefix))], 7 - t, (3,))
        phi = exact.log_phi(ctx).exp()
        logp = torch.log_softmax(ctx.logits, -1)
        here = [lab for lab in labels if abs(lab["features"][0][inv] - 1 / (6 - t)) < 1e-6]
        for y in (0, 1):
            w = [math.exp(lab["log_phi"][0]) for lab in here
                 if abs(lab["log_p"][0] - float(logp[y])) < 1e-5]  # fmt: skip
            if len(w) < 100:
                continue
            assert abs(np.mean(w) - float(phi[y])) <= _empirical_bernstein(w, 1e-3), (t, y)
            checked += 1
    assert checked == 3  # '(' at the root; '((' and '()' after it


def test_pointwise_training_fits_the_mean_of_noisy_labels():
    # one-rollout labels are 0/1 draws here: the fitted Φ̂ must be their mean per feature value
    # (the listwise loss has no gradient on a row with one candidate and no EOS)
    rng = np.random.default_rng(0)
    rows = []
    for x, phi in ((0.0, 0.2), (1.0, 0.7)):
        for w in rng.random(400) < phi:
            rows.append({"source": "path", "group": "g", "features": [[x] * len(FEATURE_NAMES)],
                         "log_p": [-1.0], "log_phi": [0.0 if w else -math.inf],
                         "half_width": [1.0], "log_p_eos": -math.inf, "weight": 1.0})  # fmt: skip
    ds = labels_dataset(rows)
    model = train_phi_model(ds, epochs=100, lr=0.01, seed=0)
    for x in (0.0, 1.0):
        mean = np.mean([math.exp(r["log_phi"][0]) for r in rows if r["features"][0][0] == x])
        fitted = float(model(torch.full((1, len(FEATURE_NAMES)), x)).exp())
        assert abs(fitted - mean) < 0.01, (x, fitted, mean)
    masking, learned = path_brier(None, ds).mean(), path_brier(model, ds).mean()
    assert learned < masking


def test_shipped_open_weights_keep_the_estimator_contract_on_a_real_schema():
    # the open checkpoint is not in the conformance world (other tokenizer): on a SmolLM2 schema
    # its rows are log-probabilities finite exactly on the admissible set within the budget, with
    # Φ(EOS) = 1, and sampling with it ends in the language
    import hf_fvo
    from hf_fvo.models import load_default_tokenizer

    tok = load_default_tokenizer()
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["name"],
    }
    g = Grammar.from_json_schema(schema, tok, whitespace="")  # fmt: skip
    est = LearnedPhi(g)
    assert est.weights.domain == "any" and not est.is_masking
    gen = torch.Generator().manual_seed(0)
    for text in ('{"name":"Al', '{"name":"Al","tags":[1', '{"name":"Al"'):
        for remaining in (None, 40, 3):
            state = g.walk(tok.encode(text))
            ctx = PhiContext(state, (), torch.randn(g.vocab_size, generator=gen) * 3, remaining)
            row = est.log_phi(ctx)
            assert not torch.isnan(row).any() and (row[torch.isfinite(row)] <= 0).all()
            assert torch.equal(torch.isfinite(row), g.admissible(state, remaining))
            eos = [e for e in g.eos_token_ids if bool(torch.isfinite(row[e]))]
            assert all(float(row[e]) == 0.0 for e in eos)
    model = tiny_random_llama(g.vocab_size, seed=3)
    torch.manual_seed(0)
    out = hf_fvo.generate(model, torch.tensor([[1, 2]] * 4), grammar=g, phi=est,
                          max_new_tokens=12, do_sample=True, top_k=0)  # fmt: skip
    ended = 0
    for row in out[:, 2:].tolist():
        ids = [t for t in row if t not in g.eos_token_ids]
        if len(ids) < len(row):  # ended with EOS within the budget: a member of the schema
            value = json.loads(tok.decode(ids))
            assert isinstance(value["name"], str)
            ended += 1
    assert ended >= 1
