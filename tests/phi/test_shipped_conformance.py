"""hf_fvo.testing's suite as an outside author runs it: in its default world (a byte vocabulary
and an order-1 Markov LM, no tokenizer of ours), on estimators of every kind."""

from __future__ import annotations

import pytest

from hf_fvo.phi import ExactPhi, OneStepPhi, RolloutPhi, UniformPhi
from hf_fvo.testing import EstimatorConformance
from hf_fvo.testing import world as world  # the shipped fixture


class TestUniformInTheDefaultWorld(EstimatorConformance):
    varies = False

    def make(self, grammar, model):
        return UniformPhi(grammar)


class TestOneStepInTheDefaultWorld(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        return OneStepPhi(grammar)


class TestExactInTheDefaultWorld(EstimatorConformance):
    def make(self, grammar, model):
        return ExactPhi(grammar, model, tol=0.0)


class TestRolloutInTheDefaultWorld(EstimatorConformance):
    varies = "somewhere"

    def make(self, grammar, model):
        return RolloutPhi(grammar, model, k=32, seed=1)


class Constant(UniformPhi):
    """A broken estimator: it claims to vary nothing but is used where Φ varies."""


class TestTheSuiteCatchesAConstantEstimator(EstimatorConformance):
    def make(self, grammar, model):
        return Constant(grammar)

    def test_varies_per_candidate_where_phi_varies(self, world):
        # the default world has positions where Φ varies, and the suite sees a constant there
        with pytest.raises(AssertionError):
            super().test_varies_per_candidate_where_phi_varies(world)
