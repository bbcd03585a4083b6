"""Offline helpers around a ``vllm.LLM``: the exact-Φ table of a finite language, and the
importance weights that turn n masked draws into draws from μ*."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.phi.table import enumerate_members
from hf_fvo.vllm.admission import ModelInfo, compiler_for
from hf_fvo.vllm.spec import KEY, MAX_TABLE_ROWS, RequestSpec

__all__ = ["exact_table", "importance_weights"]


def _stop_ids(llm: Any) -> tuple[int, ...]:
    """The token ids vLLM ends this model's texts with (its EOS and the generation config's),
    as the engine gives them to :class:`~hf_fvo.vllm.FVOProcessor`."""
    ids = {llm.get_tokenizer().eos_token_id}
    extra = llm.llm_engine.model_config.try_get_generation_config().get("eos_token_id")
    ids.update([extra] if isinstance(extra, int) else extra or ())
    return tuple(sorted(i for i in ids if i is not None))


def _prompt_logprobs(llm: Any, sequences: list[list[int]], skip: int) -> list[list[float]]:
    """log p of every token of each sequence after its first ``skip``, by one prefill each."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences], params,
                        use_tqdm=False)  # fmt: skip
    return [[out.prompt_logprobs[i][tok].logprob for i, tok in enumerate(seq) if i >= skip]
            for seq, out in zip(sequences, outs, strict=True)]  # fmt: skip


def exact_table(
    llm: Any,
    prompt_token_ids: Sequence[int],
    request: Mapping[str, Any],
    max_tokens: int,
    *,
    limit: int = MAX_TABLE_ROWS,
) -> list[list[Any]]:
    """The table for ``phi="table"``: every token sequence of the request's finite language
    that fits ``max_tokens`` (EOS included), with the model's log-probability of each token and
    of ending there, scored by ``llm`` after ``prompt_token_ids`` (one prefill per sequence and
    EOS id; vLLM's prefix cache shares their prefixes). The table belongs to that prompt.

    ``request`` is the ``extra_args["hf_fvo"]`` object without ``phi``; send it back as
    ``{**request, "phi": "table", "table": table}`` with the same prompt and ``max_tokens``.

    Raises:
        GrammarTooLargeError: more than ``limit`` sequences (the language is not small and
            finite: use another estimator).
    """
    spec = RequestSpec.from_args({KEY: dict(request)}, max_bytes=2**62)
    if spec is None or spec.phi != "uniform":
        raise InvalidArgumentError("request must name a grammar and no phi")
    eos = _stop_ids(llm)
    grammar = spec.compile(compiler_for(ModelInfo.from_config(llm.llm_engine.model_config), eos))
    members = enumerate_members(grammar, max_tokens, limit=limit)
    prompt = [int(t) for t in prompt_token_ids]
    sequences = [[*prompt, *m, e] for m in members for e in eos]
    scored = _prompt_logprobs(llm, sequences, len(prompt))
    table = []
    for i, m in enumerate(members):
        rows = scored[i * len(eos) : (i + 1) * len(eos)]
        ends = [r[-1] for r in rows]
        top = max(ends)
        end = top + math.log(sum(math.exp(v - top) for v in ends)) if top > -math.inf else top
        table.append([list(m), [*rows[0][:-1], end]])
    return table


def importance_weights(llm: Any, prompt_token_ids: Sequence[int], outputs: Sequence[Any]
                       ) -> list[float]:  # fmt: skip
    """log w = log p(x) − log μ̂(x) for each completion: resampling n draws in proportion to
    w (sampling importance resampling) moves them toward μ* (for masking, log w = Σ_t log
    p_t(A_t)).

    The draws must come from an ``llm`` built with ``logprobs_mode="processed_logprobs"``,
    sampled with ``logprobs=0`` at temperature 1 without top-k/top-p, so that each token's
    returned log-probability is under the law it was drawn from; p(x) comes from one prefill
    per draw.

    Raises:
        InvalidArgumentError: the engine returns raw log-probabilities, or a draw carries none.
    """
    mode = getattr(llm.llm_engine.model_config, "logprobs_mode", None)
    if mode != "processed_logprobs":
        raise InvalidArgumentError(
            f"the engine's logprobs_mode is {mode!r}: build the LLM with "
            "logprobs_mode='processed_logprobs' so each draw's log-probabilities are those of "
            "the law it was drawn from"
        )
    drawn = []
    for k, c in enumerate(outputs):
        if c.logprobs is None or len(c.logprobs) != len(c.token_ids):
            raise InvalidArgumentError(f"draw {k} carries no log-probabilities: ask logprobs=0")
        drawn.append(sum(step[t].logprob for step, t in zip(c.logprobs, c.token_ids,
                                                              strict=True)))  # fmt: skip
    prompt = [int(t) for t in prompt_token_ids]
    raw = _prompt_logprobs(llm, [[*prompt, *c.token_ids] for c in outputs], len(prompt))
    return [sum(r) - d for r, d in zip(raw, drawn, strict=True)]
