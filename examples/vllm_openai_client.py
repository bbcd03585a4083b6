"""Ask a vLLM server that runs hf_fvo's processor for JSON of a schema (docs/vllm.md).

Start the server first (in the vLLM environment):

    vllm serve <model> --logits-processors hf_fvo.vllm:FVOProcessor
    # vLLM's CPU build: python -m vllm.entrypoints.openai.api_server --model <model> \\
    #     --logits-processors hf_fvo.vllm:FVOProcessor

then:

    python examples/vllm_openai_client.py --base-url http://localhost:8000/v1 --model <model>

Every answer is a complete instance of the schema within max_tokens; a schema hf_fvo cannot
serve (unsatisfiable, too large, too slow to compile) gets an error response naming why.
"""

from __future__ import annotations

import argparse
import json

from openai import OpenAI

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "population_millions": {"type": "integer", "minimum": 1, "maximum": 40},
    },
    "required": ["city", "population_millions"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://localhost:8000/v1")
    parser.add_argument("--model", required=True, help="the served model's name")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=40)
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused")
    out = client.completions.create(
        model=args.model,
        prompt="A large city and its population in millions, as JSON:",
        max_tokens=args.max_tokens,
        n=args.samples,
        # vllm_xargs take no nested objects: hf_fvo's arguments travel as JSON text
        extra_body={"vllm_xargs": {"hf_fvo": json.dumps({"json_schema": SCHEMA})}},
    )
    for choice in out.choices:
        print(json.dumps(json.loads(choice.text)))


if __name__ == "__main__":
    main()
