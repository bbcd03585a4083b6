"""The budget rule: a token is admitted only where a member of L_B stays in reach
(:class:`CertifiedBudget`, over a pushdown grammar's core: certificates, then bounded
searches; what it knows of a state kept beside it, :mod:`hf_fvo.grammar.budget.memo`).
Automata answer budgets from their exact distance tables.
"""

from hf_fvo.grammar.budget.certified import CertifiedBudget

__all__ = ["CertifiedBudget"]
