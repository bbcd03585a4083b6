"""Collection: the modules and tests that need vLLM are collected only where it is installed
(`.ci/run` runs them in a second virtual environment with vLLM's CPU build)."""

import importlib.util

collect_ignore = (
    []
    if importlib.util.find_spec("vllm") is not None
    else ["hf_fvo/vllm/processor.py", "hf_fvo/vllm/tools.py", "tests/vllm"]
)
