"""Future-validity estimators Φ̂ behind one interface (:class:`PhiEstimator`)."""

from hf_fvo.phi.base import (
    PhiContext,
    PhiDiagnostics,
    PhiEstimator,
    PhiStep,
    admissible_mask,
)
from hf_fvo.phi.exact import ExactPhi
from hf_fvo.phi.lm import PrefixLM
from hf_fvo.phi.onestep import OneStepPhi
from hf_fvo.phi.onestep_true import OneStepTruePhi
from hf_fvo.phi.uniform import UniformPhi

ESTIMATORS: dict[str, type[PhiEstimator]] = {
    cls.name: cls for cls in (UniformPhi, OneStepPhi, OneStepTruePhi, ExactPhi)
}


def make_estimator(phi: str | PhiEstimator, grammar, model=None) -> PhiEstimator:
    """An estimator from its name (``"uniform"``, ``"onestep"``, ``"onestep_true"``, ``"exact"``)
    or the instance itself, checked against ``grammar``.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import make_estimator
        >>> from hf_fvo.models import load_default_tokenizer
        >>> make_estimator("onestep", Grammar.from_choices(["a"], load_default_tokenizer()))
        OneStepPhi(choices ['a'])
    """
    if isinstance(phi, PhiEstimator):
        if phi.grammar is not grammar:
            raise ValueError("the estimator was built for a different grammar")
        return phi
    if phi not in ESTIMATORS:
        raise ValueError(f"unknown phi {phi!r}; choose one of {sorted(ESTIMATORS)}")
    cls = ESTIMATORS[phi]
    return cls(grammar, model) if cls.needs_model else cls(grammar)


__all__ = [
    "ESTIMATORS",
    "ExactPhi",
    "OneStepPhi",
    "OneStepTruePhi",
    "PhiContext",
    "PhiDiagnostics",
    "PhiEstimator",
    "PhiStep",
    "PrefixLM",
    "UniformPhi",
    "admissible_mask",
    "make_estimator",
]
