"""The vLLM logits processor: hf_fvo's grammars, budget rule and Φ̂ per request.

Register it with ``LLM(..., logits_processors=[FVOProcessor])`` or
``vllm serve MODEL --logits-processors hf_fvo.vllm:FVOProcessor``; a request opts in with
``SamplingParams(extra_args={"hf_fvo": {...}})`` (the OpenAI server: ``vllm_xargs``). Its
:meth:`~FVOProcessor.validate_params` runs in vLLM's front end when a request arrives and admits
the grammar in a worker process (:mod:`hf_fvo.vllm.admission`), so a bad one gets an error
response; the engine then builds one :class:`~hf_fvo.vllm.request.RequestProcessor` per
sequence (each of ``n`` samples has its own).

The engine's batch is one grammar step (:meth:`FVOProcessor.apply`): the masking requests'
admissible sets are filled together — per grammar, once per distinct state and budget, the
parser's masks in llguidance's threads — into one packed bitmask that masks their logits in one
operation; the rest (Φ̂ estimators that read the logits) go row by row. vLLM calls
:meth:`~FVOProcessor.update_state` before each forward with the requests' tokens so far, so that
step starts then, in a worker thread, and overlaps the forward (``HF_FVO_VLLM_OVERLAP=0`` turns
that off); where vLLM schedules asynchronously the last token is not known yet and the step
runs in :meth:`~FVOProcessor.apply`.

This is vLLM's V1 interface, which its CPU build and its V1 GPU runner use. vLLM refuses
custom logits processors together with speculative decoding on that runner (its rows are not
per draft token); the V2 runner's per-draft-row interface is not implemented here.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from hf_fvo.errors import GrammarError, InvalidArgumentError
from hf_fvo.generation.processors import FVOLogitsProcessor, MaskedRow, batch_words, mask_batch
from hf_fvo.lru import LRU
from hf_fvo.vllm.admission import Admission, ModelInfo, compiler_for
from hf_fvo.vllm.request import RequestProcessor, end_now, shareable
from hf_fvo.vllm.spec import KEY, RequestSpec, check_sampling

__all__ = ["FVOProcessor"]

_log = logging.getLogger("hf_fvo.vllm")
_GATES: dict[ModelInfo, Admission] = {}
_GATES_LOCK = threading.Lock()


def _max_bytes() -> int:
    return int(os.environ.get("HF_FVO_VLLM_MAX_GRAMMAR_BYTES", 262_144))


def _front_end_model() -> ModelInfo:
    """The served model, seen from vLLM's front end. vLLM 0.32 calls ``validate_params`` with
    the request's params only, from its ``InputProcessor``, which holds the model's config."""
    from vllm.config import get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    if config is not None:
        return ModelInfo.from_config(config.model_config)
    frame = inspect.currentframe()
    while frame is not None:
        model_config = getattr(frame.f_locals.get("self"), "model_config", None)
        if model_config is not None and hasattr(model_config, "get_vocab_size"):
            return ModelInfo.from_config(model_config)
        frame = frame.f_back
    raise GrammarError(
        "hf_fvo cannot find the served model's configuration in vLLM's front end (a vLLM "
        "version whose request admission hf_fvo does not know)"
    )


def _beside_the_forward() -> None:
    """Run the calling thread (the grammar step's) on the cores the forward does not use.

    vLLM's CPU worker pins each OpenMP thread of the forward to one core, the thread that
    starts the grammar thread among them, and a new thread inherits its creator's mask: the
    grammar step would then take turns with the forward on its core while vLLM's reserved core
    has time to spare. Where no thread of the process is pinned (vLLM's GPU workers) or no
    other core is left, the mask stays as it is (Linux: a thread's own mask)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    forward = set(os.sched_getaffinity(0))
    try:
        for task in os.listdir("/proc/self/task"):
            mask = os.sched_getaffinity(int(task))
            if len(mask) == 1:  # (a pinned thread: one of the forward's)
                forward |= mask
    except OSError:  # (no /proc, or a thread that ended meanwhile: what was read serves)
        pass
    others = set(range(os.cpu_count() or 1)) - forward
    if not others:
        return
    try:
        os.sched_setaffinity(0, others)
    except (OSError, ValueError):  # none of them is this process's to use (a cpuset): stay
        _log.debug("hf_fvo: the grammar thread stays on the forward's cores", exc_info=True)


# a row's step from the worker thread: (its request, the tokens it was read from, packed set)
_Prepared = tuple[RequestProcessor, tuple[int, ...], np.ndarray]


class FVOProcessor(AdapterLogitsProcessor):
    """hf_fvo inside vLLM: each request with ``extra_args["hf_fvo"]`` samples its grammar's
    language within ``max_tokens`` (no output is ever cut), reweighted by its Φ̂.

    ``extra_args["hf_fvo"]`` holds exactly one grammar — ``json_schema``, ``regex``,
    ``lark``, ``ebnf`` or ``choices`` — and optionally ``whitespace``, ``strict``,
    ``key_order``, ``formats`` (as in :meth:`Grammar.from_json_schema
    <hf_fvo.grammar.Grammar.from_json_schema>`) and ``phi``: ``"uniform"`` (masking, the
    default), ``"onestep"``, ``"learned"`` (with ``weights``: a folder or Hub id) or
    ``"table"`` (exact Φ on a finite language, with the ``table`` from
    :func:`hf_fvo.vllm.exact_table`). Requests without it are left alone.

    Server limits (environment): ``HF_FVO_VLLM_MAX_GRAMMAR_BYTES`` (262144),
    ``HF_FVO_VLLM_COMPILE_SECONDS`` (10), ``HF_FVO_VLLM_ADMISSION_WORKERS`` (2).
    ``HF_FVO_VLLM_CPU_FILE=PATH`` writes the grammar step's CPU seconds so far (both threads;
    rows, steps) as JSON to ``PATH.<pid>`` after every engine step.

    Example:
        >>> from hf_fvo.vllm import FVOProcessor
        >>> FVOProcessor.__module__
        'hf_fvo.vllm.processor'
    """

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        spec = RequestSpec.from_args(sampling_params.extra_args, max_bytes=_max_bytes())
        if spec is None:
            return
        check_sampling(sampling_params)
        model = _front_end_model()
        with _GATES_LOCK:
            if model not in _GATES:
                _GATES[model] = Admission(
                    model,
                    workers=int(os.environ.get("HF_FVO_VLLM_ADMISSION_WORKERS", 2)),
                    seconds=float(os.environ.get("HF_FVO_VLLM_COMPILE_SECONDS", 10)),
                )
            gate = _GATES[model]
        gate.check(spec, sampling_params.max_tokens)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        if getattr(vllm_config, "speculative_config", None) is not None:
            # this runner scores one row per request, not one per draft token: the verifier
            # would accept drafts against the unconstrained law
            raise GrammarError(
                "hf_fvo's vLLM processor cannot run with speculative decoding on vLLM's V1 runner "
                "(one logits row per request, none per draft token); serve without "
                "--speculative-config"
            )
        self._model = ModelInfo.from_config(vllm_config.model_config)
        self._estimators: LRU[tuple[str, int | None, tuple[int, ...]], Any] = LRU(256)
        # the live requests' processors, by grammar, budget and EOS: identical requests (``n``
        # samples, a schema many clients send with one max_tokens) share their grammar states
        # and budget checks; a processor goes with the last request holding it
        self._live: weakref.WeakValueDictionary[
            tuple[str, int | None, tuple[int, ...]], FVOLogitsProcessor
        ] = weakref.WeakValueDictionary()
        overlap = os.environ.get("HF_FVO_VLLM_OVERLAP", "1") != "0"
        self._worker = (
            ThreadPoolExecutor(1, "hf_fvo-grammar", initializer=_beside_the_forward)
            if overlap
            else None
        )
        self._next: Future[dict[int, _Prepared]] | None = None
        where = os.environ.get("HF_FVO_VLLM_CPU_FILE")
        self._cpu_file = None if not where else f"{where}.{os.getpid()}"
        self._cpu = {"seconds": 0.0, "rows": 0, "steps": 0}  # the grammar step's, so far
        self._cpu_lock = threading.Lock()
        if self._cpu_file is not None:
            try:
                self._write_cpu()
            except OSError as e:
                raise InvalidArgumentError(
                    f"HF_FVO_VLLM_CPU_FILE={where!r}: cannot write {self._cpu_file!r} ({e})"
                ) from e

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: Any) -> None:
        """vLLM's batch changes, before the forward; then the masking rows' grammar step
        starts in the worker thread, to overlap the forward."""
        start = time.thread_time()  # (new requests' processors are built here)
        self._prepared()  # a step started and never applied (e.g. a step without sampling)
        super().update_state(batch_update)
        if self._worker is not None and self.req_info:
            # the tokens as they are now: vLLM may change its lists before apply
            rows = [(index, request, tuple(ids)) for index, request, ids in self._rows()]
            self._next = self._worker.submit(self._prepare, rows)
        self._count(time.thread_time() - start, 0, 0)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """The batch's grammar step: the masking rows in one bitmask operation (their
        admissible sets computed in the worker thread during the forward, where their tokens
        were known then), every other row through its own processor."""
        if not self.req_info:
            return logits
        start = time.thread_time()
        prepared = self._prepared()
        batch: list[tuple[RequestProcessor, Sequence[int], MaskedRow]] = []
        for index, request, output_ids in self._rows():
            row = request.row(output_ids, index) if isinstance(request, RequestProcessor) else None
            if row is None:  # Φ̂ reads the logits, a failed request, a placeholder token
                logits[index] = request(output_ids, logits[index])
            else:
                batch.append((request, output_ids, row))
        if batch:
            self._mask(logits, batch, prepared)
        self._count(time.thread_time() - start, len(self.req_info), 1)
        return logits

    def _count(self, seconds: float, rows: int, steps: int) -> None:
        """Add to the grammar step's CPU time (``HF_FVO_VLLM_CPU_FILE``)."""
        if self._cpu_file is None:
            return
        with self._cpu_lock:  # (the worker thread adds its part too)
            self._cpu["seconds"] += seconds
            self._cpu["rows"] += rows
            self._cpu["steps"] += steps
            if steps:
                try:
                    self._write_cpu()
                except OSError:  # (it was writable at start: log it, never stop the engine)
                    _log.exception("hf_fvo: HF_FVO_VLLM_CPU_FILE can no longer be written")
                    self._cpu_file = None

    def _write_cpu(self) -> None:
        assert self._cpu_file is not None
        with open(self._cpu_file, "w") as f:
            json.dump(self._cpu, f)

    def _rows(self) -> list[tuple[int, Any, Sequence[int]]]:
        """(batch index, request processor, its output tokens so far) per hf_fvo request."""
        return [(index, call.func, call.args[-1]) for index, call in self.req_info.items()]

    def _prepare(self, rows: list[tuple[int, Any, Sequence[int]]]) -> dict[int, _Prepared]:
        """The masking rows' states and packed admissible sets (run in the worker thread)."""
        start = time.thread_time()
        try:
            return self._prepare_rows(rows)
        finally:
            self._count(time.thread_time() - start, 0, 0)

    def _prepare_rows(self, rows: list[tuple[int, Any, Sequence[int]]]) -> dict[int, _Prepared]:
        found = []
        for index, request, output_ids in rows:
            if isinstance(request, RequestProcessor):
                row = request.row(output_ids, index)
                if row is not None:
                    found.append((request, row))
        if not found:
            return {}
        words = batch_words([(r.processor.grammar, row.state, row.remaining) for r, row in found],
                            (self._model.vocab_size + 31) // 32)  # fmt: skip
        return {row.index: (request, row.generated, words[i])
                for i, (request, row) in enumerate(found)}  # fmt: skip

    def _prepared(self) -> dict[int, _Prepared]:
        """The step the worker thread computed, once it has finished (empty if none, or if
        it failed: the rows are then computed here)."""
        job, self._next = self._next, None
        if job is None:
            return {}
        try:
            return job.result()
        except Exception:
            _log.exception("hf_fvo: the grammar step in the worker thread failed; redone")
            return {}

    def _mask(
        self,
        logits: torch.Tensor,
        batch: list[tuple[RequestProcessor, Sequence[int], MaskedRow]],
        prepared: dict[int, _Prepared],
    ) -> None:
        index = [row.index for _, _, row in batch]
        scores = logits[index]  # the rows as they came (a declined row's path needs them)
        out = torch.empty_like(scores)
        rows = [(request.processor, row._replace(index=k))
                for k, (request, _, row) in enumerate(batch)]  # fmt: skip
        try:
            width = (scores.shape[1] + 31) // 32
            words = np.zeros((len(batch), width), dtype=np.int32)
            todo = []
            for k, (request, _, row) in enumerate(batch):
                ready = prepared.get(row.index)
                if ready is not None and ready[0] is request and ready[1] == row.generated:
                    cut = min(width, len(ready[2]))
                    words[k, :cut] = ready[2][:cut]
                else:
                    todo.append(k)
            if todo:
                rest = [(rows[k][0].grammar, rows[k][1].state, rows[k][1].remaining) for k in todo]
                words[todo] = batch_words(rest, width)
            declined = {row.index for _, row in mask_batch(out, scores, rows, words)}
        except Exception:  # a bug: each row's own path logs it and ends only that request
            _log.exception("hf_fvo: the batched grammar step failed; rows go one by one")
            declined = set(range(len(batch)))
        for k in declined:  # NaN/+inf admissible scores, nothing finite: the row's own path
            request, output_ids, _ = batch[k]
            out[k] = request(output_ids, scores[k])
        logits[index] = out

    def new_req_logits_processor(
        self, params: SamplingParams
    ) -> Callable[[Sequence[int], torch.Tensor], torch.Tensor] | None:
        if not params.extra_args or KEY not in params.extra_args:
            return None
        # the texts end where vLLM stops them: its EOS and the generation config's
        eos = tuple(sorted({*params.all_stop_token_ids, params.eos_token_id} - {None}))
        try:
            spec = RequestSpec.from_args(params.extra_args, max_bytes=2**62)  # admitted already
            assert spec is not None
            grammar = spec.compile(compiler_for(self._model, eos or None))
            key = (spec.to_json(), params.max_tokens, eos)
            phi = self._estimators.get(key)
            if phi is None:
                phi = spec.estimator(grammar, params.max_tokens)
                self._estimators.put(key, phi)
            shared = self._live.get(key)
            if shared is not None and not shareable(shared, grammar, phi, params.max_tokens):
                shared = None  # (the grammar or estimator was rebuilt since)
            request = RequestProcessor(grammar, phi, params.max_tokens, shared)
            self._live[key] = request.processor
            return request
        except Exception:  # admitted, so a bug: an exception here would stop every request
            _log.exception("hf_fvo: building an admitted request's processor failed")
            return end_now(eos)
