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

from hf_fvo.errors import check_int
from hf_fvo.eval.laws import TerminalLaw, sampling_law
from hf_fvo.generation import GrammarLogitsProcessor, generate
from hf_fvo.grammar import Grammar
from hf_fvo.models.chat import chat_prompt
from hf_fvo.phi import ExactPhi, PrefixLM

__all__ = [
    "DEMO_PROMPT",
    "DEMO_SCHEMA",
    "OPEN_PROMPT",
    "OPEN_SCHEMA",
    "SPEC_PROMPT",
    "SPEC_SCHEMA",
    "Completion",
    "OpenDemo",
    "OpenDraw",
    "SpecDemo",
    "fvo_spec",
    "masked_json",
    "open_particles",
]  # fmt: skip

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
# An open schema (a free string, too many members for exact Φ) where masking visibly cuts what the
# model writes: it closes the title wherever the twelfth character falls.
OPEN_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 12}},
    "required": ["title"],
}
OPEN_PROMPT = (
    "Suggest a title for a novel about a lighthouse keeper, as a JSON object with a field title."
)


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


@dataclass(frozen=True)
class OpenDraw:
    """One output of :func:`open_particles`."""

    text: str
    title: str
    end_probability: float  # the model's probability of closing the title where it closed


@dataclass(frozen=True)
class OpenDemo:
    """What :func:`open_particles` drew: masked and particle outputs of the same budget."""

    masked: list[OpenDraw]
    particles: list[OpenDraw]
    log_z: float  # the mean of the particle runs' log Ẑ: log Pr_p[valid within the budget]
    masked_seconds: float
    particle_seconds: float
    count: int  # N
    temperature: float

    @staticmethod
    def cut(draws: list[OpenDraw], below: float = 0.01) -> int:
        """How many titles end where the model gave closing them less than ``below``."""
        return sum(d.end_probability < below for d in draws)


def open_particles(
    model: Any,
    tokenizer: Any,
    draws: int,
    particles: int = 16,
    *,
    max_new_tokens: int = 24,
    temperature: float = 0.7,
    seed: int = 0,
) -> OpenDemo:
    """``draws`` masked outputs and ``draws`` outputs of N-particle runs on :data:`OPEN_SCHEMA`
    (same budget, temperature and seed), each with the model's probability of closing the title
    where it closed: masking closes it wherever the twelfth character falls, particles weight
    such cuts by that probability (μ* keeps the titles the model itself ends)."""
    check_int("draws", draws, minimum=1)
    check_int("particles", particles, minimum=1)
    grammar = Grammar.from_json_schema(OPEN_SCHEMA, tokenizer,
                                       vocab_size=model.config.vocab_size)  # fmt: skip
    input_ids = torch.tensor([chat_prompt(tokenizer, OPEN_PROMPT)])
    quotes = torch.tensor([t.startswith('"') for t in tokenizer.convert_ids_to_tokens(
        list(range(len(tokenizer))))])  # fmt: skip
    runs: dict[bool, list[OpenDraw]] = {}
    seconds: dict[bool, float] = {}
    log_z = []
    for smc in (False, True):
        torch.manual_seed(seed)
        kwargs = {"particles": particles} if smc else {}
        runs[smc], t0 = [], time.perf_counter()
        for _ in range(draws):
            out = generate(model, input_ids, grammar=grammar, do_sample=True, top_k=0,
                           temperature=temperature, max_new_tokens=max_new_tokens,
                           return_dict_in_generate=True, **kwargs)  # fmt: skip
            if smc:
                log_z.append(out.particles[0].log_z)
            new = out.sequences[0, input_ids.shape[1] :].tolist()
            runs[smc].append(_title_end(model, tokenizer, input_ids, new, quotes, temperature))
        seconds[smc] = time.perf_counter() - t0
    return OpenDemo(runs[False], runs[True], sum(log_z) / len(log_z), seconds[False],
                    seconds[True], particles, temperature)  # fmt: skip


def _title_end(
    model: Any,
    tokenizer: Any,
    input_ids: torch.Tensor,
    new: list[int],
    quotes: torch.Tensor,
    temperature: float,
) -> OpenDraw:
    """The output, its title, and the model's probability (at ``temperature``) of a token that
    starts with the quote that closed the title, at the token where it closed."""
    new = new[: new.index(tokenizer.eos_token_id) + 1]
    text = tokenizer.decode(new, skip_special_tokens=True)
    title = json.loads(text)["title"]
    close = text.rindex('"')  # the title's closing quote: only "}" and spaces follow it
    at = next(k for k in range(len(new))
              if len(tokenizer.decode(new[: k + 1], skip_special_tokens=True)) > close)  # fmt: skip
    ids = torch.cat([input_ids[0], torch.tensor(new[:at])])[None]
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1].double() / temperature, -1)
    starts_with_quote = tokenizer.decode(new[at : at + 1]).startswith('"')
    p = probs[: len(quotes)][quotes].sum() if starts_with_quote else probs[new[at]]
    return OpenDraw(text, title, float(p))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True
