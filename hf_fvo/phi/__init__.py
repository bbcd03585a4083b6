"""Future-validity estimators Φ̂ behind one interface (:class:`PhiEstimator`)."""

from hf_fvo.phi.base import PhiContext, PhiEstimator, PhiStep, admissible_mask
from hf_fvo.phi.exact import ExactPhi
from hf_fvo.phi.lm import PrefixLM
from hf_fvo.phi.onestep import OneStepPhi
from hf_fvo.phi.onestep_true import OneStepTruePhi
from hf_fvo.phi.uniform import UniformPhi

ESTIMATORS: dict[str, type[PhiEstimator]] = {
    cls.name: cls for cls in (UniformPhi, OneStepPhi, OneStepTruePhi, ExactPhi)
}

__all__ = [
    "ESTIMATORS",
    "ExactPhi",
    "OneStepPhi",
    "OneStepTruePhi",
    "PhiContext",
    "PhiEstimator",
    "PhiStep",
    "PrefixLM",
    "UniformPhi",
    "admissible_mask",
]
