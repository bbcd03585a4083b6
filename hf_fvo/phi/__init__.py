"""Future-validity estimators Φ̂ behind one interface (:class:`PhiEstimator`)."""

from hf_fvo.phi.base import (
    Certificate,
    PhiContext,
    PhiDiagnostics,
    PhiEstimator,
    PhiStep,
)
from hf_fvo.phi.exact import ExactPhi, TrieExploration
from hf_fvo.phi.exact_markov import MarkovExactPhi
from hf_fvo.phi.learned import LearnedPhi, PhiModel
from hf_fvo.phi.lm import PrefixLM
from hf_fvo.phi.onestep import OneStepPhi
from hf_fvo.phi.onestep_true import OneStepTruePhi
from hf_fvo.phi.registry import ESTIMATORS, make_estimator
from hf_fvo.phi.rollout import GatedPhi, RolloutPhi, RolloutReport
from hf_fvo.phi.table import TablePhi, enumerate_members
from hf_fvo.phi.uniform import UniformPhi

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
    "TablePhi",
    "TrieExploration",
    "UniformPhi",
    "enumerate_members",
    "make_estimator",
]
