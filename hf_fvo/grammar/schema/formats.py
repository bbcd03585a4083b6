"""JSON Schema ``format`` values as exact regular expressions over the decoded string.

Each format is the grammar of the RFC that JSON Schema (2020-12, §7.3) names for it, written in
the syntax both grammar backends read (Rust ``regex``; no look-around, no backreferences). The
expressions are matched against the whole decoded string value, never the escaped JSON text.

Where an RFC constrains more than syntax, the constraint is built in when it is regular: dates
respect month lengths and leap years, and a leap second (``:60``) is accepted exactly when the
time converted to UTC is 23:59 (RFC 3339 §5.7). Formats whose definition is not regular or not
finite to state (``regex``: ECMA-262 syntax; ``idn-email``/``idn-hostname``: IDNA2008's
contextual rules) are not in :data:`FORMATS`: :data:`FORMAT_CHECKS` lists them (and
``hostname``, whose ``xn--`` labels must decode), for the exact check at the string's end.

Example:
    >>> import re
    >>> from hf_fvo.grammar.schema.formats import FORMATS
    >>> [bool(re.fullmatch(FORMATS["date"], d)) for d in ("2024-02-29", "2023-02-29")]
    [True, False]
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMATS", "FORMAT_CHECKS", "format_schema"]

_DIGIT = "[0-9]"
_HEX = "[0-9a-fA-F]"

# -- RFC 3339 dates and times ------------------------------------------------------------------
_YEAR = "[0-9]{4}"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_FRACTION = r"(?:\.[0-9]+)?"
_HOUR = "(?:[01][0-9]|2[0-3])"
_MINUTE = "[0-5][0-9]"
_NUMOFFSET = f"[+-]{_HOUR}:{_MINUTE}"


def _leap_second_times() -> str:
    """``HH:MM:60[.frac]offset`` exactly where HH:MM minus the offset is 23:59 UTC."""
    by_local: dict[int, list[str]] = {}
    for offset in range(-(23 * 60 + 59), 23 * 60 + 60):
        local = (23 * 60 + 59 + offset) % 1440
        sign = "-" if offset < 0 else "+"
        hours, minutes = divmod(abs(offset), 60)
        text = f"\\{sign}{hours:02d}:{minutes:02d}"
        if offset == 0:
            text = r"(?:[+-]00:00|[zZ])"
        by_local.setdefault(local, []).append(text)
    branches = []
    for local, offsets in sorted(by_local.items()):
        hours, minutes = divmod(local, 60)
        branches.append(f"{hours:02d}:{minutes:02d}:60{_FRACTION}(?:{'|'.join(offsets)})")
    return "(?:" + "|".join(branches) + ")"


_NO_LEAP_TIME = f"{_HOUR}:{_MINUTE}:[0-5][0-9]{_FRACTION}(?:[zZ]|{_NUMOFFSET})"
_TIME = f"(?:{_NO_LEAP_TIME}|{_leap_second_times()})"
_DATE_TIME = f"{_DATE}[tT]{_TIME}"


def _leap_second_rules() -> list[Any]:
    """The leap-second times as a union of intersections of small patterns (a grammar engine
    builds these far faster than the 1440-branch union above, with the same language).

    With local time HH:MM and offset ±hh:mm, UTC is 23:59 exactly when: the offset is zero and
    HH:MM = 23:59; or it is positive, MM = 59, mm = 00 and HH = hh − 1 (mod 24); or it is
    positive, HH = hh and mm = MM + 1; or it is negative, hh = 23 − HH and mm = 59 − MM.
    """
    f, m, h = _FRACTION, _MINUTE, _HOUR
    plus_carry = "|".join(f"{(k - 1) % 24:02d}:59:60{f}\\+{k:02d}:00" for k in range(24))
    same_hour = "|".join(f"{k:02d}:{m}:60{f}\\+{k:02d}:{m}" for k in range(24))
    next_minute = "|".join(f"{h}:{k:02d}:60{f}\\+{h}:{k + 1:02d}" for k in range(59))
    hour_sum = "|".join(f"{k:02d}:{m}:60{f}-{23 - k:02d}:{m}" for k in range(24))
    minute_sum = "|".join(f"{h}:{k:02d}:60{f}-{h}:{59 - k:02d}" for k in range(60))
    zero = f"23:59:60{f}(?:[zZ]|[+-]00:00)"
    return [zero, plus_carry, (same_hour, next_minute), (hour_sum, minute_sum)]


# RFC 3339 Appendix A (ISO 8601 durations): dur-date / dur-time / dur-week.
_DUR_SECOND = "[0-9]+S"
_DUR_MINUTE = f"[0-9]+M(?:{_DUR_SECOND})?"
_DUR_HOUR = f"[0-9]+H(?:{_DUR_MINUTE})?"
_DUR_TIME = f"T(?:{_DUR_HOUR}|{_DUR_MINUTE}|{_DUR_SECOND})"
_DUR_DAY = "[0-9]+D"
_DUR_MONTH = f"[0-9]+M(?:{_DUR_DAY})?"
_DUR_YEAR = f"[0-9]+Y(?:{_DUR_MONTH})?"
_DUR_DATE = f"(?:{_DUR_DAY}|{_DUR_MONTH}|{_DUR_YEAR})(?:{_DUR_TIME})?"
_DURATION = f"P(?:{_DUR_DATE}|{_DUR_TIME}|[0-9]+W)"

# -- addresses ---------------------------------------------------------------------------------
_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_DEC_OCTET}(?:\\.{_DEC_OCTET}){{3}}"
_H16 = f"{_HEX}{{1,4}}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = (
    "(?:"
    + "|".join(  # RFC 3986 §3.2.2, the nine forms
        [
            f"(?:{_H16}:){{6}}{_LS32}",
            f"::(?:{_H16}:){{5}}{_LS32}",
            f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
            f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
            f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
            f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
            f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
            f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
            f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
        ]
    )
    + ")"
)
_LABEL = "[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_HOSTNAME_SYNTAX = f"{_LABEL}(?:\\.{_LABEL})*"

# RFC 5321 §4.1.2 Mailbox: Local-part "@" ( Domain / address-literal ).
_ATEXT = r"[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]"
_LOCAL_PART = f'(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|"(?:[ !#-\\[\\]-~]|\\\\[ -~])*")'
_ADDRESS_LITERAL = f"\\[(?:{_IPV4}|IPv6:{_IPV6})\\]"
_EMAIL = f"{_LOCAL_PART}@(?:{_HOSTNAME_SYNTAX}|{_ADDRESS_LITERAL})"

# -- RFC 3986 URIs and RFC 3987 IRIs -----------------------------------------------------------
_UNRESERVED = r"a-zA-Z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = f"%{_HEX}{{2}}"
# RFC 3987 ucschar and iprivate (private use only in the query)
_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd"
    "\U00040000-\U0004fffd\U00050000-\U0005fffd\U00060000-\U0006fffd"
    "\U00070000-\U0007fffd\U00080000-\U0008fffd\U00090000-\U0009fffd"
    "\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
    "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _uri_parts(iri: bool) -> dict[str, str]:
    unreserved = _UNRESERVED + (_UCSCHAR if iri else "")
    pchar = f"(?:[{unreserved}{_SUB_DELIMS}:@]|{_PCT})"
    query_extra = _IPRIVATE if iri else ""
    segment = f"{pchar}*"
    segment_nz = f"{pchar}+"
    segment_nz_nc = f"(?:[{unreserved}{_SUB_DELIMS}@]|{_PCT})+"
    userinfo = f"(?:[{unreserved}{_SUB_DELIMS}:]|{_PCT})*"
    ip_future = f"[vV]{_HEX}+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+"  # "v" is case-insensitive
    reg_name = f"(?:[{unreserved}{_SUB_DELIMS}]|{_PCT})*"
    host = f"(?:\\[(?:{_IPV6}|{ip_future})\\]|{_IPV4}|{reg_name})"
    authority = f"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = f"{segment_nz}(?:/{segment})*"
    path_noscheme = f"{segment_nz_nc}(?:/{segment})*"
    query = f"(?:{pchar}|[/?{query_extra}])*"
    fragment = f"(?:{pchar}|[/?])*"
    scheme = "[a-zA-Z][a-zA-Z0-9+\\-.]*"
    hier = f"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    relative = f"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|)"
    tail = f"(?:\\?{query})?(?:#{fragment})?"
    uri = f"{scheme}:{hier}{tail}"
    return {"uri": uri, "uri-reference": f"(?:{uri}|{relative}{tail})"}


_URI = _uri_parts(iri=False)
_IRI = _uri_parts(iri=True)

# RFC 6570 URI templates: literals and expressions {op varspec,...}.
# literals: RFC 6570 §2.1 with its erratum 6937 (the apostrophe, %x27, is a literal)
_TEMPLATE_LITERAL = f"(?:[!#$&'()*+,\\-./0-9:;=?@A-Z\\[\\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{_PCT})"
_VARCHAR = f"(?:[A-Za-z0-9_]|{_PCT})"
_VARNAME = f"{_VARCHAR}(?:\\.?{_VARCHAR})*"
_VARSPEC = f"{_VARNAME}(?::[1-9][0-9]{{0,3}}|\\*)?"
_EXPRESSION = f"\\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\\}}"
_URI_TEMPLATE = f"(?:{_TEMPLATE_LITERAL}|{_EXPRESSION})*"

# RFC 6901 JSON pointers, and relative JSON pointers (draft-bhutton-relative-json-pointer-00).
_JSON_POINTER = "(?:/(?:[^~/]|~[01])*)*"
_NON_NEGATIVE = "(?:0|[1-9][0-9]*)"
_RELATIVE_JSON_POINTER = f"{_NON_NEGATIVE}(?:[+-]{_NON_NEGATIVE})?(?:#|{_JSON_POINTER})"

FORMATS: dict[str, str] = {
    "date-time": _DATE_TIME,
    "date": _DATE,
    "time": _TIME,
    "duration": _DURATION,
    "email": _EMAIL,
    "hostname": _HOSTNAME_SYNTAX,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uri": _URI["uri"],
    "uri-reference": _URI["uri-reference"],
    "iri": _IRI["uri"],
    "iri-reference": _IRI["uri-reference"],
    "uri-template": _URI_TEMPLATE,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _RELATIVE_JSON_POINTER,
}
"""Format name → regex of the whole decoded string value."""

MAX_LENGTH: dict[str, int] = {"hostname": 253}
"""Formats whose RFC also bounds the total length (in characters)."""


def format_schema(name: str, *, single_pattern: bool = False) -> dict[str, Any]:
    """The string constraints of format ``name`` as a JSON-schema fragment (no ``type``): an
    anchored ``pattern`` (plus ``maxLength`` where the RFC bounds it); for ``time`` and
    ``date-time``, the union of the ordinary times and the leap-second intersections, unless
    ``single_pattern`` asks for the one (larger) regex, which combines better with other
    patterns.

    Example:
        >>> from hf_fvo.grammar.schema.formats import format_schema
        >>> format_schema("uuid")["pattern"][:12]
        '^(?:[0-9a-fA'
    """
    if name in ("time", "date-time") and not single_pattern:
        head = f"{_DATE}[tT]" if name == "date-time" else ""

        def anchored(body: str) -> dict[str, str]:
            return {"pattern": f"^{head}(?:{body})$"}

        branches: list[Any] = [anchored(_NO_LEAP_TIME)]
        for rule in _leap_second_rules():
            if isinstance(rule, tuple):
                branches.append({"allOf": [anchored(part) for part in rule]})
            else:
                branches.append(anchored(rule))
        return {"anyOf": branches}
    out: dict[str, Any] = {"pattern": f"^(?:{FORMATS[name]})$"}
    if name in MAX_LENGTH:
        out["maxLength"] = MAX_LENGTH[name]
    return out


FORMAT_CHECKS: dict[str, str] = {
    "hostname": "its xn-- labels must decode to IDNA2008 labels",
    "regex": "ECMA-262 regular-expression syntax is context-free, not regular",
    "idn-email": "IDNA2008's contextual and bidirectional rules",
    "idn-hostname": "IDNA2008's contextual and bidirectional rules",
}
"""Formats whose masks over-approximate (``hostname``: its syntax; the others: any string), with
what the exact check of :mod:`hf_fvo.grammar.schema.check` adds."""
