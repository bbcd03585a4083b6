"""Feasibility before the first forward: a budget or option that no member of the language can
satisfy is refused with a typed error that names it, instead of an output cut off or a
constraint changed silently."""

from __future__ import annotations

from typing import Any

from hf_fvo.errors import ConstraintConflictError, EmptyLanguageError
from hf_fvo.grammar import Grammar

__all__ = ["check_feasible"]


def check_feasible(
    grammar: Grammar, states: list[Any], budget: int, config: Any, width: int
) -> None:
    """Refuse ``budget`` new tokens (or ``config``'s minimum lengths and banned tokens) when no
    member of the language reachable from one of ``states`` fits them.

    Raises:
        EmptyLanguageError: the budget leaves no room for EOS.
        BudgetTooSmallError: a row's shortest completion needs more than the budget.
        BudgetUndecidedError: hf_fvo can show neither that a completion fits nor that none does.
        ConstraintConflictError: a minimum length no member reaches, or every EOS banned.

    Example:
        >>> from transformers import GenerationConfig
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation.feasibility import check_feasible
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["yes"], load_default_tokenizer())
        >>> check_feasible(g, [g.initial_state], 4, GenerationConfig(), 3)  # fits: no error
        >>> config = GenerationConfig(min_new_tokens=5)  # 'yes' spelled y-e-s is 3 tokens
        >>> check_feasible(g, [g.initial_state], 4, config, 3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_fvo.errors.ConstraintConflictError: ... the longest member of choices ['yes'] has 3: ...
    """
    if budget < 1:
        raise EmptyLanguageError(
            f"the budget leaves {budget} new tokens (max_length={config.max_length}, input "
            f"width {width}); even EOS needs one"
        )
    for state in dict.fromkeys(states):  # rows sharing a state are checked once
        if state is None:
            continue
        refusal = grammar.budget_refusal(
            state, budget,
            f"the budget of {budget} new tokens (max_new_tokens, or max_length minus the input's "
            f"{width}, from the call, its generation_config or the model's)",
            "; raise max_new_tokens",
        )  # fmt: skip
        if refusal is not None:
            raise refusal
        min_new = max(config.min_new_tokens or 0, (config.min_length or 0) - width)
        longest = grammar.max_tokens_to_accept(state)
        if min_new and longest is not None and longest < min_new:
            raise ConstraintConflictError(
                f"min_new_tokens/min_length asks for {min_new} tokens before EOS but the longest "
                f"member of {grammar.source} has {longest}: drop the minimum length"
            )
        if min_new and min_new + 1 > budget:
            raise ConstraintConflictError(
                f"min_new_tokens/min_length asks for {min_new} tokens before EOS, which leaves "
                f"no room for EOS within the budget of {budget}"
            )
    eos = set(grammar.eos_token_ids)
    banned = set(config.suppress_tokens or ())
    banned |= {w[0] for w in (config.bad_words_ids or ()) if len(w) == 1}
    if eos <= banned:
        raise ConstraintConflictError(
            f"suppress_tokens/bad_words_ids ban every EOS id {sorted(eos)}: no member of "
            f"{grammar.source} can be ended"
        )
