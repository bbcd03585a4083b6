"""Future-validity estimators Φ̂ behind one interface (:class:`PhiEstimator`)."""

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.phi.base import (
    Certificate,
    PhiContext,
    PhiDiagnostics,
    PhiEstimator,
    PhiStep,
    admissible_mask,
)
from hf_fvo.phi.exact import ExactPhi, TrieExploration
from hf_fvo.phi.exact_markov import MarkovExactPhi
from hf_fvo.phi.learned import LearnedPhi, PhiModel
from hf_fvo.phi.lm import PrefixLM
from hf_fvo.phi.onestep import OneStepPhi
from hf_fvo.phi.onestep_true import OneStepTruePhi
from hf_fvo.phi.rollout import GatedPhi, RolloutPhi, RolloutReport
from hf_fvo.phi.uniform import UniformPhi

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
    """An estimator from its name (``"uniform"``, ``"onestep"``, ``"onestep_true"``, ``"exact"``,
    ``"exact_markov"``, ``"rollout"``, ``"gated"``, ``"learned"``), learned-Φ weights (a
    :class:`PhiModel`), or the instance itself, checked against ``grammar``. ``"exact"`` with a
    :class:`~hf_fvo.models.MarkovLM` is the product-state DP (any grammar), otherwise the
    token-trie DP (finite languages); ``"learned"`` uses the weights shipped for the embedded
    SmolLM2.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import make_estimator
        >>> from hf_fvo.models import load_default_tokenizer
        >>> make_estimator("onestep", Grammar.from_choices(["a"], load_default_tokenizer()))
        OneStepPhi(choices ['a'])
    """
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
    cls = ESTIMATORS[phi]
    if cls is ExactPhi and _is_markov(model):
        cls = MarkovExactPhi
    return cls(grammar, model) if cls.needs_model or cls is LearnedPhi else cls(grammar)


def _is_markov(model) -> bool:
    from hf_fvo.models.markov import MarkovLM

    return isinstance(model, MarkovLM)


__all__ = [
    "ESTIMATORS",
    "Certificate",
    "ExactPhi",
    "GatedPhi",
    "LearnedPhi",
    "MarkovExactPhi",
    "OneStepPhi",
    "OneStepTruePhi",
    "PhiContext",
    "PhiDiagnostics",
    "PhiEstimator",
    "PhiModel",
    "PhiStep",
    "PrefixLM",
    "RolloutPhi",
    "RolloutReport",
    "TrieExploration",
    "UniformPhi",
    "admissible_mask",
    "make_estimator",
]
