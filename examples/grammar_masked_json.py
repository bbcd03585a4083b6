"""Grammar-constrained JSON with the embedded SmolLM2 model: masking against learned Φ.

Masking (Transformers' ``GrammarLogitsProcessor`` here, what every engine does) samples μ_proj:
at each step the model's scores renormalised over the admissible tokens. Learned Φ
(``phi="learned"``, weights shipped for this model) weighs each candidate by an estimate of how
likely the model is to finish validly after it, towards μ* = p(x | x ∈ L). The script prints a
greedy output and a few samples under each, and reports whatever happens.

The schema is finite (enums and a bounded integer). The shipped learned-Φ weights were trained
on finite languages and are used only there: on an open schema ``phi="learned"`` is masking and
warns (such weights drove most outputs on open real schemas to the token cap; see
docs/benchmarks.md). Bounding the integer also matters for masking itself: with a plain
``"type": "integer"`` greedy masking writes ``"population_millions":123222222…`` until the
token cap.

Run: python examples/grammar_masked_json.py [--samples 6] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import LogitsProcessorList

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.generation import GrammarLogitsProcessor
from hf_fvo.models import load_default_model, load_default_tokenizer

CITIES = ["Tokyo", "Delhi", "Shanghai", "São Paulo", "Mexico City", "Cairo", "New York City",
          "Lagos"]  # fmt: skip
CONTINENTS = ["Africa", "Asia", "Europe", "North America", "South America", "Oceania"]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"enum": CITIES},
        "population_millions": {"type": "integer", "minimum": 1, "maximum": 40},
        "continent": {"enum": CONTINENTS},
    },
    "required": ["city", "population_millions", "continent"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    tokenizer, model = load_default_tokenizer(), load_default_model()
    grammar = Grammar.from_json_schema(
        SCHEMA, tokenizer, whitespace="", vocab_size=model.config.vocab_size
    )
    messages = [{"role": "user", "content": "Give one large city as JSON."}]
    input_ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    n = input_ids.shape[1]

    def masking(ids: torch.Tensor, **kwargs) -> torch.Tensor:
        processor = GrammarLogitsProcessor(grammar, prompt_length=n)
        return model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=args.max_new_tokens,
            logits_processor=LogitsProcessorList([processor]),
            **kwargs,
        )

    def learned(ids: torch.Tensor, **kwargs) -> torch.Tensor:
        return hf_fvo.generate(model, ids, grammar=grammar, phi="learned",
                               max_new_tokens=args.max_new_tokens, **kwargs)  # fmt: skip

    for name, run in (("masking", masking), ("learned Φ", learned)):
        report(f"{name}, greedy", run(input_ids, do_sample=False)[0, n:].tolist(), grammar,
               tokenizer)  # fmt: skip
    for name, run in (("masking", masking), ("learned Φ", learned)):
        torch.manual_seed(0)
        rows = run(input_ids.expand(args.samples, -1), do_sample=True, top_k=0)
        for row in rows[:, n:].tolist():
            report(f"{name}, sampled", row, grammar, tokenizer)


def report(name: str, generated: list[int], grammar: Grammar, tokenizer) -> None:
    ends = [i for i, t in enumerate(generated) if t in grammar.eos_token_ids]
    body = generated[: ends[0]] if ends else generated
    text = tokenizer.decode(body, skip_special_tokens=True)
    state = grammar.walk(body)
    assert state is not None, "constrained generation never leaves the grammar"
    if grammar.is_accepting(state):
        print(f"{name}: {json.dumps(json.loads(text), ensure_ascii=False)}")
    else:
        print(
            f"{name}: {text}\n  incomplete after {len(generated)} tokens: still a valid prefix, "
            f"but at least {grammar.min_tokens_to_accept(state)} more tokens were needed"
        )


if __name__ == "__main__":
    main()
