"""The exact membership check of a JSON text in a schema's language, for what a grammar cannot say.

A grammar engine enforces what is context-free; JSON Schema also says things that are not
(``uniqueItems`` over unbounded items, ``unevaluatedProperties``, ``contains`` counts, the
complement of a pattern, IDNA rules of ``idn-hostname``). μ* = p(x)·1[x ∈ L]/Z needs 1[x ∈ L] to
be *evaluable*, not to be a grammar: the masks enforce a superset L' ⊇ L and :class:`SchemaCheck`
decides x ∈ L on the finished text.

The check is the spec's validation (``jsonschema``, the schema's own draft) with what the
grammar layer means by the schema:

- numbers are read exactly (``decimal.Decimal``), so ``multipleOf: 0.0001`` accepts ``0.0075``
  and ``1e400`` is a number; an integral number is an ``integer`` from draft 6 on (``1.0``);
- ``pattern`` and ``patternProperties`` are ECMA-262 regular expressions (``regress``, with the
  ``u`` flag), as the spec says;
- every ``format`` the spec defines is asserted: the exact expressions of :mod:`.formats`,
  hostnames whose ``xn--`` labels must decode to valid IDNA2008 labels, ``idn-hostname`` and
  ``idn-email`` by IDNA2008 (``idna``), ``regex`` by ECMA-262 syntax (``regress``);
- duplicate object keys fail (a JSON text whose names repeat has no single value).

Example:
    >>> from hf_fvo.grammar.schema.check import SchemaCheck
    >>> check = SchemaCheck({"type": "array", "uniqueItems": True})
    >>> check('[1, 2]') is None, check('[1, 1.0]').split(":")[0]
    (True, '#/uniqueItems')
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hf_fvo.grammar.schema.formats import FORMATS, MAX_LENGTH

__all__ = ["SchemaCheck", "format_ok"]

_LABEL_SEPARATORS = re.compile("[.\u3002\uff0e\uff61]")


@functools.lru_cache(maxsize=1024)
def _ecma(pattern: str) -> Any:
    """An ECMA-262 regex (``u`` flag); ``None`` when the pattern is not one."""
    import regress

    try:
        return regress.Regex(pattern, flags="u")
    except Exception:  # regress.RegressError: not an ECMA-262 regex
        return None


def _search(pattern: str, text: str) -> bool:
    compiled = _ecma(pattern)
    if compiled is None:
        raise ValueError(f"pattern {pattern!r} is not an ECMA-262 regular expression")
    return compiled.find(text) is not None


@functools.lru_cache(maxsize=64)
def _format_regex(name: str) -> re.Pattern[str]:
    return re.compile(f"(?:{FORMATS[name]})\\Z")


def _idna_labels(host: str) -> bool:
    """Every label valid under IDNA2008 (RFC 5891, with RFC 5892's contextual rules); in a
    domain with a right-to-left label, every label also meets RFC 5893's Bidi rule."""
    import idna
    from idna.core import check_bidi

    try:
        idna.encode(host, uts46=False)
        labels = [idna.decode(label) if label[:4].lower() == "xn--" else label
                  for label in host.split(".")]  # fmt: skip
        if any(unicodedata.bidirectional(ch) in ("R", "AL", "AN") for lb in labels for ch in lb):
            for label in labels:
                check_bidi(label, check_ltr=True)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


def _hostname(text: str) -> bool:
    if not _format_regex("hostname").match(text) or len(text) > MAX_LENGTH["hostname"]:
        return False
    punycode = [label for label in text.split(".") if label[:4].lower() == "xn--"]
    return all(_idna_labels(label) for label in punycode)


def _idn_hostname(text: str) -> bool:
    if not text or _LABEL_SEPARATORS.search(text[-1]) or len(text) > 1000:
        return False
    labels = _LABEL_SEPARATORS.split(text)
    return all(labels) and _idna_labels(".".join(labels)) and len(_ascii_host(labels)) <= 253


def _ascii_host(labels: list[str]) -> str:
    import idna

    return ".".join(idna.encode(label, uts46=False).decode("ascii") for label in labels)


# RFC 6531 §3.3: the local part of RFC 5321 with UTF8-non-ascii allowed in atext and qtext
_IDN_LOCAL = re.compile(
    r"(?:[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\U0010ffff]+"
    r"(?:\.[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\U0010ffff]+)*"
    r"|\"(?:[ !#-\[\]-~\u0080-\U0010ffff]|\\[ -~])*\")\Z"
)


def _idn_email(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    if not at or not _IDN_LOCAL.match(local):
        return False
    if domain.startswith("["):  # an address literal, as for ASCII addresses
        return _format_regex("email").match(f"a@{domain}") is not None
    return _idn_hostname(unicodedata.normalize("NFC", domain))  # RFC 6531 §3.2: NFC first


def _regex(text: str) -> bool:
    return _ecma(text) is not None


def format_ok(name: str, text: str) -> bool:
    """Whether ``text`` is a valid ``name`` (a format JSON Schema defines), exactly.

    Example:
        >>> from hf_fvo.grammar.schema.check import format_ok
        >>> format_ok("hostname", "xn--bcher-kva.example"), format_ok("hostname", "xn--X")
        (True, False)
    """
    special = {"hostname": _hostname, "idn-hostname": _idn_hostname,
               "idn-email": _idn_email, "regex": _regex}  # fmt: skip
    if name in special:
        return special[name](text)
    return _format_regex(name).match(text) is not None and len(text) <= MAX_LENGTH.get(
        name, len(text)
    )


def _format_checker() -> Any:
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    for name in (*FORMATS, "idn-hostname", "idn-email", "regex"):
        checker.checks(name)(functools.partial(_string_format, name))
    return checker


def _string_format(name: str, instance: Any) -> bool:
    return not isinstance(instance, str) or format_ok(name, instance)


def _validator_class(schema: Any) -> Any:
    """The draft's validator with exact numbers, ECMA-262 patterns and asserted formats."""
    from jsonschema import validators
    from jsonschema._types import is_array, is_bool, is_null, is_object, is_string
    from jsonschema.exceptions import ValidationError

    base = validators.validator_for(schema, default=validators.Draft202012Validator)
    draft4 = (
        base.META_SCHEMA.get("$schema", "")
        .rstrip("#")
        .endswith(("draft-04/schema", "draft-03/schema"))
    )

    def is_number(checker: Any, instance: Any) -> bool:
        return isinstance(instance, (int, Decimal)) and not isinstance(instance, bool)

    def is_integer(checker: Any, instance: Any) -> bool:
        if isinstance(instance, bool):
            return False
        if isinstance(instance, int):
            return True
        return not draft4 and isinstance(instance, Decimal) and instance == instance.to_integral()

    types = base.TYPE_CHECKER.redefine_many({
        "number": is_number, "integer": is_integer, "array": is_array, "boolean": is_bool,
        "null": is_null, "object": is_object, "string": is_string,
    })  # fmt: skip

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not _search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if _search(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        listed = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extras = [k for k in instance
                  if k not in listed and not any(_search(p, k) for p in patterns)]  # fmt: skip
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif extra is False and extras:
            yield ValidationError(f"additional properties are not allowed ({extras!r})")

    def multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Any:
        # exact for any exponent (1e308 % 0.123456789 exceeds Decimal's default precision)
        if (
            validator.is_type(instance, "number")
            and (Fraction(instance) / Fraction(step)).denominator != 1
        ):
            yield ValidationError(f"{instance} is not a multiple of {step}")

    return validators.extend(base, {
        "pattern": pattern, "patternProperties": pattern_properties,
        "additionalProperties": additional_properties, "multipleOf": multiple_of,
    }, type_checker=types)  # fmt: skip


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {repeated!r} appears twice")
    return out


def load_exact(text: str) -> Any:
    """A JSON text as a value with exact numbers (``Decimal`` for any fraction or exponent) and
    no duplicate keys (``ValueError``)."""
    return json.loads(text, parse_float=Decimal, object_pairs_hook=_no_duplicates)


class SchemaCheck:
    """Decides whether a JSON text is in a schema's language, exactly (see the module).

    Args:
        schema: The user's schema as a JSON value (what the grammar was compiled from).
        formats: Assert ``format`` (default); ``False``: formats are annotations.

    Calling it with a text returns ``None`` for a member, else a message naming the failed
    keyword by its JSON pointer in the schema.

    Example:
        >>> from hf_fvo.grammar.schema.check import SchemaCheck
        >>> SchemaCheck({"type": "integer", "multipleOf": 0.5})('1.0') is None
        True
    """

    def __init__(self, schema: Any, *, formats: bool = True) -> None:
        text = json.dumps(schema, sort_keys=True)
        exact = json.loads(text, parse_float=Decimal)
        self.schema = exact
        self.key = (text, formats)  # equal keys: the same check
        checker = _format_checker() if formats else None
        self._validator = _validator_class(exact)(exact, format_checker=checker)
        self._cached = functools.lru_cache(maxsize=4096)(self._verdict)  # each text once

    def __call__(self, text: str) -> str | None:
        return self._cached(text)

    def _verdict(self, text: str) -> str | None:
        try:
            value = load_exact(text)
        except ValueError as exc:
            return f"the text is not one JSON value: {exc}"
        error = next(iter(self._validator.iter_errors(value)), None)
        if error is None:
            return None
        where = "#" + "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}"
                              for p in error.absolute_schema_path)  # fmt: skip
        return f"{where}: {error.message}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # (its validator is a class made at run time: a copy is rebuilt from the schema's text)
        text, formats = self.key
        return _rebuilt, (text, formats)

    def __repr__(self) -> str:
        return f"SchemaCheck({json.dumps(self.schema, default=str)[:60]})"


def _rebuilt(text: str, formats: bool) -> SchemaCheck:
    """A :class:`SchemaCheck` from its key (a pickled copy)."""
    return SchemaCheck(json.loads(text), formats=formats)
