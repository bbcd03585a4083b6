"""Grammar-masked JSON generation with the embedded SmolLM2 model.

Masking keeps every token inside the grammar but knows nothing of the length budget: with greedy
decoding the model here starts a huge integer and runs out of tokens mid-member. The script
reports that instead of pretending (Φ-reweighting, which counts remaining tokens, addresses it).

Run: python examples/grammar_masked_json.py [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import json

from transformers import LogitsProcessorList

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
    out = model.generate(
        input_ids,
        max_new_tokens=args.max_new_tokens,
        do_sample=False,
        logits_processor=LogitsProcessorList([processor]),
    )
    generated = out[0, input_ids.shape[1] :].tolist()
    text = tokenizer.decode(generated, skip_special_tokens=True)
    print(text)
    state = grammar.walk(generated)
    assert state is not None, "masking never leaves the grammar"
    if grammar.is_accepting(state):
        print("parsed:", json.loads(text))
    else:
        print(
            f"incomplete after {len(generated)} tokens: still a valid prefix, but at least "
            f"{grammar.min_tokens_to_accept(state)} more tokens were needed"
        )


if __name__ == "__main__":
    main()
