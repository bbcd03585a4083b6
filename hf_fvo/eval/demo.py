"""What ``hf-fvo demo`` computes (the CLI prints it): grammar-masked JSON next to unconstrained
output, then FVO-Spec on a finite schema with each branch's probability under μ_proj and μ* and
its frequency among FVO-Spec's samples.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessorList

from hf_fvo.eval.laws import TerminalLaw, sampling_law
from hf_fvo.generation import GrammarLogitsProcessor, generate
from hf_fvo.grammar import Grammar
from hf_fvo.models.chat import chat_prompt
from hf_fvo.phi import ExactPhi, PrefixLM

__all__ = ["DEMO_PROMPT", "DEMO_SCHEMA", "SPEC_PROMPT", "SPEC_SCHEMA", "Completion", "SpecDemo",
           "fvo_spec", "masked_json"]  # fmt: skip

DEMO_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "mood": {"enum": ["happy", "sad", "calm"]},
    },
    "required": ["name", "age", "mood"],
}
DEMO_PROMPT = "Describe a fictional person as a JSON object with fields name, age and mood."
# A finite schema where local masking visibly distorts the branch probabilities (seed 000 §1).
SPEC_SCHEMA = {
    "type": "object",
    "properties": {"status": {"enum": ["ok", "error", "pending"]}},
    "required": ["status"],
}
SPEC_PROMPT = "Reply with a JSON object with status in ['ok', 'error', 'pending']."


@dataclass(frozen=True)
class Completion:
    """One output of :func:`masked_json`."""

    constrained: bool
    text: str
    tokens: int
    seconds: float
    is_json: bool
    member: bool  # of the grammar's language


def masked_json(
    model: Any,
    tokenizer: Any,
    grammar: Grammar,
    prompt: str,
    *,
    max_new_tokens: int = 64,
    sample: bool = False,
    seed: int = 0,
) -> list[Completion]:
    """The model's answer to ``prompt`` without and with the grammar's mask (same seed)."""
    input_ids = torch.tensor([chat_prompt(tokenizer, prompt)])
    width = input_ids.shape[1]
    out = []
    for constrained in (False, True):
        torch.manual_seed(seed)
        processors = LogitsProcessorList(
            [GrammarLogitsProcessor(grammar, prompt_length=width)] if constrained else []
        )
        t0 = time.perf_counter()
        ids = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=sample,
                             logits_processor=processors,
                             pad_token_id=tokenizer.eos_token_id)  # fmt: skip
        seconds = time.perf_counter() - t0
        generated = ids[0, width:].tolist()
        text = tokenizer.decode(generated, skip_special_tokens=True)
        state = grammar.walk(generated)
        member = state is not None and grammar.is_accepting(state)
        out.append(Completion(constrained, text, len(generated), seconds, _is_json(text), member))
    return out


@dataclass(frozen=True)
class SpecDemo:
    """What :func:`fvo_spec` measured: per branch (μ_proj, μ*, sampled frequency), and the cost."""

    branches: list[tuple[str, float, float, float]]  # by μ*, most likely first
    tv: float  # TV(μ_proj, μ*) over the texts
    forwards: int  # prefix forwards behind the exact laws and Φ's tables
    law_seconds: float
    samples: int
    from_draft: int  # proposals the draft model made
    proposals: int  # all proposals (the draft model's, the grammar's and the table's)
    accepted: int
    tokens_per_second: float


def fvo_spec(model: Any, tokenizer: Any, samples: int, seed: int = 0) -> SpecDemo:
    """FVO-Spec with exact Φ and a bfloat16 draft on :data:`SPEC_SCHEMA`, against the exact
    laws μ_proj and μ* of the same model (one shared row cache for all three)."""
    grammar = Grammar.from_json_schema(SPEC_SCHEMA, tokenizer, whitespace="", backend="automaton",
                                       vocab_size=model.config.vocab_size)  # fmt: skip
    input_ids = torch.tensor([chat_prompt(tokenizer, SPEC_PROMPT)])
    prompt = tuple(input_ids[0].tolist())
    t0 = time.perf_counter()
    lm = PrefixLM(model, cache_rows=20_000)  # one row cache for the two laws and exact Φ
    text = lambda seq: tokenizer.decode(seq, skip_special_tokens=True)  # noqa: E731
    phi = ExactPhi(grammar, lm, tol=1e-6)
    explored = phi.root_exploration(prompt)  # μ* and exact Φ's tables from one exploration
    star = TerminalLaw.from_log_weights(explored.completions(), explored.residual).pushforward(text)
    proj = sampling_law(grammar, lm, prompt, "uniform", tol=1e-4).pushforward(text)
    law_seconds = time.perf_counter() - t0
    draft = copy.deepcopy(model).to(torch.bfloat16)
    torch.manual_seed(seed)
    counts: dict[str, int] = {}
    proposals = accepted = tokens = from_draft = 0
    t0 = time.perf_counter()
    for _ in range(samples):
        out = generate(model, input_ids, grammar=grammar, phi=phi, assistant_model=draft,
                       draft_phi="same", do_sample=True, top_k=0, max_new_tokens=32,
                       return_dict_in_generate=True)  # fmt: skip
        generated = out.sequences[0, len(prompt) :].tolist()
        counts[text(generated)] = counts.get(text(generated), 0) + 1
        proposals += out.speculation.candidates
        from_draft += sum(out.speculation.proposed)
        accepted += sum(out.speculation.accepted)
        tokens += len(generated)
    seconds = time.perf_counter() - t0
    branches = [(b, proj.probs.get(b, 0.0), star.probs[b], counts.get(b, 0) / max(samples, 1))
                for b in sorted(star.probs, key=star.probs.get, reverse=True)]  # fmt: skip
    return SpecDemo(branches, proj.tv(star), lm.forwards, law_seconds, samples, from_draft,
                    proposals, accepted, tokens / seconds if seconds else 0.0)  # fmt: skip


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True
