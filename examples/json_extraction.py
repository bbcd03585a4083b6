"""JSON extraction with the embedded SmolLM2: a schema with free-text and enum fields, sampled
under the default estimator (masking). Free text makes the language infinite, where the shipped
learned-Φ weights (trained on finite languages) would be masking too, with a warning.

Run: python examples/json_extraction.py [--max-new-tokens 40] [--samples 3]
"""

from __future__ import annotations

import argparse
import json

import torch

import hf_fvo
from hf_fvo.models import load_default_model, load_default_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {
        "product": {"type": "string", "maxLength": 16},
        "sentiment": {"enum": ["positive", "negative", "mixed"]},
    },
    "required": ["product", "sentiment"],
}
REVIEW = "I love the new Aurora headphones, but the battery dies after two hours."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    g = hf_fvo.Grammar.from_json_schema(SCHEMA, tok, whitespace="",
                                        vocab_size=model.config.vocab_size)  # fmt: skip
    messages = [{"role": "user", "content": f"Extract product and sentiment as JSON: {REVIEW}"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]  # fmt: skip
    torch.manual_seed(0)
    out = hf_fvo.generate(model, ids.expand(args.samples, -1), grammar=g,
                          max_new_tokens=args.max_new_tokens, do_sample=True, top_k=0)  # fmt: skip
    for row in out[:, ids.shape[1] :]:
        text = tok.decode(row, skip_special_tokens=True)
        print(json.dumps(json.loads(text)))  # every sample is a member: valid JSON


if __name__ == "__main__":
    main()
