"""Task benchmarks: does the law a sampler draws from change what a user gets?

Built from instances nobody here wrote (MaskBench files: a schema and its valid instances):

- ``transcribe``: the instance is shown as YAML with its schema, and the model is asked for the
  JSON value. Scored against the instance: *exact* (the whole value, numbers by value, booleans
  apart from numbers, keys in any order) and *leaves* (the fraction of the instance's leaf
  values — scalars and empty containers, by path — that the output reproduces).
- ``shorten``: the same, with one string's ``maxLength`` (the longest string, of at least 12
  characters, that objects' properties reach) set to half its length in the instance, so that
  the constraint binds. Scored by *cut words*: whether that
  string ends inside a word of the source (a prefix of it that stops between two letters — the
  title a mask cuts off where the model would have ended it differently), and *leaves* on the
  other properties.

An output is parsed as JSON (an unconstrained one after removing a Markdown code fence); what
does not parse, or was refused, scores zero. :func:`run_task` draws one output with one engine;
:func:`summarize` gives accuracy with a 95 % interval and seconds per task.

Example:
    >>> from hf_fvo.eval.tasks import score
    >>> score('{"b": [1, 2.0], "a": true}', {"a": True, "b": [1, 2]})["exact"]
    True
    >>> round(score('{"a": 1, "b": [1]}', {"a": True, "b": [1, 2]})["leaves"], 2)  # b[0] only
    0.33
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from hf_fvo.errors import GrammarError, InvalidArgumentError
from hf_fvo.generation import generate
from hf_fvo.grammar import Grammar

__all__ = [
    "ENGINES",
    "TASK_SUITES",
    "build_tasks",
    "check_engines",
    "load_tasks",
    "markdown",
    "parse_output",
    "run_task",
    "run_tasks",
    "score",
    "summarize",
    "task_prompt",
]

#: the rows of a task table: one engine each (``particles=N`` for any N works as well)
#: ``beams=N``: beam search through hf_fvo scored by log p(x) (``length_penalty=0.0``,
#: ``early_stopping="never"``); ``beams=N normalised``: Transformers' default length scoring;
#: ``beams=N keep_greedy``: ``generate(num_beams=N, keep_greedy=True)`` (the likelier by log p(x)
#: of masked greedy's output and the normalised beams'); a sampling engine (``unconstrained``,
#: ``masked``, ``particles=N``, ``xgrammar``, ``llguidance``) followed by `` t=τ`` samples at
#: temperature τ (particles: μ* of the warped model); ``xgrammar greedy`` and ``llguidance
#: greedy``: the peers' processors under greedy decoding; ``beams=N lookahead``: beams scored by
#: log p(prefix) + log Φ̂ (learned Φ̂), finished ones by log p(x); ``particles=N [t=τ] best``:
#: N draws from the final weighted particles, the likeliest by log p(x) returned
ENGINES = ("unconstrained", "masked greedy", "beams=4", "masked", "particles=8", "particles=32",
           "xgrammar", "llguidance")  # fmt: skip
_CANONICAL_BEAMS = {"length_penalty": 0.0, "early_stopping": "never"}
_ENGINE_FAMILY = re.compile(
    r"(?P<sampler>unconstrained|masked|particles=[1-9]\d*|xgrammar|llguidance)"
    r"(?: t=(?P<temperature>\d+(?:\.\d+)?))?"
    r"|(?P<best>particles=[1-9]\d*(?: t=\d+(?:\.\d+)?)? best)"
    r"|(?P<greedy_peer>xgrammar|llguidance) greedy"
    r"|(?P<beams>beams=[1-9]\d*( normalised| keep_greedy| lookahead)?)"
)
_SCHEMA_CHARS = 1500  # longest schema text put in a prompt
_FENCE = re.compile(r"```(?:json)?\s*\n?(.*?)```", re.S)


def task_prompt(instance: Any, schema: Any) -> str:
    """The request: the instance as YAML, the schema, and the JSON asked for."""
    import yaml

    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > _SCHEMA_CHARS:
        text = text[:_SCHEMA_CHARS] + " …"
    shown = yaml.safe_dump(instance, sort_keys=False, allow_unicode=True).strip()
    return (
        f"Here is a record in YAML:\n\n{shown}\n\nWrite the same record as one JSON value "
        f"that is valid under this JSON schema:\n{text}\n\nAnswer with the JSON only."
    )


def _leaves(value: Any, path: tuple = ()) -> dict[tuple, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _leaves(item, (*path, key)).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in _leaves(item, (*path, i)).items()}
    return {path: value}


def _same(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, booleans apart from numbers, keys in any order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def parse_output(text: str, fenced: bool = False) -> tuple[bool, Any]:
    """``(parsed, value)``: the text as one JSON value; with ``fenced``, the first Markdown code
    block's content where the whole text is not JSON."""
    try:
        return True, json.loads(text)
    except json.JSONDecodeError:
        pass
    if fenced and (m := _FENCE.search(text)):
        try:
            return True, json.loads(m.group(1))
        except json.JSONDecodeError:
            pass
    return False, None


def _at(value: Any, path: Sequence) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def score(text: str, instance: Any, *, fenced: bool = False, field: Sequence | None = None,
          source: str | None = None) -> dict[str, Any]:  # fmt: skip
    """How well ``text`` reproduces ``instance``: ``parsed``, ``exact`` and ``leaves`` (see
    the module); with ``field`` (a shorten task: the path of keys to the string whose text was
    ``source``) also ``cut_word`` (``None`` where the output has no string there), and
    ``exact`` and ``leaves`` over the other leaves.

    Example:
        >>> from hf_fvo.eval.tasks import score
        >>> s = score('{"t": "The quick br", "n": 1}', {"t": "The quick brown fox", "n": 1},
        ...           field=["t"], source="The quick brown fox")
        >>> s["cut_word"], s["exact"]
        (True, True)
    """
    parsed, value = parse_output(text, fenced)
    out: dict[str, Any] = {"parsed": parsed, "exact": False, "leaves": 0.0, "cut_word": None}
    if not parsed:
        return out
    expected, actual = _leaves(instance), _leaves(value)
    if field is not None:
        expected.pop(tuple(field), None)
        actual.pop(tuple(field), None)
        written = _at(value, field)
        if isinstance(written, str) and source is not None:
            n = len(written)
            out["cut_word"] = bool(n and source.startswith(written) and n < len(source)
                                   and written[-1].isalnum() and source[n].isalnum())  # fmt: skip
    out["exact"] = actual.keys() == expected.keys() and all(
        _same(actual[p], v) for p, v in expected.items()
    )
    hits = sum(path in actual and _same(actual[path], leaf) for path, leaf in expected.items())
    out["leaves"] = hits / max(len(expected), 1)
    return out


_FIXED = {
    "enum",
    "const",
    "pattern",
    "format",
    "minLength",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
}  # a string node with any of these is not shortened


def _string_nodes(schema: Any, value: Any, path: tuple = ()) -> list[tuple[tuple, dict, str]]:
    """``(path, schema node, text)`` for each string of ``value`` reached through objects'
    ``properties`` alone, whose node is a plain string schema."""
    if not isinstance(schema, dict):
        return []
    if isinstance(value, str):
        if schema.get("type", "string") == "string" and not set(schema) & _FIXED:
            return [(path, schema, value)]
        return []
    props = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(props, dict):
        return []
    return [found for key, item in value.items() if key in props
            for found in _string_nodes(props[key], item, (*path, key))]  # fmt: skip


def _with_max_length(schema: dict, path: tuple, limit: int) -> dict:
    if not path:
        return {**schema, "maxLength": min(limit, schema.get("maxLength", limit))}
    props = schema["properties"]
    inner = _with_max_length(props[path[0]], path[1:], limit)
    return {**schema, "properties": {**props, path[0]: inner}}


def _shortened(schema: Any, instance: Any) -> tuple[Any, list, str] | None:
    """The schema with one string's ``maxLength`` halved below the instance's text (the
    longest string of at least 12 characters that objects' ``properties`` reach with a plain
    string schema), its path and its text; or ``None``."""
    found = [(p, t) for p, _, t in _string_nodes(schema, instance)
             if len(t) >= 12]  # fmt: skip
    if not found:
        return None
    path, text = max(found, key=lambda f: len(f[1]))
    return _with_max_length(schema, path, len(text) // 2), list(path), text


def build_tasks(rows: list[dict], tokenizer: Any, kind: str = "transcribe", *,
                count: int | None = None, most_tokens: int = 160) -> list[dict]:  # fmt: skip
    """Tasks from MaskBench-style rows (``schema``, ``tests`` with ``valid`` and ``data``): one
    per file, its first valid object or array instance whose indented JSON takes at most
    ``most_tokens`` tokens, which hf_fvo's default grammar for the schema admits, and whose
    schema text fits a prompt. The budget is twice the indented instance's tokens plus 32.

    Raises:
        InvalidArgumentError: an unknown ``kind``.
    """
    if kind not in ("transcribe", "shorten"):
        raise InvalidArgumentError(f"kind must be 'transcribe' or 'shorten', not {kind!r}")
    tasks = []
    for row in rows:
        if count is not None and len(tasks) >= count:
            break
        schema = row["schema"]
        if len(json.dumps(schema, separators=(",", ":"))) > _SCHEMA_CHARS:
            continue
        for case in row["tests"]:
            data = case["data"]
            if not case["valid"] or not isinstance(data, (dict, list)) or not data:
                continue
            field = source = None
            task_schema = schema
            if kind == "shorten":
                found = _shortened(schema, data)
                if found is None:
                    continue
                task_schema, field, source = found
            tokens = len(tokenizer.encode(json.dumps(data, indent=2, ensure_ascii=False)))
            if tokens > most_tokens:
                continue
            try:
                g = Grammar.from_json_schema(task_schema, tokenizer)
            except (GrammarError, RecursionError):
                break
            if kind == "transcribe":
                from hf_fvo.eval.instances import in_schema_order

                state = g.walk(tokenizer.encode(
                    json.dumps(in_schema_order(data, schema), ensure_ascii=False)))  # fmt: skip
                if state is None or not g.is_accepting(state):
                    continue
            tasks.append({
                "name": f"{row.get('file', row.get('description', ''))}#{len(tasks)}",
                "task": kind, "schema": json.dumps(task_schema), "instance": json.dumps(data),
                "field": field, "source": source, "prompt": task_prompt(data, task_schema),
                "max_new_tokens": 2 * tokens + 32,
            })  # fmt: skip
            break
    return tasks


def _chat_ids(tokenizer: Any, prompt: str) -> torch.Tensor:
    out = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True, return_dict=True)  # fmt: skip
    return torch.tensor([out["input_ids"]])


def run_task(task: dict, engine: str, model: Any, tokenizer: Any, *, seed: int = 0,
             whitespace: str | None = "pretty", wrapped: Any = None) -> dict[str, Any]:  # fmt: skip
    """One output of ``engine`` (one of :data:`ENGINES`) on ``task``, scored, timed.

    ``wrapped``: ``outlines.from_transformers(model, tokenizer)``, for the peers' rows.

    Raises:
        InvalidArgumentError: what :func:`check_engines` refuses.
    """
    import transformers

    check_engines([engine])
    schema, instance = json.loads(task["schema"]), json.loads(task["instance"])
    ids = _chat_ids(tokenizer, task["prompt"])
    budget = task["max_new_tokens"]
    eos = set(tokenizer.convert_tokens_to_ids([tokenizer.eos_token]))
    base, temperature = _engine_parts(engine)
    greedy = engine.endswith(" greedy")
    # Transformers' sampling with every truncation off, at the engine's temperature
    sampling = {"do_sample": not greedy, "top_k": None if greedy else 0,
                **({} if temperature is None else {"temperature": temperature})}  # fmt: skip
    torch.manual_seed(seed)
    t0, refused = time.perf_counter(), None
    new: list[int] = []
    try:
        if base == "unconstrained":
            out = model.generate(ids, max_new_tokens=budget, pad_token_id=tokenizer.eos_token_id,
                                 **sampling)  # fmt: skip
        elif base in ("xgrammar", "llguidance"):
            from outlines.backends import get_json_schema_logits_processor

            proc = get_json_schema_logits_processor(base, wrapped, task["schema"])
            out = model.generate(ids, logits_processor=transformers.LogitsProcessorList([proc]),
                                 max_new_tokens=budget, pad_token_id=tokenizer.eos_token_id,
                                 **sampling)  # fmt: skip
        else:
            grammar = Grammar.from_json_schema(
                schema, tokenizer, whitespace=whitespace, vocab_size=model.config.vocab_size
            )
            if engine.startswith("beams="):
                beams, _, scoring = engine.removeprefix("beams=").partition(" ")
                scored = ({} if scoring == "normalised" else {"keep_greedy": True}
                          if scoring == "keep_greedy" else _CANONICAL_BEAMS)  # fmt: skip
                phi = "learned" if scoring == "lookahead" else "uniform"
                out = generate(model, ids, grammar=grammar, phi=phi, do_sample=False,
                               num_beams=int(beams), max_new_tokens=budget, **scored)  # fmt: skip
            else:
                particles = (int(base.split("=")[1]) if base.startswith("particles=")
                             else None)  # fmt: skip
                draws = particles if engine.endswith(" best") else 1
                out = generate(model, ids, grammar=grammar, phi="uniform", particles=particles,
                               num_return_sequences=draws, max_new_tokens=budget,
                               **sampling)  # fmt: skip
                out = out[_likeliest(model, ids, out[:, ids.shape[1] :].tolist(), eos), None]
        new = out[0, ids.shape[1] :].tolist()
    except InvalidArgumentError:
        raise
    except GrammarError as exc:  # a refusal (a budget, a check): scored as wrong
        refused = f"{type(exc).__name__}: {exc}"[:200]
    seconds = time.perf_counter() - t0
    end = next((i for i, t in enumerate(new) if t in eos), None)
    logp = _log_likelihood(model, ids, new if end is None else new[: end + 1]) if new else None
    text = tokenizer.decode(new if end is None else new[:end], skip_special_tokens=True)
    result = score(text, instance, fenced=engine == "unconstrained", field=task.get("field"),
                   source=task.get("source"))  # fmt: skip
    valid = None
    if result["parsed"]:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        valid = not any(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(
            parse_output(text, engine == "unconstrained")[1]))  # fmt: skip
    return {"name": task["name"], "task": task["task"], "engine": engine, "seed": seed,
            "seconds": round(seconds, 3), "tokens": len(new) if end is None else end,
            "ended": end is not None, "refused": refused, "valid": valid, "text": text[:2000],
            "logp": logp, **result}  # fmt: skip


def _likeliest(model: Any, ids: torch.Tensor, rows: list[list[int]], eos: set[int]) -> int:
    """The index of the row of largest log p(x) (one forward per distinct row; 0 for one)."""
    if len(rows) == 1:
        return 0
    ended = [tuple(r[: next((i + 1 for i, t in enumerate(r) if t in eos), len(r))]) for r in rows]
    logp = {x: _log_likelihood(model, ids, list(x)) for x in set(ended)}
    return max(range(len(rows)), key=lambda i: logp[ended[i]])


@torch.no_grad()
def _log_likelihood(model: Any, ids: torch.Tensor, new: list[int]) -> float:
    """log p(new | ids) under the model itself (no processor), EOS included when it is there:
    what the mode decoders maximise."""
    whole = torch.cat([ids, torch.tensor([new], dtype=ids.dtype)], dim=1).to(model.device)
    logits = model(input_ids=whole).logits[0, ids.shape[1] - 1 : -1].double().cpu()
    picked = torch.log_softmax(logits, -1).gather(1, whole[0, ids.shape[1] :, None].cpu())
    return float(picked.sum())


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, mid - half), min(1.0, mid + half))


def summarize(records: list[dict]) -> list[dict[str, Any]]:
    """Per task kind and engine: tasks, exact match (rate and Wilson 95 % interval), mean leaf
    fraction (± 1.96 standard errors), valid outputs, cut words (shorten), mean seconds.

    Example:
        >>> from hf_fvo.eval.tasks import summarize
        >>> r = {"task": "transcribe", "engine": "masked", "exact": True, "leaves": 1.0,
        ...      "valid": True, "cut_word": None, "seconds": 1.0, "refused": None}
        >>> summarize([r, {**r, "exact": False, "leaves": 0.5}])[0]["exact"]
        0.5
    """
    out = []
    keys = dict.fromkeys((r["task"], r["engine"]) for r in records)
    for task, engine in keys:
        rs = [r for r in records if r["task"] == task and r["engine"] == engine]
        n = len(rs)
        k = sum(bool(r["exact"]) for r in rs)
        leaves = [r["leaves"] for r in rs]
        mean = sum(leaves) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in leaves) / max(n - 1, 1))
        cuts = [r["cut_word"] for r in rs if r["cut_word"] is not None]
        out.append({
            "task": task, "engine": engine, "tasks": n, "exact": k / n,
            "exact_ci": _wilson(k, n), "leaves": mean, "leaves_half": 1.96 * sd / math.sqrt(n),
            "valid": sum(bool(r["valid"]) for r in rs),
            "refused": sum(bool(r["refused"]) for r in rs),
            "cut_words": sum(cuts), "with_field": len(cuts),
            "cut_ci": _wilson(sum(cuts), len(cuts)),
            "seconds": sum(r["seconds"] for r in rs) / n,
        })  # fmt: skip
    return out


TASK_SUITES = {
    p.stem: p for p in sorted((Path(__file__).parent / "suites" / "tasks").glob("*.jsonl"))
}


def load_tasks(name: str) -> list[dict]:
    """A task suite: ``"transcribe"`` or ``"shorten"`` (built from MaskBench's development
    sample by ``benchmarks/tasks.py --build``), or a JSONL file of :func:`build_tasks` rows.

    Raises:
        FileNotFoundError: neither a shipped task suite nor an existing file.

    Example:
        >>> from hf_fvo.eval.tasks import load_tasks
        >>> tasks = load_tasks("transcribe")
        >>> len(tasks) >= 150, sorted(tasks[0])[:3]
        (True, ['field', 'instance', 'max_new_tokens'])
    """
    path = TASK_SUITES.get(name, Path(name))
    if not path.is_file():
        raise FileNotFoundError(f"no task suite {name!r}: {sorted(TASK_SUITES)} or a JSONL file")
    return [json.loads(line) for line in path.open()]


def check_engines(engines: Sequence[str]) -> list[str]:
    """Refuse an unknown engine, or a peer engine whose packages (Outlines and the engine) are
    not installed; return the peer engines asked for.

    Example:
        >>> from hf_fvo.eval.tasks import check_engines
        >>> check_engines(["masked", "particles=16", "beams=8 normalised", "beams=4 keep_greedy"])
        []
    """
    import importlib.util

    for engine in engines:
        if engine not in ENGINES and not _ENGINE_FAMILY.fullmatch(engine):
            raise InvalidArgumentError(
                f"unknown engine {engine!r}: one of {', '.join(ENGINES)} (or particles=N, "
                "beams=N, beams=N normalised, beams=N keep_greedy, xgrammar greedy, "
                "llguidance greedy, and a sampling engine followed by ' t=τ')"
            )
        if _engine_parts(engine)[1] == 0.0:
            raise InvalidArgumentError(
                f"engine {engine!r}: a temperature must be above 0 (greedy decoding is "
                "'masked greedy', 'xgrammar greedy' or 'llguidance greedy')"
            )
    peers = sorted({base for base, _ in map(_engine_parts, engines)} & {"xgrammar", "llguidance"})
    missing = [p for p in ("outlines", *peers) if peers and importlib.util.find_spec(p) is None]
    if missing:
        raise InvalidArgumentError(
            f"the engines {peers} run through Outlines and need {missing} installed "
            f"(pip install {' '.join(missing)}), or leave them out"
        )
    return peers


def _engine_parts(engine: str) -> tuple[str, float | None]:
    """An engine's name without its temperature (``"particles=8 t=0.5"`` → ``"particles=8"``,
    ``"xgrammar greedy"`` → ``"xgrammar"``) and the temperature (``None``: 1, or greedy)."""
    found = _ENGINE_FAMILY.fullmatch(engine)
    if found is not None and found["best"] is not None:
        found = _ENGINE_FAMILY.fullmatch(engine.removesuffix(" best"))
    if found is None or found["beams"] is not None:
        return engine, None
    if found["greedy_peer"] is not None:
        return found["greedy_peer"], None
    t = found["temperature"]
    return found["sampler"], None if t is None else float(t)


def run_tasks(tasks: list[dict], engines: Sequence[str], model: Any, tokenizer: Any, *,
              seed: int = 0, whitespace: str | None = "pretty",
              progress: Callable[[dict], None] | None = None) -> list[dict]:  # fmt: skip
    """Every engine on every task, interleaved: the engines of one task run one after another
    with the same seed (``seed`` + the task's index); ``progress`` gets each record.

    Raises:
        InvalidArgumentError: what :func:`check_engines` refuses, before any task runs.
    """
    peers = check_engines(engines)
    wrapped = None
    if peers:
        import outlines

        wrapped = outlines.from_transformers(model, tokenizer)
    records = []
    for i, task in enumerate(tasks):
        for engine in engines:
            records.append(run_task(task, engine, model, tokenizer, seed=seed + i,
                                    whitespace=whitespace, wrapped=wrapped))  # fmt: skip
            if progress is not None:
                progress(records[-1])
    return records


def markdown(summary: list[dict]) -> str:
    """:func:`summarize`'s rows as a markdown table."""
    lines = [
        "| task | engine | tasks | exact (95 % CI) | leaves (± 95 %) | valid | refused "
        "| cut words (95 % CI) | s / task |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        lo, hi = s["exact_ci"]
        cut = "—"
        if s["with_field"]:
            clo, chi = s["cut_ci"]
            cut = f"{s['cut_words']}/{s['with_field']} ({clo:.2f}–{chi:.2f})"
        lines.append(
            f"| {s['task']} | {s['engine']} | {s['tasks']} | {s['exact']:.2f} ({lo:.2f}–{hi:.2f}) "
            f"| {s['leaves']:.2f} ± {s['leaves_half']:.2f} | {s['valid']}/{s['tasks']} "
            f"| {s['refused']} | {cut} | {s['seconds']:.1f} |"
        )
    return "\n".join(lines)
