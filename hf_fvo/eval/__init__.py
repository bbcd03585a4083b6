"""Evaluation: exact terminal laws (μ*, μ_proj, μ_Φ̂), TV/KL, and sampled-vs-exact statistics;
exact TV over product states for Markov LMs (``product_tv``); a sampled μ* reference for open
grammars (``importance_sample``, ``rejection_sample``).

Nothing in ``grammar``, ``phi`` or ``generation`` imports this package.
"""

from hf_fvo.eval.audit import AuditReport, Branch, audit
from hf_fvo.eval.laws import (
    TerminalLaw,
    grammar_conditional_law,
    sampling_law,
    sampling_law_on,
    sequence_law,
)
from hf_fvo.eval.plots import plot_audit
from hf_fvo.eval.product import ProductComparison, product_tv, sampled_product_tv
from hf_fvo.eval.reference import (
    RejectionSample,
    WeightedSample,
    importance_sample,
    rejection_sample,
)
from hf_fvo.eval.stats import (
    bootstrap_tv_ci,
    empirical_law,
    empirical_tv,
    null_tv_percentiles,
    two_sample_null_tv,
    two_sample_tv,
)

__all__ = [
    "AuditReport",
    "Branch",
    "ProductComparison",
    "RejectionSample",
    "TerminalLaw",
    "WeightedSample",
    "audit",
    "bootstrap_tv_ci",
    "empirical_law",
    "empirical_tv",
    "grammar_conditional_law",
    "importance_sample",
    "null_tv_percentiles",
    "plot_audit",
    "product_tv",
    "rejection_sample",
    "sampled_product_tv",
    "sampling_law",
    "sampling_law_on",
    "sequence_law",
    "two_sample_null_tv",
    "two_sample_tv",
]
