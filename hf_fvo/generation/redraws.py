"""Redraws for a grammar's final check: where the masks only over-approximate the language
(:attr:`Grammar.checked <hf_fvo.grammar.Grammar.checked>`), an output that fails the exact check
is drawn again from its own prompt — rejection sampling of the masked law conditioned on
passing — up to ``check_tries`` draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hf_fvo.errors import CheckFailedError
from hf_fvo.generation.batches import right_padded
from hf_fvo.generation.options import PER_STEP_OUTPUTS, GenerateOptions, call_setting

__all__ = ["grammar_tokens", "redraw_failed"]


def redraw_failed(
    run: Callable[[torch.Tensor, dict[str, Any]], Any],
    model: Any,
    input_ids: torch.Tensor,
    out: Any,
    options: GenerateOptions,
    kwargs: dict[str, Any],
) -> Any:
    """``out`` with each returned sequence that fails the grammar's final check redrawn by
    ``run(one prompt row, its kwargs)`` until it passes; sampling (no beams, no per-step
    outputs) redraws up to ``options.check_tries`` times, anything else has its one draw.

    Raises:
        CheckFailedError: every draw of a sequence failed the check (it names the keyword).
    """
    grammar = options.grammar
    as_dict = not isinstance(out, torch.Tensor)
    sequences = out.sequences if as_dict else out
    copies = kwargs.get("num_return_sequences") or 1
    width = input_ids.shape[1]
    start = width if options.prompt_length is None else options.prompt_length
    mask = kwargs.get("attention_mask")
    sampling = call_setting(model, kwargs, "do_sample", False)
    beams = call_setting(model, kwargs, "num_beams", 1)
    per_step = any(kwargs.get(k) for k in PER_STEP_OUTPUTS)  # they follow one draw
    limit = options.check_tries if sampling and beams == 1 and not per_step else 1
    eos = set(grammar.eos_token_ids)
    pad = call_setting(model, kwargs, "pad_token_id", grammar.eos_token_id)
    rows = [sequences[i] for i in range(sequences.shape[0])]
    draws = [1] * len(rows)
    certificates = list(out["certificates"]) if as_dict and "certificates" in out else None
    single = {k: v for k, v in kwargs.items() if k not in ("num_return_sequences",
                                                           "attention_mask")}  # fmt: skip
    for i in range(len(rows)):
        r = i // copies
        failure = grammar.check(grammar_tokens(rows[i], start, width, eos))
        while failure is not None:
            if draws[i] >= limit:
                how = f"{draws[i]} draws" if limit > 1 else "the only draw"
                raise CheckFailedError(
                    f"sequence {i}: {how} failed the final check of {grammar.source}: "
                    f"{failure}; raise check_tries, sample (do_sample=True, no beams, no "
                    "per-step outputs) for redraws, or use particles=N"
                )  # fmt: skip
            row_mask = None if mask is None else mask[r : r + 1]
            again = run(input_ids[r : r + 1], {**single, "attention_mask": row_mask})
            draws[i] += 1
            rows[i] = (again.sequences if as_dict else again)[0].to(sequences.device)
            if certificates is not None and "certificates" in again:
                certificates[i] = again["certificates"][0]
            failure = grammar.check(grammar_tokens(rows[i], start, width, eos))
    if max(draws) == 1:
        if as_dict:
            out["draws"] = draws
        return out
    stacked = right_padded(rows, pad, sequences)
    if not as_dict:
        return stacked
    out.sequences = stacked
    out["draws"] = draws
    if certificates is not None:
        out["certificates"] = certificates
    return out


def grammar_tokens(row: torch.Tensor, start: int, width: int, eos: set[int]) -> list[int]:
    """The grammar's tokens of one returned row: from ``start`` to the first EOS generated
    after the input's ``width``.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.redraws import grammar_tokens
        >>> grammar_tokens(torch.tensor([9, 9, 5, 6, 2, 2]), 2, 3, {2})
        [5, 6]
    """
    tokens = row[start:].tolist()
    for j in range(width - start, len(tokens)):
        if tokens[j] in eos:
            return tokens[:j]
    return tokens
