"""Audit a schema: does local masking bias it under this model? Prints TV(μ_proj, μ*) and the
over-/under-produced texts and writes a PNG (needs matplotlib: pip install "hf-fvo[plot]").

Run: python examples/audit_schema.py [--png audit.png] [--samples 20]
"""

from __future__ import annotations

import argparse

from hf_fvo import Grammar
from hf_fvo.eval import audit, plot_audit
from hf_fvo.models import load_default_model, load_default_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {"priority": {"enum": ["low", "medium", "high", "urgent"]}},
    "required": ["priority"],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--png", default="audit.png")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--tol", type=float, default=1e-6)
    args = parser.parse_args()
    tok, model = load_default_tokenizer(), load_default_model()
    g = Grammar.from_json_schema(
        SCHEMA, tok, whitespace="", vocab_size=model.config.vocab_size, backend="automaton"
    )  # a finite schema: the audit is exact
    messages = [{"role": "user", "content": "The production database is down. Reply with a "
                 "JSON object with priority in ['low', 'medium', 'high', 'urgent']."}]  # fmt: skip
    prompt = tuple(tok.apply_chat_template(messages, add_generation_prompt=True,
                                           return_dict=True)["input_ids"])  # fmt: skip
    report = audit(model, tok, g, prompt, samples=args.samples, tol=args.tol)
    print(report.summary())
    print(f"figure: {plot_audit(report, args.png)}")


if __name__ == "__main__":
    main()
