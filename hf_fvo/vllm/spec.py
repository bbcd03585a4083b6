"""What a served request asks hf_fvo for: its grammar, its Φ̂ and the sampling options it can
be combined with, read from ``SamplingParams.extra_args["hf_fvo"]`` and checked before anything
runs. Nothing here imports vLLM: the parsing, the checks and the compilation are the same in
the server's front end, in the admission workers and in the engine."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hf_fvo.errors import (
    ConstraintConflictError,
    GrammarTooLargeError,
    InvalidArgumentError,
)
from hf_fvo.grammar import Grammar, GrammarCompiler
from hf_fvo.phi import LearnedPhi, OneStepPhi, PhiEstimator, TablePhi, UniformPhi
from hf_fvo.phi.table import enumerate_members

__all__ = ["GRAMMAR_KINDS", "KEY", "PHI_NAMES", "RequestSpec", "check_sampling"]

KEY = "hf_fvo"
"""The key of ``SamplingParams.extra_args`` (the OpenAI server's ``vllm_xargs``) hf_fvo reads."""

GRAMMAR_KINDS = ("json_schema", "regex", "lark", "ebnf", "choices")
"""The grammar a request names, exactly one of these keys."""

PHI_NAMES = ("uniform", "onestep", "learned", "table")
"""The estimators that run no forward of their own: masking (``"uniform"``, μ_proj),
OneStep from the logits at hand, learned weights, and exact Φ from a table of member
log-probabilities (:func:`hf_fvo.vllm.exact_table`)."""

_OPTIONS = {"whitespace", "strict", "key_order", "formats", "phi", "weights", "table"}
MAX_TABLE_ROWS = 10_000


@dataclass(frozen=True)
class RequestSpec:
    """One request's grammar and Φ̂, parsed and checked (:meth:`from_args`).

    Example:
        >>> from hf_fvo.vllm.spec import RequestSpec
        >>> spec = RequestSpec.from_args({"hf_fvo": {"choices": ["yes", "no"]}})
        >>> spec.kind, spec.phi
        ('choices', 'uniform')
        >>> RequestSpec.from_args({"other": 1}) is None
        True
    """

    kind: str
    source: Any
    whitespace: str | None = None
    strict: bool = True
    key_order: str = "schema"
    formats: str = "assert"
    phi: str = "uniform"
    weights: str | None = None
    table: tuple[tuple[tuple[int, ...], tuple[float, ...]], ...] = field(default=(), repr=False)

    @classmethod
    def from_args(cls, extra_args: Mapping[str, Any] | None, *, max_bytes: int = 262_144
                  ) -> RequestSpec | None:  # fmt: skip
        """The spec under ``extra_args["hf_fvo"]`` (an object, or its JSON text: the OpenAI
        server's ``vllm_xargs`` take no nested objects), or ``None`` where the request has none.

        Raises:
            InvalidArgumentError: not exactly one grammar, an unknown key or a malformed value,
                each named.
            GrammarTooLargeError: the grammar's text is over ``max_bytes``.
        """
        if not extra_args or KEY not in extra_args:
            return None
        args = extra_args[KEY]
        if isinstance(args, str):  # the OpenAI server's vllm_xargs hold no nested objects
            try:
                args = json.loads(args)
            except json.JSONDecodeError as e:
                msg = f"extra_args[{KEY!r}] is a string but not JSON: {e}"
                raise InvalidArgumentError(msg) from None
        if not isinstance(args, Mapping):
            raise InvalidArgumentError(f"extra_args[{KEY!r}] must be an object, got {args!r:.80}")
        kinds = [k for k in GRAMMAR_KINDS if k in args]
        if len(kinds) != 1:
            raise InvalidArgumentError(
                f"extra_args[{KEY!r}] must name exactly one grammar of {list(GRAMMAR_KINDS)}, "
                f"got {kinds or 'none'}"
            )
        unknown = set(args) - _OPTIONS - set(GRAMMAR_KINDS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown keys {sorted(unknown)} in extra_args[{KEY!r}]; known: "
                f"{sorted(_OPTIONS | set(GRAMMAR_KINDS))}"
            )
        kind = kinds[0]
        source = _source(kind, args[kind], max_bytes)
        phi = args.get("phi", "uniform")
        if phi not in PHI_NAMES:
            raise InvalidArgumentError(
                f"phi must be one of {list(PHI_NAMES)} (estimators that run no forward of their "
                f"own), got {phi!r:.80}"
            )
        if (phi == "table") != ("table" in args):
            raise InvalidArgumentError('phi="table" and a "table" go together')
        if "weights" in args and phi != "learned":
            raise InvalidArgumentError('"weights" is for phi="learned"')
        whitespace = args.get("whitespace")
        if whitespace is not None and not isinstance(whitespace, str):
            raise InvalidArgumentError(f"whitespace must be a string or null, got {whitespace!r}")
        strict = args.get("strict", True)
        if not isinstance(strict, bool):
            raise InvalidArgumentError(f"strict must be true or false, got {strict!r}")
        weights = args.get("weights")
        if weights is not None and not isinstance(weights, str):
            raise InvalidArgumentError(f"weights must be a folder or Hub id, got {weights!r:.80}")
        return cls(kind, source, whitespace, strict, str(args.get("key_order", "schema")),
                   str(args.get("formats", "assert")), phi, weights,
                   _table(args.get("table", ())))  # fmt: skip

    def to_json(self) -> str:
        """The spec as ``extra_args["hf_fvo"]`` JSON (for :meth:`from_args` elsewhere)."""
        args: dict[str, Any] = {self.kind: list(self.source) if self.kind == "choices"
                                else self.source}  # fmt: skip
        args.update(whitespace=self.whitespace, strict=self.strict, key_order=self.key_order,
                    formats=self.formats, phi=self.phi)  # fmt: skip
        if self.weights is not None:
            args["weights"] = self.weights
        if self.phi == "table":
            args["table"] = [[list(i), list(lp)] for i, lp in self.table]
        return json.dumps({KEY: args})

    def compile(self, compiler: GrammarCompiler) -> Grammar:
        """The grammar, by ``compiler`` (which caches it: the next request with the same
        grammar reuses it). JSON schemas compile with ``checks=False``: a served request cannot
        be redrawn, so what the masks cannot enforce exactly is refused, named."""
        if self.kind == "json_schema":
            return compiler.json_schema(self.source, self.whitespace, strict=self.strict,
                                        checks=False, formats=self.formats,
                                        key_order=self.key_order)  # fmt: skip
        if self.kind == "regex":
            return compiler.regex(self.source, backend="pushdown")
        if self.kind == "lark":
            return compiler.lark(self.source)
        if self.kind == "ebnf":
            return compiler.ebnf(self.source)
        return compiler.choices(self.source)

    def estimator(self, grammar: Grammar, max_tokens: int | None = None) -> PhiEstimator:
        """The request's Φ̂ on ``grammar``.

        Raises:
            InvalidArgumentError: a table that misses a member the budget admits, or lists a
                text outside the language.
        """
        if self.phi == "uniform":
            return UniformPhi(grammar)
        if self.phi == "onestep":
            return OneStepPhi(grammar)
        if self.phi == "learned":
            return LearnedPhi(grammar, weights=self.weights)
        estimator = TablePhi(grammar, self.table)
        needed = set(enumerate_members(grammar, max_tokens, limit=MAX_TABLE_ROWS))
        missing = needed - {ids for ids, _ in self.table}
        if missing:
            raise InvalidArgumentError(
                f"the table lists {len(needed) - len(missing)} of the {len(needed)} token "
                f"sequences {grammar.source} admits within max_tokens={max_tokens}: build it "
                "with hf_fvo.vllm.exact_table for this budget"
            )
        return estimator


def check_sampling(params: Any) -> None:
    """Refuse the sampling options that would cut a member or remove admissible tokens.

    ``params`` is a vLLM ``SamplingParams`` (read by attribute). Stop strings and stop token
    ids would end an output inside a member; ``ignore_eos`` would run past its end;
    ``min_tokens``, ``allowed_token_ids`` and ``bad_words`` remove tokens the grammar may need;
    vLLM's own ``structured_outputs`` would constrain the same text twice.

    Raises:
        ConstraintConflictError: naming the option.
    """
    conflicts = {
        "stop": bool(getattr(params, "stop", None)),
        "stop_token_ids": bool(getattr(params, "stop_token_ids", None)),
        "ignore_eos": bool(getattr(params, "ignore_eos", False)),
        "min_tokens": bool(getattr(params, "min_tokens", 0)),
        "allowed_token_ids": bool(getattr(params, "allowed_token_ids", None)),
        "bad_words": bool(getattr(params, "bad_words", None)),
        "structured_outputs": getattr(params, "structured_outputs", None) is not None,
    }
    named = [k for k, on in conflicts.items() if on]
    if named:
        raise ConstraintConflictError(
            f"{', '.join(named)} cannot be combined with an hf_fvo grammar: they would cut a "
            "member, run past its end or remove tokens the grammar needs (the grammar ends the "
            "text itself; a budget is max_tokens)"
        )


def _source(kind: str, value: Any, max_bytes: int) -> Any:
    if kind == "json_schema" and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"json_schema is not JSON: {e}") from None
    if kind == "choices":
        if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
            raise InvalidArgumentError("choices must be a list of strings")
        value = tuple(value)
    elif kind != "json_schema" and not isinstance(value, str):
        raise InvalidArgumentError(f"{kind} must be a string, got {type(value).__name__}")
    elif kind == "json_schema" and not isinstance(value, (dict, bool)):
        raise InvalidArgumentError(f"json_schema must be an object, got {type(value).__name__}")
    size = len(value.encode()) if isinstance(value, str) else len(json.dumps(value))
    if size > max_bytes:
        raise GrammarTooLargeError(
            f"the request's {kind} has {size} bytes, over the server's limit of {max_bytes} "
            "(HF_FVO_VLLM_MAX_GRAMMAR_BYTES)"
        )
    return value


def _table(rows: Any) -> tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]:
    if not isinstance(rows, (list, tuple)):
        raise InvalidArgumentError("table must be a list of [token_ids, logprobs] rows")
    if len(rows) > MAX_TABLE_ROWS:
        raise GrammarTooLargeError(f"the table has {len(rows)} rows, over {MAX_TABLE_ROWS}")
    out = []
    for i, row in enumerate(rows):
        try:
            ids, logprobs = row
            out.append((tuple(int(t) for t in ids), tuple(float(v) for v in logprobs)))
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"table row {i} must be [token_ids, logprobs], got {row!r:.80}"
            ) from None
    return tuple(out)
