"""Particles as ``model.generate``'s decoding loop: the ``custom_generate`` branch of
:func:`hf_fvo.generate` that runs :func:`~hf_fvo.generation.particles.sample_particles` per prompt
with the call's budget, its other logits processors and its padding."""

from __future__ import annotations

from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation.batches import right_padded
from hf_fvo.generation.particles import AutoParticles, ParticleReport, sample_particles
from hf_fvo.generation.processors import FVOLogitsProcessor
from hf_fvo.generation.tracker import left_padding
from hf_fvo.generation.warpers import history_dependent

__all__ = ["particle_decode"]


def particle_decode(
    model: Any,
    input_ids: torch.Tensor,
    logits_processor: LogitsProcessorList,
    generation_config: Any,
    model_kwargs: dict[str, Any],
    *,
    processor: FVOLogitsProcessor,
    particles: int | AutoParticles,
) -> tuple[Any, list[ParticleReport]]:
    """Sequential Monte Carlo per prompt, as Transformers prepared the call; each of a prompt's
    ``num_return_sequences`` rows is drawn from its final weighted particles. Returns the
    output (``generate``'s type) and one report per returned row.

    Raises:
        InvalidArgumentError: greedy decoding, beams, or a processor whose scores depend on
            more than the row's prefix (particles target q(x)·1[x ∈ L_B]/Z, q the product of
            the conditionals after the call's processors and warpers).
    """
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    config = generation_config
    if not config.do_sample:
        raise InvalidArgumentError("particles sample: pass do_sample=True")
    if (config.num_beams or 1) > 1:
        raise InvalidArgumentError("particles do not combine with beam search (num_beams)")
    others = [p for p in logits_processor if p is not processor]
    stateful = history_dependent(others)
    if stateful:
        raise InvalidArgumentError(
            f"particles target the law of the processed conditionals, a function of each "
            f"row's prefix; {stateful} depends on the calls before or the batch's layout: "
            "drop it, or sample without particles"
        )
    rows = processor.tracker
    copies = config.num_return_sequences or 1
    mask = model_kwargs.get("attention_mask")
    pads = [0] * input_ids.shape[0] if mask is None else left_padding(mask)

    def processed(padding: torch.Tensor) -> Any:
        # the other processors see each row with its left padding, as Transformers built
        # them for (min_new_tokens counts from the padded width)
        def scores(ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
            ids = torch.cat([padding.expand(len(ids), -1), ids], dim=1)
            for p in others:
                logits = p(ids, logits)
            return logits

        return scores

    budget = config.max_length - input_ids.shape[1]
    outputs, reports = [], []
    for r in range(0, input_ids.shape[0], copies):
        skip = pads[r]
        found = sample_particles(
            model, input_ids[r : r + 1, skip:], grammar=processor.grammar,
            particles=particles, max_new_tokens=budget, phi=processor.estimator,
            scores=processed(input_ids[r : r + 1, :skip]) if others else None,
            prompt_length=rows.prompt_length - skip,
        )  # fmt: skip
        for j in found.draw(copies).tolist():
            outputs.append(torch.cat([input_ids[r, :skip], found.sequences[j]]))
            reports.append(found.report)
    pad = config.pad_token_id
    pad = processor.grammar.eos_token_id if pad is None else pad
    sequences = right_padded(outputs, pad, input_ids)
    if config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(sequences=sequences), reports
    return sequences, reports
