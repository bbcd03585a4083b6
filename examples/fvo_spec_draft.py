"""FVO-Spec: speculative decoding whose verifier samples μ*, through the ordinary
generate(assistant_model=draft) call. The draft is a bfloat16 copy of SmolLM2.

Run: python examples/fvo_spec_draft.py [--samples 4]
"""

from __future__ import annotations

import argparse
import copy

import torch

import hf_fvo
from hf_fvo.models import load_default_model, load_default_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {"status": {"enum": ["ok", "error", "pending"]}},
    "required": ["status"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    draft = copy.deepcopy(model).to(torch.bfloat16)
    g = hf_fvo.Grammar.from_json_schema(SCHEMA, tok, whitespace="",
                                        vocab_size=model.config.vocab_size,
                                        backend="automaton")  # fmt: skip
    messages = [{"role": "user", "content": "Reply with a JSON object with status in "
                 "['ok', 'error', 'pending']."}]  # fmt: skip
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]  # fmt: skip
    phi = hf_fvo.phi.ExactPhi(g, model, tol=1e-6)  # built once, shared with the draft
    torch.manual_seed(0)
    for _ in range(args.samples):
        out = hf_fvo.generate(model, ids, grammar=g, phi=phi, assistant_model=draft,
                              draft_phi="same", do_sample=True, top_k=0, max_new_tokens=16,
                              return_dict_in_generate=True)  # fmt: skip
        text = tok.decode(out.sequences[0, ids.shape[1] :], skip_special_tokens=True)
        print(f"{text}  acceptance {out.speculation.acceptance_rate:.2f}")


if __name__ == "__main__":
    main()
