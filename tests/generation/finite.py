"""The finite-language setting shared by the sampling tests: a tiny sharpened Llama on six
choices, where μ* and μ_proj differ visibly, with both laws computed exactly."""

from __future__ import annotations

from hf_fvo import Grammar
from hf_fvo.eval import grammar_conditional_law, sampling_law
from tests.lms import tiny_llama

N = 5000  # draws per sampled-law test
CHOICES = ["ab", "abc", "ba", "bca", "cab", "c"]
PROMPT = (1, 5, 9)
MAX_NEW = 8
#: an open JSON schema with three required keys (its members end at the budget's edge when the
#: budget is the shortest member's length)
THREE_KEYS = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}  # fmt: skip


def finite_setting(tokenizer, seed: int = 1):
    """(model, grammar, μ*, μ_proj) for CHOICES after PROMPT within MAX_NEW tokens."""
    model = tiny_llama(len(tokenizer), tokenizer.eos_token_id, seed=seed)
    grammar = Grammar.from_choices(CHOICES, tokenizer, vocab_size=model.config.vocab_size)
    star = grammar_conditional_law(grammar, model, PROMPT, max_new_tokens=MAX_NEW)
    proj = sampling_law(grammar, model, PROMPT, "uniform", max_new_tokens=MAX_NEW)
    return model, grammar, star, proj
