"""JSON schemas as llguidance Lark grammars whose number and string lexemes are hf_fvo's own.

llguidance's JSON mode writes a JSON text one way: strings with canonical escapes only (no ``\\/``,
no ``\\u0061``, no surrogate pairs, no raw U+007F), integers without a zero fraction (``1.0`` is an
integer since draft 6). JSON allows all of those spellings, so a model that writes one is steered
away from it. Where a prepared schema (:func:`~.prepare.prepare_json_schema`) uses only what is
lowered here, hf_fvo writes the grammar itself, in llguidance's Lark dialect, with the same
structure as the JSON mode (the same whitespace places, properties in the schema's order, extra
keys after the listed ones — :mod:`.regex` spells the same structure for the automaton) and these
lexemes:

- a string that only :data:`STRING_KEYWORDS` constrain (``type: string``, ``minLength``,
  ``maxLength``; any key of an open object) admits every spelling JSON allows: any scalar value
  raw except ``"``, ``\\`` and U+0000–U+001F, the short escapes including ``\\/``, ``\\uXXXX`` in
  either case, astral characters as surrogate pairs; lengths count characters, however spelled;
- an ``integer`` without bounds (from draft 6 on) admits a zero fraction and an exponent where
  the value stays an integer and a double holds it (``1.0``, ``1e2``, ``1.00E+3``, ``0e-5``; not
  ``1e400``, which Python's ``json`` reads as ``inf``); a ``number`` without bounds every JSON
  number;
- listed property names, ``enum``/``const`` values, strings with a ``pattern`` (or ``format``),
  numbers with bounds and any other scalar-only subschema (an ``allOf`` of patterns, say) keep
  llguidance's canonical text (the last three through an inlined ``%json`` leaf, which holds no
  key), so that finite languages keep few members;
- an extra key never spells a listed name (in any spelling): its lexeme is the free string minus
  every spelling of the listed names;
- a key of ``patternProperties`` is the pattern's ``%json`` leaf, where those keys are the only
  unlisted ones (``additionalProperties: false``), one schema serves every pattern and no
  listed name matches one (:meth:`_Lark.patterned`).

An ``allOf`` of objects is merged here (:mod:`.order`'s merge: the names in the order the parts
list them, each with the ``allOf`` of what every part says of it; required names a part does not
list after the declared ones). Anything else (other ``patternProperties``, ``propertyNames``,
property counts, an ``allOf`` member that says more than keys and types, a custom whitespace
pattern, …) returns ``None``: the schema is compiled by llguidance's JSON mode, with its
canonical text.

Example:
    >>> from hf_fvo.grammar.schema.lark import schema_lark
    >>> print(schema_lark({"type": "array", "items": {"type": "boolean"}, "maxItems": 2}, ""))
    start: v0
    v0: "[" (("true" | "false") ("," ("true" | "false")){0,1})? "]"
    >>> schema_lark({"type": "object", "patternProperties": {"^a": {}}}, "") is None
    True
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from hf_fvo.grammar.schema.facts import ALL_TYPES, satisfies, types_of, widen
from hf_fvo.grammar.schema.order import merged_objects

__all__ = [
    "CANONICAL_INTEGER_REGEX",
    "CHAR_REGEX",
    "INTEGER_REGEX",
    "NUMBER_REGEX",
    "PRETTY_WHITESPACE",
    "STRING_KEYWORDS",
    "array_body",
    "literal_regex",
    "schema_lark",
]

# ``whitespace="pretty"``: one space, or one newline and an indentation of at most 24 spaces, at
# each place JSON allows whitespace: what json.dumps (with or without indent) and JSON.stringify
# write, to depth 12 at indent 2 and 6 at indent 4. Bounded (finitely many spellings per place),
# and every prefix of a match is a match, so a completion never needs more of it.
PRETTY_WHITESPACE = r"[ ]|\n[ ]{0,24}"
STRING_KEYWORDS = ("minLength", "maxLength")  # what an own string lexeme enforces
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_BY_KIND = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "integer": _NUMERIC,
    "number": _NUMERIC,
    "array": ("items", "prefixItems", "minItems", "maxItems"),
    "object": ("properties", "required", "additionalProperties", "patternProperties"),
    "null": (),
    "boolean": (),
}
_SCALARS = {"null", "boolean", "number", "string"}
_LOWERED = {"type", "enum", "const", "anyOf", "allOf", "$ref", "$defs"}.union(*_BY_KIND.values())

# one character of a JSON string, every spelling (lone surrogates excluded: not interchangeable)
CHAR_REGEX = (
    r'(?:[^"\\\x00-\x1f]|\\["\\\x2fbfnrt]'
    r"|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})"
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
INTEGER_REGEX = (
    r"-?(?:0(?:\.0+)?(?:[eE][+-]?[0-9]+)?|[1-9][0-9]*(?:\.0+)?"
    r"|[1-9][0-9]{0,14}(?:\.0+)?[eE]\+?[0-9]{1,2})"
)  # integral values only, and finite as a double where an exponent makes Python's json read
# a float (1e400 would be inf): a zero fraction, a non-negative exponent of at most 2 digits
CANONICAL_INTEGER_REGEX = r"-?(?:0|[1-9][0-9]*)"  # draft-04: no fraction, no exponent
NUMBER_REGEX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_REGEX_META = set("\\.+*?()|[]{}^$")
# members of one object lowered as a chain of rules; llguidance 1.9 overflows the native stack
# on chains of a few thousand (a segfault at 3000 properties), so longer objects go to the JSON
# mode, which writes them without the chain
MAX_MEMBERS = 256


class _NotLowered(Exception):
    pass


def schema_lark(
    schema: Any, whitespace: str | None, *, integral_fractions: bool = True
) -> str | None:
    """The Lark grammar (llguidance's dialect) of a prepared schema's JSON texts with hf_fvo's
    own lexemes, or ``None`` where the schema uses something not lowered here.

    ``whitespace``: ``None`` (``[ ]?`` at every place JSON allows whitespace), ``""``
    (compact) or :data:`PRETTY_WHITESPACE` (matched at most once at each place); other patterns
    are not lowered. ``integral_fractions=False`` (draft-04 and
    earlier, where an integer has no fraction or exponent): integers as ``-?(0|[1-9][0-9]*)``.
    """
    if whitespace not in (None, "", PRETTY_WHITESPACE):
        return None
    ws = "[ ]" if whitespace is None else whitespace
    try:
        return _Lark(schema, ws, integral_fractions).grammar()
    except (_NotLowered, RecursionError):
        return None


def _regex(text: str) -> str:
    """``text`` matched literally inside a Lark ``/…/`` regex."""
    return "".join("\\" + c if c in _REGEX_META else "\\x2f" if c == "/" else c for c in text)


class _Lark:
    def __init__(self, root: Any, whitespace: str, integral_fractions: bool = True) -> None:
        self.root = root
        self.integer = INTEGER_REGEX if integral_fractions else CANONICAL_INTEGER_REGEX
        self.defs = root.get("$defs", {}) if isinstance(root, dict) else {}
        self.whitespace = whitespace  # a regex matched at most once at each place; "": none
        self.ws = "WS?" if whitespace else ""
        self.rules: dict[str, str] = {}
        self.terminals: dict[str, str] = {}
        self.def_rules: dict[str, str] = {}
        self.leaves: dict[str, str] = {}

    def grammar(self) -> str:
        start = self.value(self.root)
        if self.ws:
            self.terminals["WS"] = f"/{self.whitespace}/"
        lines = [f"start: {start}"]
        lines += [f"{name}: {body}" for name, body in self.rules.items()]
        lines += [f"{name}: {body}" for name, body in self.terminals.items()]
        return "\n".join(lines)

    # -- names ----------------------------------------------------------------------------
    def rule(self, body: str) -> str:
        name = f"v{len(self.rules)}"
        self.rules[name] = body
        return name

    def terminal(self, name: str, regex: str) -> str:
        self.terminals.setdefault(name, f"/{regex}/")
        return name

    def literal(self, value: Any) -> str:
        """``value`` in llguidance's spellings (:func:`literal_regex`): a token per scalar,
        objects and arrays as their structure (one token for ``[1]`` would lex ``[1,2]``'s
        ``[1`` as its start and never split it)."""
        ws, sep = self.ws, _seq(self.ws, '","', self.ws)
        if isinstance(value, dict):
            members = [_seq(f"/{literal_regex(k)}/", ws, '":"', ws, self.literal(v))
                       for k, v in value.items()]  # fmt: skip
            return _seq('"{"', ws, f" {sep} ".join(members), ws if members else "", '"}"')
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            return _seq('"["', ws, f" {sep} ".join(items), ws if items else "", '"]"')
        return f"/{literal_regex(value)}/"

    # -- values ---------------------------------------------------------------------------
    def value(self, node: Any) -> str:
        try:
            return self.lowered(node)
        except _NotLowered:
            # a scalar value (no object, no array: no key, no structure) the JSON mode spells
            if (not isinstance(node, dict) or types_of(node, self.defs) - _SCALARS
                    or '"$ref"' in json.dumps(node)):  # fmt: skip
                raise
            return self.leaf({k: v for k, v in node.items() if k != "$defs"})

    def lowered(self, node: Any) -> str:
        if node is True or node == {}:
            return self.any_value()
        if not isinstance(node, dict) or set(node) - _LOWERED:
            raise _NotLowered
        if "allOf" in node:
            return self.merged(node)
        if "$ref" in node:
            if set(node) - {"$ref", "$defs"}:
                raise _NotLowered  # an intersection with the target
            return self.reference(node["$ref"])
        if "anyOf" in node:
            if set(node) - {"anyOf", "$defs"} == {"type"}:
                return self.lowered(self.typed_branches(node))
            if set(node) - {"anyOf", "$defs"} or not node["anyOf"]:
                raise _NotLowered
            branches = [m for m in node["anyOf"] if m is True or types_of(m, self.defs)]
            if not branches:
                raise _NotLowered  # no value: the JSON mode names it
            return "(" + " | ".join(self.value(m) for m in branches) + ")"
        if "enum" in node or "const" in node:
            values = [node["const"]] if "const" in node else list(node["enum"])
            rest = {k: v for k, v in node.items() if k not in ("enum", "const", "$defs")}
            values = [v for v in values if not rest or satisfies(v, rest, self.defs)]
            if not values:
                raise _NotLowered
            return "(" + " | ".join(self.literal(v) for v in values) + ")"
        kind = node.get("type", list(ALL_TYPES))
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if "number" in kinds and "integer" in kinds:
            kinds.remove("integer")
        if not kinds:
            raise _NotLowered
        parts = [self.typed(k, {key: node[key] for key in _BY_KIND[k] if key in node})
                 for k in kinds]  # fmt: skip
        return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"

    def typed_branches(self, node: dict[str, Any]) -> dict[str, Any]:
        """``{"type": T, "anyOf": [B…]}`` as ``{"anyOf": [B ∧ {"type": T}…]}`` (a value has
        one of the types T and satisfies a branch): each branch's own types cut to T (a
        branch that is a bare ``$ref``: its definition's), the branches left without a type
        dropped; a branch with a ``$ref`` beside other keywords is not lowered. The format
        expansion writes these: ``{"type": "string", "anyOf": [{"format": "ipv4"}, …]}``."""
        kind = node["type"]
        allowed = widen({kind} if isinstance(kind, str) else set(kind))
        branches = []
        for branch in node["anyOf"]:
            if branch is True:
                branch = {}
            if not isinstance(branch, dict):
                continue  # (false: admits nothing)
            if "$ref" in branch:
                name = branch["$ref"].rsplit("/", 1)[-1]
                if set(branch) - {"$ref", "$defs"} or name not in self.defs:
                    raise _NotLowered
                branch = self.defs[name]
                if branch is True:
                    branch = {}
                if not isinstance(branch, dict):
                    continue
            own = branch.get("type", sorted(allowed))
            kinds = widen({own} if isinstance(own, str) else set(own)) & allowed
            if "number" in kinds:  # (number stands for integer too)
                kinds.discard("integer")
            if kinds:
                branches.append({**branch, "type": sorted(kinds)})
        if not branches:
            raise _NotLowered  # no value: the JSON mode names it
        return {"anyOf": branches}

    def merged(self, node: dict[str, Any]) -> str:
        """An ``allOf`` of object parts, merged as :mod:`.order` merges them (names in the order
        the parts list them), one object per choice of their ``anyOf`` branches."""
        ways = merged_objects({k: v for k, v in node.items() if k != "$defs"}, self.defs)
        if ways is None:
            raise _NotLowered
        forms = []
        every = widen(set(ALL_TYPES))
        for merged in ways:
            kinds = set(every)
            for part in merged.pop("allOf", []):
                if not isinstance(part, dict) or set(part) != {"type"}:
                    raise _NotLowered  # something beside the keys: the engine's merge
                kind = part["type"]
                kinds &= widen({kind} if isinstance(kind, str) else set(kind))
            if kinds != every:
                merged["type"] = sorted(kinds)
            if kinds:
                forms.append(self.lowered(merged))
        if not forms:
            raise _NotLowered
        return forms[0] if len(forms) == 1 else "(" + " | ".join(forms) + ")"

    def reference(self, ref: str) -> str:
        name = ref.rsplit("/", 1)[-1]
        if name not in self.defs:
            raise _NotLowered
        if name not in self.def_rules:
            rule = f"d{len(self.def_rules)}"
            self.def_rules[name] = rule
            self.rules[rule] = "<pending>"
            self.rules[rule] = self.value(self.defs[name])
        return self.def_rules[name]

    def typed(self, kind: str, node: dict[str, Any]) -> str:
        if kind == "null":
            return '"null"'
        if kind == "boolean":
            return '("true" | "false")'
        if kind in ("integer", "number"):
            if node:
                return self.leaf({"type": kind, **node})
            return self.terminal("INT", self.integer) if kind == "integer" else self.number()
        if kind == "string":
            if set(node) - set(STRING_KEYWORDS):
                return self.leaf({"type": "string", **node})
            return self.string(node.get("minLength", 0), node.get("maxLength"))
        if kind == "array":
            return self.array(node)
        return self.object(node)

    def leaf(self, node: dict[str, Any]) -> str:
        """A string or number llguidance's JSON mode spells (a pattern, bounds)."""
        text = json.dumps({**node, "x-guidance": {"whitespace_flexible": False}},
                          separators=(",", ":"), ensure_ascii=False)  # fmt: skip
        if text not in self.leaves:
            self.leaves[text] = self.rule(f"%json {text}")
        return self.leaves[text]

    def number(self) -> str:
        return self.terminal("NUMBER", NUMBER_REGEX)

    def string(self, low: int, high: int | None) -> str:
        if not isinstance(low, int) or (high is not None and not isinstance(high, int)):
            raise _NotLowered
        if high is not None and low > high:
            raise _NotLowered  # no string: the JSON mode names the bounds
        if (low, high) == (0, None):
            return self.terminal("STRING", f'"{CHAR_REGEX}*"')
        bound = f"{{{low},}}" if high is None else f"{{{low},{high}}}"
        return self.terminal(f"STRING_{low}_{'' if high is None else high}",
                             f'"{CHAR_REGEX}{bound}"')  # fmt: skip

    def any_value(self) -> str:
        if "value" not in self.rules:
            self.rules["value"] = "<pending>"
            ws, string = self.ws, self.string(0, None)
            member = _seq(string, ws, '":"', ws, "value")
            sep = _seq(ws, '","', ws)
            members = _seq(member, f"({_seq(sep, member)})*", ws)
            items = _seq("value", f"({_seq(sep, 'value')})*", ws)
            obj = _seq('"{"', ws, f"({members})?", '"}"')
            arr = _seq('"["', ws, f"({items})?", '"]"')
            self.rules["value"] = " | ".join(
                [obj, arr, string, self.number(), '"true"', '"false"', '"null"']
            )
        return "value"

    # -- arrays and objects (the structure of :mod:`.regex`) ------------------------------
    def array(self, node: dict[str, Any]) -> str:
        ws, sep = self.ws, _seq(self.ws, '","', self.ws)
        prefix = [self.value(p) for p in node.get("prefixItems", [])]
        items = node.get("items", True)
        low, high = node.get("minItems", 0), node.get("maxItems")
        if not isinstance(low, int) or (high is not None and not isinstance(high, int)):
            raise _NotLowered
        more = None if items is False else self.value(items)
        if more is None:
            high = len(prefix) if high is None else min(high, len(prefix))
        if high is not None and low > high:
            raise _NotLowered  # no array: the JSON mode names the bounds
        body = array_body(prefix, more, low, high, sep, _seq, lambda x: f"({x})?", self.repeat)
        if not body:
            return self.rule(_seq('"["', ws, '"]"'))
        if low > 0:
            return self.rule(_seq('"["', ws, body, ws, '"]"'))
        return self.rule(_seq('"["', ws, f"({_seq(body, ws)})?", '"]"'))  # one place when empty

    @staticmethod
    def repeat(item: Any, sep: str, low: int, high: int | None, leading: bool) -> str:
        if high is not None and high == 0:
            return ""
        first = _seq(sep if leading else "", item)
        rest_low, rest_high = max(low - 1, 0), None if high is None else high - 1
        if (rest_low, rest_high) == (0, None):
            bound = "*"
        elif rest_high is None:
            bound = f"{{{rest_low},}}"
        else:
            bound = f"{{{rest_low},{rest_high}}}"
        whole = _seq(first, f"({_seq(sep, item)}){bound}") if rest_high != 0 else first
        return whole if low > 0 else f"({whole})?"

    def object(self, node: dict[str, Any]) -> str:
        ws, sep = self.ws, _seq(self.ws, '","', self.ws)
        props = dict(node.get("properties", {}))
        required = set(node.get("required", []))
        extra = node.get("additionalProperties", True)
        for name in node.get("required", []):  # after the declared ones, with the extra schema
            props.setdefault(name, extra)
        if any(props[n] is False for n in required):
            raise _NotLowered  # an empty language: the JSON mode names it
        if len(props) > MAX_MEMBERS:
            raise _NotLowered
        patterned = self.patterned(node.get("patternProperties") or {}, props, extra)
        members = []
        for name, sub in props.items():
            if sub is False:
                continue
            key = self.literal(name)
            members.append((_seq(key, ws, '":"', ws, self.value(sub)), name in required))
        other = None
        if extra is not False:
            names = [n for n in props]
            key = self.string(0, None)
            if names:
                spelled = "|".join(_spellings(n) for n in names)
                key = self.terminal(f"KEY_EXTRA{len(self.terminals)}",
                                    f'"{CHAR_REGEX}*"/ & ~/{spelled}')  # fmt: skip
            other = _seq(key, ws, '":"', ws, self.value(extra))
        elif patterned is not None:
            other = patterned
        # first: members i.. with none written yet; later: with some written already
        first = "" if other is None else _seq(other, f"({_seq(sep, other)})*")
        later = "" if other is None else f"({_seq(sep, other)})*"
        for text, needed in reversed(members):
            with_first = _seq(text, later)
            if needed:
                first, later = with_first, self.rule(_seq(sep, text, later))
            else:
                first = self.rule(f"{with_first} | {first}") if first else with_first
                later = self.rule(_seq(f"({_seq(sep, text)})?", later))
        if not first:
            return self.rule(_seq('"{"', ws, '"}"'))
        if required:
            return self.rule(_seq('"{"', ws, first, ws, '"}"'))
        return self.rule(_seq('"{"', ws, f"({_seq(first, ws)})?", '"}"'))

    def patterned(self, patterns: dict[str, Any], props: dict[str, Any], extra: Any) -> str | None:
        """The members whose keys match ``patterns`` (``patternProperties``): a key a
        ``%json`` leaf spells (the pattern, found anywhere in the key, as llguidance's JSON
        mode reads it), then its value. Lowered where that is the whole rule: no other key
        (``additionalProperties: false``, as strict objects have), every pattern's schema the
        same (a key matching two needs both), and no listed name matching a pattern (its value
        would need both schemas; names are tested with Python's ``re`` with and without
        ``re.ASCII``, and a pattern Python cannot read is taken to match). ``None``: no
        pattern admits a key."""
        if not patterns:
            return None
        if extra is not False:
            raise _NotLowered  # the other keys: a string matching none of the patterns
        schemas = {json.dumps(v, sort_keys=True) for v in patterns.values()}
        if len(schemas) > 1 or any(_may_match(p, n) for p in patterns for n in props):
            raise _NotLowered
        value = next(iter(patterns.values()))
        if value is False:
            return None  # a key that matches admits no value: no such member
        keys = [self.leaf({"type": "string", "pattern": p}) for p in patterns]
        key = keys[0] if len(keys) == 1 else "(" + " | ".join(keys) + ")"
        return _seq(key, self.ws, '":"', self.ws, self.value(value))


def _may_match(pattern: str, name: str) -> bool:
    """Whether ``pattern`` may match somewhere in ``name`` (JSON Schema's reading): Python's
    ``re`` finds it with or without ``re.ASCII`` (ECMA-262's ``\\d`` and ``\\w`` are ASCII),
    or cannot read the pattern."""
    for flags in (0, re.ASCII):
        try:
            if re.search(pattern, name, flags):
                return True
        except (re.error, TypeError, ValueError, OverflowError, RecursionError):
            return True
    return False


def array_body(
    prefix: list[str],
    more: str | None,
    low: int,
    high: int | None,
    sep: str,
    seq: Callable[..., str],
    opt: Callable[[str], str],
    repeat: Callable[..., str],
) -> str:
    """An array's elements as a chain (shared by this lowering and :mod:`.regex`): the
    ``prefixItems`` in order, element k optional once k ≥ ``minItems``, then ``more`` items up to
    ``high`` (``None``: unbounded), written with the caller's ``seq``, ``opt`` and ``repeat``."""
    tail = ""
    if more is not None and (high is None or high > len(prefix)):
        extra_low = max(max(low, 1) - len(prefix), 0)
        extra_high = None if high is None else high - len(prefix)
        tail = repeat(more, sep, extra_low, extra_high, leading=bool(prefix))
    body = tail
    for k in range(len(prefix) - 1, -1, -1):
        if high is not None and k >= high:
            continue
        head = seq("" if k == 0 else sep, prefix[k], body)
        body = head if k < max(low, 1) else opt(head)
    if more is not None and not prefix and tail:
        body = repeat(more, sep, max(low, 1), high, leading=False)
    return body


_SHORT_ESCAPES = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def literal_regex(value: Any) -> str:
    """A regex of the JSON text of a constant, in llguidance's spellings: compact; an integral
    number as an integer, also with one zero fraction (``1.0``; zero also as ``-0``); in strings
    ``\\"`` ``\\\\``, control characters as their short escape or ``\\u00XX`` (either case),
    U+007F as ``\\u007f``, everything else raw (few spellings, so a finite language stays
    small).

    Example:
        >>> from hf_fvo.grammar.schema.lark import literal_regex
        >>> print(literal_regex("a\\n"), literal_regex(2.0))
        "a(?:\\\\n|\\\\u000[aA])" 2(?:\\.0)?
    """
    if isinstance(value, str):
        return '"' + "".join(_canonical_char(c) for c in value) + '"'
    integral = isinstance(value, int) and not isinstance(value, bool)
    if integral or (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
        # an integral number also with one zero fraction (1.0 equals 1), zero also as -0
        return ("-?0" if value == 0 else _regex(str(int(value)))) + r"(?:\.0)?"
    return _regex(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _canonical_char(c: str) -> str:
    if c == '"':
        return r'\\"'
    if c == "\\":
        return r"\\\\"
    if ord(c) < 0x20 or c == "\x7f":
        escaped = r"\\u" + _hex(ord(c))
        if c in _SHORT_ESCAPES:
            return rf"(?:\\{_SHORT_ESCAPES[c]}|{escaped})"
        return escaped
    return _regex(c)


def _seq(*parts: str) -> str:
    """Lark items in sequence (empty ones dropped)."""
    return " ".join(p for p in parts if p)


def _spellings(name: str) -> str:
    """A regex of the JSON string literal ``name`` in every spelling."""
    return '"' + "".join(_char_spellings(c) for c in name) + '"'


def _char_spellings(c: str) -> str:
    code = ord(c)
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escaped = r"\\u" + _hex(high) + r"\\u" + _hex(low)
    else:
        escaped = r"\\u" + _hex(code)
    raw = {'"': r"\\\"", "\\": r"\\\\", "/": r"\x2f|\\\x2f", "\b": r"\\b", "\f": r"\\f",
           "\n": r"\\n", "\r": r"\\r", "\t": r"\\t"}.get(c)  # fmt: skip
    if raw is None:
        raw = "" if code < 0x20 else _regex(c)
    return f"(?:{raw}|{escaped})" if raw else f"(?:{escaped})"


def _hex(code: int) -> str:
    return "".join(f"[{h.lower()}{h.upper()}]" if h.isalpha() else h for h in f"{code:04x}")
