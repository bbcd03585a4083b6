"""A batch as rows: speculative decoding row by row (Transformers' assisted decoding is
batch-1), and rows of different lengths stacked again as one right-padded tensor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from hf_fvo.errors import InvalidArgumentError, check_int
from hf_fvo.generation.drafts import SpeculationStats
from hf_fvo.generation.options import PER_STEP_OUTPUTS, GenerateOptions, call_setting
from hf_fvo.generation.tracker import left_padding

__all__ = ["right_padded", "row_by_row"]

Run = Callable[[torch.Tensor, GenerateOptions, dict[str, Any]], Any]


def row_by_row(
    run: Run, model: Any, input_ids: torch.Tensor, options: GenerateOptions, kwargs: dict
) -> Any:
    """Speculative decoding of a batch (or of several samples per prompt): each row (and each
    of its ``num_return_sequences``) runs alone through ``run(input_ids, options, kwargs)``,
    from its own unpadded prompt, and samples its own law; the outputs are stacked with the
    input's left padding and right-padded with ``pad_token_id``."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    per_step = [k for k in PER_STEP_OUTPUTS if kwargs.get(k)]
    if per_step:
        raise InvalidArgumentError(
            f"{', '.join(per_step)} with speculative decoding needs a batch of one prompt and "
            "num_return_sequences=1 (batches run row by row, see hf_fvo.generate)"
        )
    kwargs = dict(kwargs)
    mask = kwargs.pop("attention_mask", None)
    pads = [0] * input_ids.shape[0] if mask is None else left_padding(mask)
    copies = check_int("num_return_sequences", kwargs.pop("num_return_sequences", 1) or 1,
                       minimum=1)  # fmt: skip
    as_dict = bool(kwargs.get("return_dict_in_generate"))
    pad = call_setting(model, kwargs, "pad_token_id", options.grammar.eos_token_id)
    rows, certificates, stats = [], [], SpeculationStats()
    for r, skip in enumerate(pads):
        start = None if options.prompt_length is None else options.prompt_length - skip
        for _ in range(copies):
            out = run(input_ids[r : r + 1, skip:], replace(options, prompt_length=start), kwargs)
            seq = out.sequences if as_dict else out
            rows.append(torch.cat([input_ids[r, :skip], seq[0].to(input_ids.device)]))
            if as_dict:
                certificates += out["certificates"]
                for name in ("proposed", "drafted", "accepted", "emitted", "free"):
                    getattr(stats, name).extend(getattr(out["speculation"], name))
    sequences = right_padded(rows, pad, input_ids)
    if not as_dict:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["certificates"] = certificates
    out["speculation"] = stats
    return out


def right_padded(rows: list[torch.Tensor], pad: int, like: torch.Tensor) -> torch.Tensor:
    """``rows`` stacked, right-padded with ``pad`` (``like``'s dtype and device).

    Example:
        >>> import torch
        >>> from hf_fvo.generation.batches import right_padded
        >>> right_padded([torch.tensor([1, 2, 3]), torch.tensor([4])], 0, torch.tensor([0]))
        tensor([[1, 2, 3],
                [4, 0, 0]])
    """
    width = max(len(row) for row in rows)
    out = torch.full((len(rows), width), int(pad), dtype=like.dtype, device=like.device)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out
