"""Admitting untrusted requests: each grammar is compiled first in a worker process, under a
time limit, so that a schema that takes too long — or crashes the native parser — fails that
request and nothing else.

A request's schema or grammar is untrusted input. The server's front end hands it to one of a
few spawned worker processes (each with the model's tokenizer loaded once); the worker compiles
it exactly as the engine will, builds its Φ̂ and checks that a member fits in ``max_tokens``. A
worker that does not answer in time is killed and replaced; the request gets
:class:`~hf_fvo.errors.CompileTimeoutError`. Every other refusal is the typed error the
compiler raised. Only admitted requests reach the engine, whose compilation then cannot fail
(it is the same computation) and is served from the compiler's cache.
"""

from __future__ import annotations

import multiprocessing
import queue
from dataclasses import dataclass
from typing import Any

from hf_fvo.errors import BudgetUndecidedError, CompileTimeoutError, GrammarError
from hf_fvo.grammar import Grammar, GrammarCompiler
from hf_fvo.lru import LRU
from hf_fvo.vllm.spec import RequestSpec

__all__ = ["Admission", "ModelInfo", "admit", "compiler_for"]


@dataclass(frozen=True)
class ModelInfo:
    """Where the served model's tokenizer comes from, and its logits' width."""

    tokenizer: str
    vocab_size: int
    revision: str | None = None
    trust_remote_code: bool = False
    eos_token_id: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, model_config: Any) -> ModelInfo:
        """The served model as a vLLM ``ModelConfig`` describes it.

        Example:
            >>> from types import SimpleNamespace
            >>> from hf_fvo.vllm import ModelInfo
            >>> config = SimpleNamespace(tokenizer="m", tokenizer_revision=None,
            ...                          trust_remote_code=False, get_vocab_size=lambda: 8)
            >>> ModelInfo.from_config(config).vocab_size
            8
        """
        size = int(model_config.get_vocab_size())
        remote = bool(model_config.trust_remote_code)
        return cls(str(model_config.tokenizer), size, model_config.tokenizer_revision, remote)


_LOADED: dict[ModelInfo, GrammarCompiler] = {}


def compiler_for(model: ModelInfo, eos_token_id: tuple[int, ...] | None = None) -> GrammarCompiler:
    """The shared :class:`~hf_fvo.grammar.GrammarCompiler` for the served model (its tokenizer
    loaded once per process), ending texts with ``eos_token_id`` (default: the model's)."""
    if model not in _LOADED:
        from transformers import AutoTokenizer

        _LOADED[model] = AutoTokenizer.from_pretrained(
            model.tokenizer, revision=model.revision, trust_remote_code=model.trust_remote_code
        )
    tokenizer = _LOADED[model]
    eos = eos_token_id or model.eos_token_id or tokenizer.eos_token_id
    return GrammarCompiler.shared(tokenizer, model.vocab_size, eos_token_id=eos)


def admit(spec: RequestSpec, compiler: GrammarCompiler, max_tokens: int | None) -> Grammar:
    """Compile ``spec``, build its Φ̂ and check that a member fits in ``max_tokens`` tokens
    (EOS included); the grammar, or the typed refusal.

    Raises:
        GrammarError: the compiler's refusal (unsupported, empty, too large…),
            :class:`~hf_fvo.errors.BudgetTooSmallError`: no member fits the budget (proven by
            a lower bound), or :class:`~hf_fvo.errors.BudgetUndecidedError`: the budget lies
            between the bounds and no completion within it was found — or, without a budget,
            none was found at all.

    Example:
        >>> from hf_fvo.errors import BudgetTooSmallError
        >>> from hf_fvo.grammar import GrammarCompiler
        >>> from hf_fvo.models import load_default_tokenizer
        >>> from hf_fvo.vllm.admission import admit
        >>> from hf_fvo.vllm.spec import RequestSpec
        >>> compiler = GrammarCompiler.shared(load_default_tokenizer())
        >>> spec = RequestSpec.from_args({"hf_fvo": {"choices": ["a long answer"]}})
        >>> try:
        ...     admit(spec, compiler, 1)
        ... except BudgetTooSmallError as e:
        ...     print(str(e)[:40])
        max_tokens=1 is below the shortest membe
    """
    grammar = spec.compile(compiler)
    spec.estimator(grammar, max_tokens)
    start = grammar.initial_state
    if max_tokens is not None:
        refusal = grammar.budget_refusal(start, max_tokens, f"max_tokens={max_tokens}")
        if refusal is not None:
            raise refusal
        return grammar
    if grammar.tokens_to_accept(start) is None:  # (a cheap lower bound, for the message)
        lower, upper = grammar.shortest_bounds(start, enough=1)
        raise BudgetUndecidedError(
            f"{grammar.source} has no completion hf_fvo can find from its start (a member "
            f"needs at least {lower} tokens; none was found within the search's limits)",
            lower, upper,
        )  # fmt: skip
    return grammar


# -- the worker processes -------------------------------------------------------------------------

_WORKER_MODEL: ModelInfo | None = None


def _start_worker(model: ModelInfo) -> None:
    global _WORKER_MODEL
    _WORKER_MODEL = model
    compiler_for(model)  # load the tokenizer now, not inside the first request's time


def _run(spec_json: str, max_tokens: int | None) -> GrammarError | None:
    import json

    assert _WORKER_MODEL is not None
    try:
        spec = RequestSpec.from_args(json.loads(spec_json), max_bytes=2**62)
        assert spec is not None
        admit(spec, compiler_for(_WORKER_MODEL), max_tokens)
    except GrammarError as e:
        return type(e)(str(e))
    except Exception as e:  # an engine's own exception type: keep its words, typed as ours
        return GrammarError(f"{type(e).__name__}: {e}")
    return None


class _Worker:
    def __init__(self, model: ModelInfo) -> None:
        self._model = model
        self._pool: Any = None

    def run(self, spec_json: str, max_tokens: int | None, seconds: float) -> GrammarError | None:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ctx.Pool(1, initializer=_start_worker, initargs=(self._model,))
            self._pool.apply(_ready)  # started (and its tokenizer loaded) outside the limit
        job = self._pool.apply_async(_run, (spec_json, max_tokens))
        try:
            return job.get(timeout=seconds)
        except multiprocessing.TimeoutError:
            self.close()
            return CompileTimeoutError(
                f"compiling the request's grammar took over {seconds:g} s (or crashed the "
                "compiler) and was stopped (HF_FVO_VLLM_COMPILE_SECONDS)"
            )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None


def _ready() -> bool:
    return True


class Admission:
    """A few worker processes that admit requests (:func:`admit`) under a time limit. A
    verdict is kept for the same grammar and budget (the last 1024): a server sees the same
    schema again and again; a time-out is not kept.

    Args:
        model: The served model's tokenizer and logits width.
        workers: Requests compiled at the same time.
        seconds: The time limit of one compilation.

    Example:
        >>> from hf_fvo.vllm.admission import Admission, ModelInfo
        >>> from hf_fvo.vllm.spec import RequestSpec
        >>> from hf_fvo.models import default_model_dir
        >>> gate = Admission(ModelInfo(str(default_model_dir()), 49152), workers=1)
        >>> gate.check(RequestSpec.from_args({"hf_fvo": {"regex": "[0-9]{3}"}}), 8)
        >>> gate.close()
    """

    def __init__(self, model: ModelInfo, *, workers: int = 2, seconds: float = 10.0) -> None:
        self.model, self.seconds = model, float(seconds)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers = [_Worker(model) for _ in range(workers)]
        self._verdicts: LRU[tuple[str, int | None], tuple[GrammarError | None]] = LRU(1024)
        for w in self._workers:
            self._idle.put(w)

    def check(self, spec: RequestSpec, max_tokens: int | None) -> None:
        """Admit ``spec`` or raise its refusal (see :func:`admit`; a compilation over the time
        limit, or one that kills its worker, is :class:`~hf_fvo.errors.CompileTimeoutError`)."""
        key = (spec.to_json(), max_tokens)
        kept = self._verdicts.get(key)
        if kept is None:
            worker = self._idle.get()
            try:
                error = worker.run(key[0], max_tokens, self.seconds)
            finally:
                self._idle.put(worker)
            if not isinstance(error, CompileTimeoutError):  # the others are the grammar's
                self._verdicts.put(key, (error,))
        else:
            error = kept[0] if kept[0] is None else type(kept[0])(str(kept[0]))
        if error is not None:
            raise error

    def close(self) -> None:
        """Stop the worker processes."""
        for w in self._workers:
            w.close()
