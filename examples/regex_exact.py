"""A regex with exact Φ: a year (19|20)[0-9]{2} is a finite language of 200 strings, so exact
future validity is a table lookup after one exploration, and sampling draws μ*.

Run: python examples/regex_exact.py [--samples 5]
"""

from __future__ import annotations

import argparse

import torch

import hf_fvo
from hf_fvo.models import load_default_model, load_default_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    g = hf_fvo.Grammar.from_regex(r"(19|20)[0-9]{2}", tok, vocab_size=model.config.vocab_size)
    messages = [{"role": "user", "content": "In which year did the Berlin Wall fall?"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]  # fmt: skip
    torch.manual_seed(0)
    out = hf_fvo.generate(model, ids.expand(args.samples, -1), grammar=g, phi="exact",
                          max_new_tokens=6, do_sample=True, top_k=0,
                          return_dict_in_generate=True)  # fmt: skip
    for row, cert in zip(out.sequences[:, ids.shape[1] :], out.certificates, strict=True):
        print(tok.decode(row, skip_special_tokens=True), f"(certified TV ≤ {cert.tv_bound:.1e})")


if __name__ == "__main__":
    main()
