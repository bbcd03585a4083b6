"""``keep_greedy``: beam search whose output is never less likely than greedy's.

``hf_fvo.generate(..., num_beams=N, keep_greedy=True)`` decodes each prompt greedily, then runs
the N beams from greedy's prompt cache (the prompt is read once for both), and returns per prompt
the likelier of the two outputs by log p(x) under the model (EOS included). Both are members of
the budgeted language, each finished within the budget; the returned one's log p(x) is at least
greedy's by construction. Beams keep Transformers' scoring (length normalisation by default);
that scoring picks longer, more complete outputs, and greedy's output takes over where the beams'
choice is less likely than greedy's (docs/benchmarks.md measures both suites).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation.options import PER_STEP_OUTPUTS, call_setting
from hf_fvo.generation.prefill import cut_to_prompt, for_beams
from hf_fvo.models.cache import cache_argument, output_cache

__all__ = ["LOGITS_BYTES", "check_keep_greedy", "continuation_logp", "keep_greedy"]

# the most memory the beams' raw logits may take to read their log p(x) without a forward
LOGITS_BYTES = 1 << 30

# arguments of beam search alone (Transformers warns when greedy decoding is given them)
_BEAM_ONLY = ("num_beams", "length_penalty", "early_stopping", "num_beam_groups",
              "diversity_penalty")  # fmt: skip


def check_keep_greedy(model: Any, kwargs: dict[str, Any]) -> int:
    """The number of beams ``keep_greedy`` runs beside greedy decoding, or a typed error.

    Raises:
        InvalidArgumentError: ``num_beams`` below 2, sampling, several sequences per prompt,
            per-step outputs (the returned sequence comes from one of two decodings) or a
            ``cache`` passed in (the decoder reads the prompt itself).
    """
    beams = call_setting(model, kwargs, "num_beams", 1)
    if beams < 2:
        raise InvalidArgumentError(
            f"keep_greedy compares greedy decoding with beam search: set num_beams >= 2 "
            f"(got {beams})"
        )
    if call_setting(model, kwargs, "do_sample", False):
        raise InvalidArgumentError("keep_greedy is a deterministic decoder: drop do_sample=True")
    if call_setting(model, kwargs, "num_return_sequences", 1) != 1:
        raise InvalidArgumentError(
            "keep_greedy returns one sequence per prompt: drop num_return_sequences"
        )
    per_step = [k for k in PER_STEP_OUTPUTS if kwargs.get(k)]
    if per_step:
        raise InvalidArgumentError(
            f"keep_greedy returns the output of one of two decodings, whose per-step outputs "
            f"differ: drop {', '.join(per_step)}"
        )
    if kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None:
        raise InvalidArgumentError("keep_greedy reads the prompt itself: drop cache=")
    return beams


@torch.no_grad()
def continuation_logp(
    model: Any,
    input_ids: torch.Tensor,
    continuations: list[list[int]],
    *,
    attention_mask: torch.Tensor | None = None,
    cache: Any = None,
) -> list[float]:
    """log p(c | prompt) under ``model`` for each continuation c of its prompt row, one forward
    each (no padding read).

    ``continuations[k]`` continues row ``k // (len(continuations) // rows)`` of ``input_ids``
    (several per row, adjacent). ``cache``: the rows' prompt cache without its last column
    (:func:`~hf_fvo.generation.prefill.cut_to_prompt`), copied here, never changed; without one
    the prompt is read again.

    Example:
        >>> import torch
        >>> from hf_fvo.generation.likeliest import continuation_logp
        >>> from hf_fvo.models import load_default_model
        >>> model = load_default_model()
        >>> [a, b] = continuation_logp(model, torch.tensor([[1, 2]]), [[3, 4], [3]])
        >>> a < b < 0
        True
    """
    rows = input_ids.shape[0]
    each = len(continuations) // rows
    if each * rows != len(continuations) or each == 0:
        raise InvalidArgumentError(
            f"{len(continuations)} continuations do not split evenly over {rows} prompt rows"
        )
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    scores = []
    for k, c in enumerate(continuations):
        row = k // each
        if not c:
            scores.append(0.0)
            continue
        fed = torch.tensor([c], dtype=input_ids.dtype)
        real = input_ids[row : row + 1][:, mask[row].bool()]  # the prompt without its padding
        if cache is not None:  # the prompt's last column, then c but its last token
            inputs = torch.cat([real[:, -1:], fed[:, :-1]], dim=1)
            past = for_beams(cache, 1, rows=[row])
            seen = torch.cat([mask[row : row + 1], torch.ones_like(inputs[:, 1:])], dim=1)
            positions = real.shape[1] - 1 + torch.arange(len(c))[None]
            given = {"attention_mask": seen, "position_ids": positions, "use_cache": True}
            logits = model(inputs, **cache_argument(model, past), **given).logits
        else:
            logits = model(torch.cat([real, fed], dim=1)).logits[:, real.shape[1] - 1 : -1]
        log_p = torch.log_softmax(logits[0].float(), dim=-1)
        scores.append(float(log_p.gather(-1, fed[0, :, None]).sum()))
    return scores


def _new_tokens(row: torch.Tensor, eos: set[int]) -> list[int]:
    """A returned row's generated tokens up to its first EOS, that EOS included."""
    tokens = row.tolist()
    end = next((i for i, t in enumerate(tokens) if t in eos), None)
    return tokens if end is None else tokens[: end + 1]


def _kept_logp(out: Any, width: int, lengths: list[int]) -> list[float] | None:
    """log p(x) of each returned row from the raw logits its decoding kept (``output_logits``):
    step t's logits row is the row's own, or for beams the one its ``beam_indices`` name;
    ``None`` where the decoding kept none."""
    logits = out.get("logits")
    if not logits or len(logits) < max(lengths, default=0):
        return None
    beams = out.get("beam_indices")
    scores = []
    for i, length in enumerate(lengths):
        total = 0.0
        for t in range(length):
            row = i if beams is None else int(beams[i, t])
            token = int(out.sequences[i, width + t])
            total += float(torch.log_softmax(logits[t][row].float(), dim=-1)[token])
        scores.append(total)
    return scores


def _budget(model: Any, kwargs: dict[str, Any], width: int) -> int:
    new = call_setting(model, kwargs, "max_new_tokens", None)
    if new is not None:
        return int(new)
    return max(int(call_setting(model, kwargs, "max_length", 20)) - width, 0)


def keep_greedy(
    run: Callable[[torch.Tensor, dict[str, Any], bool | None], Any],
    model: Any,
    input_ids: torch.Tensor,
    kwargs: dict[str, Any],
    *,
    eos_token_ids: tuple[int, ...],
    pad_token_id: int,
    vocab_size: int,
    grammar_draft: bool | None = None,
) -> Any:
    """Per prompt, the likelier by log p(x) of greedy's output and the beams' (see the module).

    ``run(input_ids, kwargs, grammar_draft)`` is one constrained ``generate`` call. Each
    output's log p(x) is read from the raw logits its decoding keeps (``output_logits``) where
    both decodings' fit in :data:`LOGITS_BYTES`, else by a forward. Returns a tensor, or with
    ``return_dict_in_generate=True`` an output whose ``sequences_scores`` are the returned
    sequences' log p(x), ``from_greedy`` says which came from greedy decoding, and
    ``certificates`` are the returned sequences' own.

    Raises:
        InvalidArgumentError: what :func:`check_keep_greedy` refuses.
    """
    beams = check_keep_greedy(model, kwargs)
    width, rows = input_ids.shape[1], input_ids.shape[0]
    as_dict = bool(kwargs.get("return_dict_in_generate"))
    # the raw logits both decodings keep give each output's log p(x) without a forward
    keep = rows * beams * vocab_size * 4 * _budget(model, kwargs, width) <= LOGITS_BYTES
    kept = {"return_dict_in_generate": True, "output_logits": keep}
    greedy_kwargs = {k: v for k, v in kwargs.items() if k not in _BEAM_ONLY}
    # (per-step outputs turn the grammar's free drafts off unless asked for: one prompt asks)
    draft = True if keep and rows == 1 and grammar_draft is None else grammar_draft
    greedy = run(input_ids, {**greedy_kwargs, **kept, "num_beams": 1}, draft)
    cache = cut_to_prompt(output_cache(greedy), width)
    beam_kwargs = {**kwargs, **kept}
    if cache is not None:
        beam_kwargs.update(cache_argument(model, for_beams(cache, beams)))
    beamed = run(input_ids, beam_kwargs, grammar_draft)
    eos = set(eos_token_ids)
    greedy_new = [_new_tokens(greedy.sequences[i, width:], eos) for i in range(rows)]
    beam_new = [_new_tokens(beamed.sequences[i, width:], eos) for i in range(rows)]
    mask = kwargs.get("attention_mask")
    greedy_logp = _kept_logp(greedy, width, [len(c) for c in greedy_new])
    beam_logp = _kept_logp(beamed, width, [len(c) for c in beam_new])
    if greedy_logp is None:
        greedy_logp = continuation_logp(model, input_ids, greedy_new, attention_mask=mask,
                                        cache=cache)  # fmt: skip
    if beam_logp is None:
        beam_logp = continuation_logp(model, input_ids, beam_new, attention_mask=mask,
                                      cache=cache)  # fmt: skip
    from_greedy = [g > b for g, b in zip(greedy_logp, beam_logp, strict=True)]
    chosen = [greedy_new[i] if g else beam_new[i] for i, g in enumerate(from_greedy)]
    longest = max(len(c) for c in chosen)
    sequences = torch.full((rows, width + longest), pad_token_id, dtype=input_ids.dtype)
    sequences[:, :width] = input_ids
    for i, c in enumerate(chosen):
        sequences[i, width : width + len(c)] = torch.tensor(c, dtype=input_ids.dtype)
    if not as_dict:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["sequences_scores"] = torch.tensor([greedy_logp[i] if g else beam_logp[i]
                                            for i, g in enumerate(from_greedy)])  # fmt: skip
    out["from_greedy"] = torch.tensor(from_greedy)
    certificates = [(greedy if g else beamed).get("certificates") for g in from_greedy]
    if all(c is not None for c in certificates):
        out["certificates"] = [c[i] for i, c in enumerate(certificates)]
    return out
