"""The shared conformance suite (shipped as :mod:`hf_fvo.testing`), run here in the world the
suite was first written for: a finite language over the SentencePiece-style tokenizer trained in
conftest, scored by a bigram LM whose table we control, so exact Φ is known by brute force.
"""

from __future__ import annotations

import pytest

from hf_fvo import Grammar
from hf_fvo.testing import CHOICES, PROMPT, EstimatorConformance, contexts
from tests.lms import random_bigram

__all__ = ["CHOICES", "PROMPT", "EstimatorConformance", "contexts", "world"]


@pytest.fixture(scope="module")
def world(sp_tokenizer):
    grammar = Grammar.from_choices(CHOICES, sp_tokenizer)
    model = random_bigram(len(sp_tokenizer), seed=3)
    return grammar, model
