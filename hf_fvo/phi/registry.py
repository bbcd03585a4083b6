"""The estimators by name: :data:`ESTIMATORS` and :func:`make_estimator`, which keeps what it
builds for a model on that model."""

from __future__ import annotations

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar.interface import require_grammar
from hf_fvo.models.markov import MarkovLM
from hf_fvo.models.memory import model_memory
from hf_fvo.phi.base import PhiEstimator
from hf_fvo.phi.exact import ExactPhi
from hf_fvo.phi.exact_markov import MarkovExactPhi
from hf_fvo.phi.learned import LearnedPhi, PhiModel
from hf_fvo.phi.onestep import OneStepPhi
from hf_fvo.phi.onestep_true import OneStepTruePhi
from hf_fvo.phi.rollout import GatedPhi, RolloutPhi
from hf_fvo.phi.uniform import UniformPhi

__all__ = ["ESTIMATORS", "make_estimator"]

ESTIMATORS: dict[str, type[PhiEstimator]] = {
    cls.name: cls
    for cls in (
        UniformPhi,
        OneStepPhi,
        OneStepTruePhi,
        ExactPhi,
        MarkovExactPhi,
        RolloutPhi,
        GatedPhi,
        LearnedPhi,
    )
}


def make_estimator(phi: str | PhiEstimator | PhiModel, grammar, model=None) -> PhiEstimator:
    """An estimator from its name (one of :data:`ESTIMATORS`: ``"uniform"``, ``"onestep"``,
    ``"onestep_true"``, ``"exact"``, ``"exact_markov"``, ``"rollout"``, ``"gated"``,
    ``"learned"``), learned-Φ weights (a :class:`PhiModel`), or the instance itself, checked
    against ``grammar``. ``"exact"`` with a :class:`~hf_fvo.models.MarkovLM` is the
    product-state DP (any grammar), otherwise the token-trie DP (finite languages);
    ``"learned"`` uses the weights shipped for the embedded SmolLM2.

    An estimator named by string for a model is kept on that model
    (:mod:`hf_fvo.models.memory`, per grammar), so the next call with the same name, grammar
    and model gets the same instance and what it keeps (exact Φ's tables, rollouts, loaded
    weights), as if the instance had been passed.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import make_estimator
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["a"], tok)
        >>> make_estimator("onestep", g)
        OneStepPhi(choices ['a'])
        >>> model = tiny_random_llama(len(tok))
        >>> make_estimator("exact", g, model) is make_estimator("exact", g, model)
        True
    """
    require_grammar(grammar)
    if isinstance(phi, PhiEstimator):
        if phi.grammar is not grammar:
            raise InvalidArgumentError(
                f"the estimator was built for {phi.grammar.source}, not {grammar.source}"
            )
        return phi
    if isinstance(phi, PhiModel):
        return LearnedPhi(grammar, model, weights=phi)
    if not isinstance(phi, str) or phi not in ESTIMATORS:
        raise InvalidArgumentError(
            f"unknown phi {phi!r}; choose one of {sorted(ESTIMATORS)} or pass an estimator"
        )
    kept = None if model is None else model_memory(model, "estimators", _KEPT_ESTIMATORS)
    if kept is None:
        return _build(phi, grammar, model)
    return kept.get_or_build((phi, grammar), lambda: _build(phi, grammar, model))


_KEPT_ESTIMATORS = 16  # estimators named by string, kept per model


def _build(phi: str, grammar, model) -> PhiEstimator:
    cls = ESTIMATORS[phi]
    if cls is ExactPhi and isinstance(model, MarkovLM):
        cls = MarkovExactPhi
    return cls(grammar, model) if cls.needs_model or cls is LearnedPhi else cls(grammar)
