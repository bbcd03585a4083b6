"""Grammar-constrained JSON with the embedded SmolLM2 model: masking against learned Φ.

Plain masking (``GrammarLogitsProcessor``) keeps every token inside the grammar but, greedy here,
starts a 30-digit integer and runs out of tokens mid-member. The learned estimator
(``phi="learned"``, weights shipped for this model) weighs each candidate by how likely the
model is to finish validly after it, and the same greedy call ends with a complete object.
The script reports whichever happens instead of pretending.

Run: python examples/grammar_masked_json.py [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import json

from transformers import LogitsProcessorList

import hf_fvo
from hf_fvo import Grammar
from hf_fvo.generation import GrammarLogitsProcessor
from hf_fvo.models import load_default_model, load_default_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "population_millions": {"type": "integer"},
        "continent": {"enum": ["Africa", "Asia", "Europe", "America", "Oceania"]},
    },
    "required": ["city", "population_millions", "continent"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
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
    processor = GrammarLogitsProcessor(grammar, prompt_length=input_ids.shape[1])
    masked = model.generate(
        input_ids,
        max_new_tokens=args.max_new_tokens,
        do_sample=False,
        logits_processor=LogitsProcessorList([processor]),
    )
    report("masking", masked[0, input_ids.shape[1] :].tolist(), grammar, tokenizer)
    learned = hf_fvo.generate(model, input_ids, grammar=grammar, phi="learned",
                              max_new_tokens=args.max_new_tokens, do_sample=False)  # fmt: skip
    report("learned Φ", learned[0, input_ids.shape[1] :].tolist(), grammar, tokenizer)


def report(name: str, generated: list[int], grammar: Grammar, tokenizer) -> None:
    text = tokenizer.decode(generated, skip_special_tokens=True)
    print(f"{name}: {text}")
    state = grammar.walk(generated)
    assert state is not None, "constrained generation never leaves the grammar"
    if grammar.is_accepting(state):
        print("  parsed:", json.loads(text))
    else:
        print(
            f"  incomplete after {len(generated)} tokens: still a valid prefix, but at least "
            f"{grammar.min_tokens_to_accept(state)} more tokens were needed"
        )


if __name__ == "__main__":
    main()
