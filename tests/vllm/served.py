"""Development schemas hf_fvo serves, shared by the vLLM engine and server tests and the
throughput benchmark (no vLLM import)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hf_fvo.grammar import GrammarCompiler
from hf_fvo.vllm import KEY, RequestSpec, admit

DATA = Path(__file__).resolve().parents[1] / "data"
ROWS = [json.loads(line) for name in ("jsonschemabench_slice", "maskbench_slice")
        for line in (DATA / f"{name}.jsonl").open()]  # fmt: skip
EOS = 2  # SmolLM2's <|im_end|>, where vLLM stops
# the KV cache, sized in bytes: on vLLM's CPU build `gpu_memory_utilization` is a fraction of the
# memory node vLLM sees, and on a 12 GiB node 0.1 of it is less than the float32 model, so the
# engine would not start; 1 GiB holds ~22k tokens of SmolLM2 (fp32), more than the tests send
KV_CACHE_BYTES = 1 << 30


def served_schemas(tok: Any, count: int, max_need: int = 40) -> list[tuple[dict, dict, int]]:
    """``count`` development schemas hf_fvo serves whose shortest member takes at most
    ``max_need`` tokens: (row, the request's ``hf_fvo`` arguments, that member's tokens + EOS).
    MaskBench rows are the spec's language (``strict=False``)."""
    compiler = GrammarCompiler.shared(tok, len(tok), eos_token_id=EOS)
    out = []
    for row in ROWS:
        args = {"json_schema": row["schema"], "strict": "tests" not in row}
        try:
            g = admit(RequestSpec.from_args({KEY: args}), compiler, None)
        except ValueError:
            continue
        need = g.tokens_to_accept(g.initial_state) + 1
        if need <= max_need:
            out.append(({**row, "name": row.get("name") or row["file"]}, args, need))
        if len(out) == count:
            return out
    raise AssertionError(f"only {len(out)} development schemas are served within {max_need}")


def root_cause(log: str) -> str:
    """The line of a vLLM start-up log that says why it failed: the first exception its worker
    or engine core logged (``ValueError: Available memory on node 0 …``), not the front end's
    "Engine core initialization failed. See root cause above", with the log's tail beneath."""
    causes = [line.strip() for line in log.splitlines()
              if re.search(r"\b\w*(Error|Exception): ", line)
              and "See root cause above" not in line
              and "Engine core initialization failed" not in line]  # fmt: skip
    head = f"root cause: {causes[0]}" if causes else "root cause: not found in the log"
    return f"{head}\n--- the log's last 4,000 characters ---\n{log[-4000:]}"


def validate(schema: Any, text: str) -> None:
    """Raise unless ``text`` is a JSON instance of ``schema`` (its own draft's validator)."""
    import jsonschema

    instance = json.loads(text)
    jsonschema.validators.validator_for(schema)(schema).validate(instance)
