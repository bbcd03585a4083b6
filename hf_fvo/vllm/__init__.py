"""hf_fvo inside vLLM: a logits processor (:class:`FVOProcessor`) that applies hf_fvo's
grammars, budget-exact rule and forward-free Φ̂ to each request that asks for them in
``SamplingParams.extra_args["hf_fvo"]``, plus :func:`exact_table` (exact Φ on finite languages)
and :func:`importance_weights` (reweighting masked draws toward μ*). ``docs/vllm.md`` shows the
install lines, ``vllm serve`` and an OpenAI-client request.

Importing this package needs vLLM only for :class:`FVOProcessor`, :func:`exact_table` and
:func:`importance_weights` (loaded on first use); the request spec, the admission workers and
the per-request processor are plain hf_fvo.
"""

from typing import Any

from hf_fvo.vllm.admission import Admission, ModelInfo, admit
from hf_fvo.vllm.request import RequestProcessor
from hf_fvo.vllm.spec import GRAMMAR_KINDS, KEY, PHI_NAMES, RequestSpec, check_sampling

__all__ = [
    "GRAMMAR_KINDS",
    "KEY",
    "PHI_NAMES",
    "Admission",
    "FVOProcessor",
    "ModelInfo",
    "RequestProcessor",
    "RequestSpec",
    "admit",
    "check_sampling",
    "exact_table",
    "importance_weights",
]

_LAZY = {"FVOProcessor": "hf_fvo.vllm.processor", "exact_table": "hf_fvo.vllm.tools",
         "importance_weights": "hf_fvo.vllm.tools"}  # fmt: skip


def __getattr__(name: str) -> Any:  # vLLM's imports only where they are needed
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hf_fvo.vllm' has no attribute {name!r}")
