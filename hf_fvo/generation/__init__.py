"""The Transformers side: a per-row state tracker, the logits processor that applies the grammar
and Φ̂ inside ``generate`` over it, the grammar-aware drafts of FVO-Spec (speculative decoding
that samples μ*), Φ̂-twisted particles (SMC), ``hf_fvo.generate`` with its one mode decision,
and the ``custom_generate`` folder for ``model.generate``."""

from hf_fvo.generation.drafts import GrammarCandidateGenerator, GrammarProposals, SpeculationStats
from hf_fvo.generation.generate import generate
from hf_fvo.generation.hub import CUSTOM_GENERATE
from hf_fvo.generation.particles import (
    AutoParticles,
    ParticleReport,
    ParticleSet,
    sample_particles,
)
from hf_fvo.generation.processors import FVOLogitsProcessor, GrammarLogitsProcessor
from hf_fvo.generation.speculative import GrammarAwareCandidateGenerator
from hf_fvo.generation.tracker import RowTracker

__all__ = [
    "CUSTOM_GENERATE",
    "AutoParticles",
    "FVOLogitsProcessor",
    "GrammarAwareCandidateGenerator",
    "GrammarCandidateGenerator",
    "GrammarLogitsProcessor",
    "GrammarProposals",
    "ParticleReport",
    "ParticleSet",
    "RowTracker",
    "SpeculationStats",
    "generate",
    "sample_particles",
]
