"""JSON Schema as the spec defines it, prepared for a grammar engine: exact, or a superset with
what the final check decides, or refused.

:func:`prepare_json_schema` turns a user's schema (draft-04 through 2020-12) into an equivalent
schema that uses only the keywords the pushdown engine (llguidance) enforces exactly:

- annotations and unknown keywords (``title``, ``x-…``, vendor names, misspellings) are dropped,
  as the spec says; so are ``format`` values the spec does not define (``int32``, ``color``);
- every ``$ref`` is resolved inside the document (JSON pointers, anchors, ``$id``) and its target
  hoisted under ``$defs``; a reference that leaves the document is refused;
- draft-specific forms are rewritten to 2020-12 (``items`` arrays, boolean ``exclusiveMinimum``,
  ``$ref`` overriding its siblings before 2019-09);
- ``format`` becomes an exact ``pattern`` on the decoded string (:mod:`.formats`);
- ``not``, ``if``/``then``/``else``, ``dependencies``/``dependentRequired``/``dependentSchemas``,
  overlapping ``oneOf`` branches and ``propertyNames`` are rewritten into ``anyOf``/``allOf`` of
  schemas the engine enforces, through an exact negation (:mod:`hf_fvo.grammar.schema.rewrite`);
- in ``strict`` mode (the default, the convention of Outlines and XGrammar) an object whose
  schema lists properties admits no other keys.

Whatever cannot be rewritten exactly is refused with :class:`UnsupportedSchemaError` naming the
keyword and its JSON pointer; nothing is dropped or approximated silently.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from hf_fvo.errors import GrammarError, InvalidArgumentError, UnsupportedSchemaError
from hf_fvo.grammar.schema.facts import CHECKED, MAX_DEPTH, Checked, Intersect, is_number
from hf_fvo.grammar.schema.formats import FORMAT_CHECKS, FORMATS, format_schema
from hf_fvo.grammar.schema.order import any_key_order
from hf_fvo.grammar.schema.patterns import inner_anchor, regex_problem, without_assertions
from hf_fvo.grammar.schema.rewrite import rewrite_logic
from hf_fvo.grammar.schema.strict import apply_strict

__all__ = ["Checked", "PreparedSchema", "load_json_schema", "prepare_json_schema"]

_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
_ANNOTATIONS = {
    "title", "description", "default", "examples", "example", "$comment", "deprecated",
    "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema",
    "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
    "x-guidance", "discriminator", "nullable",
}  # fmt: skip
_NUMBERS = ("multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum")
_COUNTS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "additionalProperties", "propertyNames", "not", "if", "then", "else", "contains",
)  # fmt: skip
_ROOT_URI = "https://hf-fvo.invalid/schema.json"  # a base for documents without $id
_DRAFTS_REF_OVERRIDES = ("draft-03", "draft-04", "draft-06", "draft-07")
_FORMAT = "\x00format"  # where a keyword handler leaves an enforced format for the node


@dataclass(frozen=True)
class PreparedSchema:
    """A schema the engine enforces, and what it does not say: what was dropped because it
    constrains nothing, and what an exact check of the finished text must decide.

    ``ignored`` lists ``(JSON pointer, keyword)`` for ``format`` values the spec does not define
    (the spec makes them annotations); unknown keywords are not listed. ``checked`` lists the
    constraints the schema here only over-approximates (empty: it is exactly the language).
    """

    schema: Any
    ignored: tuple[tuple[str, str], ...] = ()
    checked: tuple[Checked, ...] = ()
    draft: str = "2020-12"  # the draft the schema is read by ("draft-04", … "2020-12")
    # under key_order="any": the schema before its objects were unordered (the same language in
    # the schema's key order: a member built from it is one of any order's members)
    ordered: Any = None

    @property
    def integral_fractions(self) -> bool:
        """Whether ``1.0`` is an integer (draft 6 on; before, an integer has no fraction)."""
        return self.draft not in ("draft-03", "draft-04")

    @property
    def text(self) -> str:
        """The prepared schema as compact JSON (the compile cache key)."""
        return json.dumps(self.schema, separators=(",", ":"), sort_keys=False)


def load_json_schema(schema: Any) -> Any:
    """The schema as a JSON value: accepts a dict, a JSON string or bytes, a Pydantic model
    class (or any type Pydantic can describe), or an ``outlines.types.JsonSchema``.

    Raises:
        UnsupportedSchemaError: the input is not valid JSON or not a schema.

    Example:
        >>> from hf_fvo.grammar.schema.prepare import load_json_schema
        >>> load_json_schema('{"type": "integer"}')
        {'type': 'integer'}
    """
    outlines_schema = getattr(schema, "schema", None)
    if type(schema).__name__ == "JsonSchema" and isinstance(outlines_schema, (str, dict)):
        schema = outlines_schema  # outlines.types.JsonSchema
    if isinstance(schema, type):
        if hasattr(schema, "model_json_schema"):
            return schema.model_json_schema()
        try:
            from pydantic import TypeAdapter

            return TypeAdapter(schema).json_schema()
        except Exception as exc:  # not a type Pydantic can describe
            raise UnsupportedSchemaError(
                f"{schema.__name__} is not a JSON schema, a Pydantic model or a type Pydantic "
                f"can describe ({exc})"
            ) from exc
    if isinstance(schema, (str, bytes, bytearray)):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise UnsupportedSchemaError(f"the schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, (dict, bool)):
        raise UnsupportedSchemaError(
            "a JSON schema must be a dict, a JSON string, a boolean or a Pydantic model class, "
            f"got {type(schema).__name__}"
        )
    return schema


def prepare_json_schema(
    schema: Any,
    *,
    strict: bool = True,
    intersect: Intersect | None = None,
    checks: bool = False,
    formats: str = "assert",
    decimal_multiples: bool = True,
    inner_anchors: bool = True,
    key_order: str = "schema",
    format_patterns: bool = True,
    complements: bool = True,
) -> PreparedSchema:
    """Rewrite ``schema`` into an exactly equivalent schema the pushdown engine enforces, or
    (``checks=True``) into the tightest superset it enforces plus the list of constraints an
    exact check of the finished text must decide.

    Args:
        schema: Anything :func:`load_json_schema` accepts.
        strict: An object schema that lists ``properties`` (or ``patternProperties``) and does
            not say ``additionalProperties`` admits no other keys (Outlines' and XGrammar's
            convention). ``False`` keeps the spec's language, where it admits any extra key.
        intersect: The oracle for pattern questions (:data:`.facts.Intersect`);
            :func:`hf_fvo.grammar.prepare_json_schema` passes the pushdown engine's. Without
            one, patterns are assumed to share strings (sound; some schemas are then refused).
        checks: Where a constraint has no exact grammar (``uniqueItems`` over unbounded items,
            ``unevaluated*``, ``contains`` counts, the complement of a pattern, look-around,
            IDNA formats, …), relax it to a superset and list it in ``checked`` instead of
            refusing. Relaxing respects polarity: inside ``not``, ``if`` or a ``oneOf`` branch
            that must be complemented, the whole construct is relaxed.
        formats: ``"assert"`` (default: ``format`` is a constraint, what a user who writes
            ``"format": "date"`` wants from a generator) or ``"annotation"`` (the 2019-09 and
            2020-12 default: ``format`` constrains nothing).
        decimal_multiples: ``False`` (with ``checks``) leaves every fractional ``multipleOf``
            to the check (for an engine that refuses one).
        inner_anchors: ``False`` (with ``checks``) leaves patterns with ``^`` or ``$`` inside
            them (not only at their ends) to the check (llguidance reads those as look-around).
        format_patterns: ``False`` (with ``checks``) leaves a ``format`` that stands beside a
            ``pattern`` to the check (for an engine that cannot decide whether the two
            intersect).
        complements: ``False`` (with ``checks``) builds no complement (``not``, the failing
            side of ``if``, overlapping ``oneOf`` branches): the check decides them (for an
            engine whose grammar would otherwise be too large).
        key_order: ``"schema"`` (default: an object's keys in the schema's order, the
            convention of Outlines and XGrammar) or ``"any"`` (:mod:`.order`: any order, each
            key at most once, the required ones present).

    Raises:
        UnsupportedSchemaError: an assertion that cannot be enforced exactly (without
            ``checks``), naming the keyword and its JSON pointer; a malformed schema, or a
            reference the document does not resolve.

    Example:
        >>> from hf_fvo.grammar.schema.prepare import prepare_json_schema
        >>> prepared = prepare_json_schema({"type": "object", "title": "T",
        ...                                 "properties": {"a": {"type": "integer"}}})
        >>> prepared.schema
        {'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'additionalProperties': False}
    """
    if formats not in ("assert", "annotation"):
        raise InvalidArgumentError(f"formats must be 'assert' or 'annotation', got {formats!r}")
    if key_order not in ("schema", "any"):
        raise InvalidArgumentError(f"key_order must be 'schema' or 'any', got {key_order!r}")
    raw = load_json_schema(schema)
    checked: list[Checked] | None = [] if checks else None
    cleaner = _Cleaner(raw, checked, formats=formats)
    cleaner.inner_anchors = inner_anchors
    cleaner.format_patterns = format_patterns
    root = cleaner.run()
    try:
        if strict:
            root = apply_strict(root)
        root = rewrite_logic(root, intersect, checked, decimal_multiples=decimal_multiples,
                             complements=complements)  # fmt: skip
        before = None
        if key_order == "any":
            ordered: list[Checked] = []
            before, root = root, any_key_order(root, ordered, intersect)
            if ordered and checked is None:
                raise UnsupportedSchemaError(f"{ordered[0].pointer}: {ordered[0].reason} "
                                             "(checks=False)")  # fmt: skip
            checked = None if checked is None else [*checked, *ordered]
    except GrammarError as exc:  # name the user's definitions, not their hoisted copies
        exc.args = (cleaner.user_pointers(str(exc)), *exc.args[1:])
        raise
    found = tuple(
        Checked(cleaner.user_pointers(c.pointer), c.keyword, c.reason) for c in checked or ()
    )
    return PreparedSchema(root, tuple(cleaner.ignored), tuple(dict.fromkeys(found)), cleaner.draft,
                          before)  # fmt: skip


# -- cleaning --------------------------------------------------------------------------------


def _pointer(path: str, key: str | int) -> str:
    text = str(key).replace("~", "~0").replace("/", "~1")
    return f"{path}/{text}"


class _Cleaner:
    """Copies the schema keeping only understood keywords; resolves and hoists every $ref."""

    def __init__(self, raw: Any, checked: list[Checked] | None = None,
                 formats: str = "assert") -> None:  # fmt: skip
        self.raw = raw
        self.ignored: list[tuple[str, str]] = []
        self.checked = checked  # None: refuse what has no exact grammar
        self.formats = formats
        self.inner_anchors = True  # False: patterns with ^ or $ inside go to the check
        self.format_patterns = True  # False: a format beside a pattern goes to the check
        self.draft = _draft_of(raw)
        self.resources: dict[str, Any] = {}  # absolute base URI → raw node
        self.anchors: dict[str, Any] = {}  # absolute URI with #anchor → raw node
        self.dynamic: dict[str, list[str]] = {}  # $dynamicAnchor name → absolute URIs
        self.bases: dict[int, str] = {}  # id() of each resource node → its absolute URI
        self.recursive: list[str] = []  # resources with "$recursiveAnchor": true
        self._index(raw, _ROOT_URI, "#", 0)
        ident = raw.get("$id", raw.get("id")) if isinstance(raw, dict) else None
        self.root_base = (
            urldefrag(_join(_ROOT_URI, ident))[0] if isinstance(ident, str) else (_ROOT_URI)
        )
        self.hoisted: dict[str, str] = {}  # absolute target URI → $defs name
        self.defs: dict[str, Any] = {}

    def run(self) -> Any:
        root = self.schema(self.raw, "#", _ROOT_URI, 0)
        if self.defs:
            if root is True:
                root = {}
            if root is False:
                return False
            root = {**root, "$defs": {**root.get("$defs", {}), **self.defs}}
        return root

    def identifier(self, node: dict[str, Any]) -> Any:
        """The node's ``$id`` (draft-04: ``id``); before 2019-09 a ``$ref`` beside it makes it
        void, as it does every sibling."""
        if "$ref" in node and self.draft in _DRAFTS_REF_OVERRIDES:
            return None
        ident = node.get("$id")
        if not isinstance(ident, str) and self.draft in ("draft-03", "draft-04"):
            ident = node.get("id")
        return ident

    def relax(self, out: dict[str, Any], path: str, keyword: str, why: str) -> None:
        """Leave ``keyword`` at ``path`` to the final check (its node then only
        over-approximates: marked :data:`~.facts.CHECKED`), or refuse it, naming it."""
        if self.checked is None:
            raise UnsupportedSchemaError(f"{path}: {why}")
        self.checked.append(Checked(path, keyword, why))
        out.setdefault(CHECKED, []).append(keyword)

    def user_pointers(self, message: str) -> str:
        """``message`` with each hoisted definition (``#/$defs/hf_fvo_ref3``, or a strict copy
        of one) replaced by where the schema defines it (``#/definitions/address``)."""
        where = {name: uri[len(_ROOT_URI) :] if uri.startswith(_ROOT_URI + "#") else uri
                 for uri, name in self.hoisted.items()}  # fmt: skip
        return re.sub(r"#/\$defs/(hf_fvo_ref\d+)(?:_strict\d+)*",
                      lambda m: where.get(m.group(1), m.group(0)), message)  # fmt: skip

    # index of $id resources and anchors, for reference resolution
    def _index(self, node: Any, base: str, path: str, depth: int) -> None:
        if depth > MAX_DEPTH or not isinstance(node, dict):
            return
        ident = self.identifier(node)
        if isinstance(ident, str):
            base = _join(base, ident)
            bare, fragment = urldefrag(base)
            self.resources.setdefault(bare, node)
            if not fragment:
                self.bases.setdefault(id(node), bare)
            if fragment and not fragment.startswith("/"):
                self.anchors.setdefault(base, node)  # draft-04/06 "id": "#name"
            base = bare
        anchor = node.get("$anchor")
        if isinstance(anchor, str):
            self.anchors.setdefault(f"{base}#{anchor}", node)
        dynamic = node.get("$dynamicAnchor")
        if isinstance(dynamic, str):  # also a plain anchor
            self.anchors.setdefault(f"{base}#{dynamic}", node)
            self.dynamic.setdefault(dynamic, []).append(f"{base}#{dynamic}")
        if node.get("$recursiveAnchor") is True and ("$id" in node or depth == 0):
            self.recursive.append(base)
        for key, value in node.items():
            if key in ("enum", "const", "default", "examples", "example"):
                continue
            if isinstance(value, dict) and key in (*_SCHEMA_MAPS, "$defs", "definitions",
                                                   "dependencies"):  # fmt: skip
                for name, sub in value.items():
                    self._index(sub, base, _pointer(_pointer(path, key), name), depth + 1)
            elif isinstance(value, dict):
                self._index(value, base, _pointer(path, key), depth + 1)
            elif isinstance(value, list):
                for i, sub in enumerate(value):
                    self._index(sub, base, _pointer(_pointer(path, key), i), depth + 1)

    def resolve(self, ref: str, base: str, path: str) -> tuple[str, Any, str]:
        """(absolute URI, raw target, base URI of the target) of a $ref."""
        target = _join(base, ref)
        bare, fragment = urldefrag(target)
        doc = self.resources.get(bare)
        if doc is None and bare == _ROOT_URI:
            doc = self.raw
        if doc is None:
            doc = self.meta_schema(bare)
        if doc is None:
            raise UnsupportedSchemaError(
                f"{path}: $ref {ref!r} points outside this schema; hf_fvo resolves references "
                "inside the document and to the JSON Schema meta-schemas only (no network): "
                "inline the referenced schema"
            )
        if not fragment:
            return bare, doc, bare
        if not fragment.startswith("/"):
            node = self.anchors.get(f"{bare}#{fragment}")
            if node is None:
                raise UnsupportedSchemaError(f"{path}: $ref {ref!r}: no anchor {fragment!r}")
            return f"{bare}#{fragment}", node, bare
        node = doc
        node_base = bare
        for part in fragment.split("/")[1:]:
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
                ident = self.identifier(node) if isinstance(node, dict) else None
                if isinstance(ident, str):
                    node_base = urldefrag(_join(node_base, ident))[0]
            else:
                raise UnsupportedSchemaError(f"{path}: $ref {ref!r} points to nothing")
        return f"{bare}#{fragment}", node, node_base

    def meta_schema(self, uri: str) -> Any:
        """A draft's meta-schema (or one of 2019-09/2020-12's vocabularies), shipped with
        ``jsonschema-specifications``, indexed as a resource of this document; ``None`` for
        any other URI."""
        from jsonschema_specifications import REGISTRY

        key = uri.rstrip("#")
        if key not in REGISTRY:
            return None
        doc = REGISTRY.contents(key)
        if key not in self.resources:
            self.resources[key] = doc
            self._index(doc, key, "#", 1)
            for vocab in REGISTRY:  # its vocabularies are reached through its own $refs
                if vocab.startswith(key.rsplit("/", 1)[0] + "/meta/"):
                    self.resources.setdefault(vocab, REGISTRY.contents(vocab))
                    self._index(REGISTRY.contents(vocab), vocab, "#", 1)
        return doc

    def dynamic_target(self, key: str, ref: Any, base: str, path: str) -> str | None:
        """The one target a ``$dynamicRef``/``$recursiveRef`` can have, as an absolute URI, or
        ``None`` where it depends on the path the evaluation took."""
        if not isinstance(ref, str):
            raise UnsupportedSchemaError(f"{path}: {key} must be a string, got {ref!r}")
        uri, target, _ = self.resolve(ref, base, path)
        if key == "$recursiveRef":
            if not (isinstance(target, dict) and target.get("$recursiveAnchor") is True):
                return uri  # no recursive anchor at the target: an ordinary reference
            if self.root_base in self.recursive or len(set(self.recursive)) == 1:
                return self.root_base if self.root_base in self.recursive else self.recursive[0]
            return None
        name = urldefrag(uri)[1]
        if (
            not name
            or name.startswith("/")
            or not (isinstance(target, dict) and target.get("$dynamicAnchor") == name)
        ):
            return uri  # not a dynamic anchor: an ordinary reference
        holders = list(dict.fromkeys(self.dynamic.get(name, [])))
        root = f"{self.root_base}#{name}"
        if root in holders:
            return root  # the outermost scope always holds the root resource
        return holders[0] if len(holders) == 1 else None

    def ref(self, ref: Any, base: str, path: str, depth: int) -> str:
        if not isinstance(ref, str):
            raise UnsupportedSchemaError(f"{path}: $ref must be a string, got {ref!r}")
        uri, target, target_base = self.resolve(ref, base, path)
        name = self.hoisted.get(uri)
        if name is None:
            name = f"hf_fvo_ref{len(self.hoisted)}"
            self.hoisted[uri] = name
            self.defs[name] = True  # placeholder while the target is cleaned (recursion)
            self.defs[name] = self.schema(target, f"{path}/$ref", target_base, depth + 1)
        return f"#/$defs/{name}"

    def schema(self, node: Any, path: str, base: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            parts = path.split("/")
            where = "/".join([*parts[:4], f"…({len(parts) - 6} levels)…", *parts[-2:]])
            raise UnsupportedSchemaError(
                f"{where}: the schema nests deeper than {MAX_DEPTH} levels"
            )
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise UnsupportedSchemaError(f"{path}: a schema must be an object or a boolean, got "
                                         f"{_short(node)}")  # fmt: skip
        ident = self.identifier(node)
        if id(node) in self.bases:  # a resource: its absolute URI, however it was reached
            base = self.bases[id(node)]
        elif isinstance(ident, str):
            base = urldefrag(_join(base, ident))[0]
        if "$ref" in node and self.draft in _DRAFTS_REF_OVERRIDES:
            # before 2019-09, $ref replaces the whole schema: its siblings are ignored
            return {"$ref": self.ref(node["$ref"], base, path, depth)}
        out: dict[str, Any] = {}
        for key, value in node.items():
            here = _pointer(path, key)
            if key in ("$defs", "definitions"):
                if not isinstance(value, dict):
                    raise UnsupportedSchemaError(
                        f"{here}: {key} must be an object mapping names to schemas, got "
                        f"{_short(value)}"
                    )
                continue  # definitions are reached through the references that use them
            if key in _ANNOTATIONS:
                continue
            handler = _HANDLERS.get(key)
            if handler is None:
                continue  # an unknown keyword is an annotation (JSON Schema §6.5)
            handler(self, out, node, key, value, here, base, depth)
        if "patternProperties" in out.get(CHECKED, ()):  # a pattern no engine compiles
            out.pop("patternProperties", None)
            out["additionalProperties"] = True  # the keys it may match: any (strict included)
        if _FORMAT in out:
            return self.with_format(out, out.pop(_FORMAT))
        return out

    def with_format(self, out: dict[str, Any], name: str) -> dict[str, Any]:
        """Add format ``name``'s string constraints to the node. A node that says nothing else
        about strings refers to one shared definition per format, so the engine builds each
        format's lexeme once however often the schema uses it."""
        kind = out.get("type")
        types = None if kind is None else ({kind} if isinstance(kind, str) else set(kind))
        if types is not None and "string" not in types:
            return out  # format constrains strings only
        ref = f"#/$defs/hf_fvo_format_{name}"
        self.defs.setdefault(f"hf_fvo_format_{name}", {"type": "string", **format_schema(name)})
        if set(out) <= {"type"}:
            if types == {"string"}:
                return {"$ref": ref}
            rest = [t for t in _TYPES if t != "string" and (types is None or t in types)]
            if types is None:
                rest.remove("integer")
            return {"anyOf": [{"type": rest}, {"$ref": ref}]}
        # next to other string constraints, the one-regex form keeps emptiness decidable
        out.setdefault("allOf", []).append(format_schema(name, single_pattern=True))
        return out


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986), also where ``base`` is a URN, which
    ``urljoin`` does not resolve against: a fragment stays in the base's resource."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


def _draft_of(raw: Any) -> str:
    uri = raw.get("$schema") if isinstance(raw, dict) else None
    if not isinstance(uri, str):
        return "2020-12"
    for draft in ("draft-03", "draft-04", "draft-06", "draft-07", "2019-09", "2020-12"):
        if draft in uri:
            return draft
    return "2020-12"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Keyword handlers: (cleaner, out, node, key, value, pointer, base, depth) -> None. Each checks
# its value, and writes its (possibly rewritten) form into ``out``.


def _sub(c: _Cleaner, value: Any, path: str, base: str, depth: int) -> Any:
    return c.schema(value, path, base, depth + 1)


def _h_ref(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    ref = c.ref(value, base, path.rsplit("/", 1)[0], depth)
    if "$ref" in out:  # a resolved $dynamicRef came first: both apply
        out.setdefault("allOf", []).append({"$ref": ref})
    else:
        out["$ref"] = ref


def _h_type(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(t, str) for t in names):
        raise UnsupportedSchemaError(f"{path}: type must be a type name or a list of them, got "
                                     f"{_short(value)}")  # fmt: skip
    unknown = [t for t in names if t not in _TYPES]
    if unknown:
        raise UnsupportedSchemaError(
            f"{path}: unknown type {unknown[0]!r} (JSON Schema types: {', '.join(_TYPES)})"
        )
    out["type"] = value if isinstance(value, str) else list(dict.fromkeys(names))


def _h_enum(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, list):
        raise UnsupportedSchemaError(f"{path}: enum must be an array, got {_short(value)}")
    out["enum"] = copy.deepcopy(value)


def _h_const(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    out["const"] = copy.deepcopy(value)


def _h_number(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if key in ("exclusiveMaximum", "exclusiveMinimum") and isinstance(value, bool):
        # draft-04: a boolean that makes maximum/minimum exclusive
        bound = node.get("maximum" if key == "exclusiveMaximum" else "minimum")
        if value and is_number(bound):
            out[key] = bound
        return
    if key in ("maximum", "minimum"):
        flag = node.get("exclusiveMaximum" if key == "maximum" else "exclusiveMinimum")
        if flag is True:
            return  # written as the exclusive bound above
    if not is_number(value):
        raise UnsupportedSchemaError(f"{path}: {key} must be a number, got {_short(value)}")
    if key == "multipleOf" and value <= 0:
        raise UnsupportedSchemaError(f"{path}: multipleOf must be > 0, got {value}")
    out[key] = value


def _h_count(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not is_number(value) or value < 0 or value != int(value):
        raise UnsupportedSchemaError(
            f"{path}: {key} must be a non-negative integer, got {_short(value)}"
        )
    out[key] = int(value)


def _check_regex(pattern: Any, path: str, what: str) -> str:
    if not isinstance(pattern, str):
        raise UnsupportedSchemaError(f"{path}: {what} must be a string, got {_short(pattern)}")
    return pattern


def _h_pattern(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    problem = regex_problem(_check_regex(value, path, "pattern"), "pattern")
    if problem is None and not c.inner_anchors and inner_anchor(value):
        problem = f"pattern {value!r} has an anchor inside it, which llguidance does not compile"
    if problem is None:
        out["pattern"] = value
        return
    c.relax(out, path, "pattern", problem)
    wider = without_assertions(value) if c.inner_anchors else None
    if wider is not None and not regex_problem(wider, "pattern"):
        out["pattern"] = wider  # the masks keep what the pattern says besides its assertions


def _h_format(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, str):
        raise UnsupportedSchemaError(f"{path}: format must be a string, got {_short(value)}")
    if value not in FORMATS and value not in FORMAT_CHECKS:
        c.ignored.append((path, f"format {value!r}"))
        return
    if c.formats == "annotation":
        return  # 2019-09/2020-12's default: format constrains nothing
    if value in FORMAT_CHECKS:
        c.relax(out, path, "format", f"format {value!r}: {FORMAT_CHECKS[value]}")
    if value in FORMATS and not c.format_patterns and "pattern" in node:
        c.relax(out, path, "format", f"format {value!r} beside a pattern: the engine cannot "
                "decide whether they intersect")  # fmt: skip
    elif value in FORMATS:
        out[_FORMAT] = value


def _h_items(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if isinstance(value, list):  # draft ≤ 2019-09 tuple form
        out["prefixItems"] = [
            _sub(c, s, _pointer(path, i), base, depth) for i, s in enumerate(value)
        ]
        if "additionalItems" in node:
            extra = _pointer(path.rsplit("/", 1)[0], "additionalItems")
            out["items"] = _sub(c, node["additionalItems"], extra, base, depth)
        return
    out["items"] = _sub(c, value, path, base, depth)


def _h_schema_list(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, list):
        raise UnsupportedSchemaError(f"{path}: {key} must be an array of schemas")
    out[key] = [_sub(c, s, _pointer(path, i), base, depth) for i, s in enumerate(value)]


def _h_schema_map(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, dict):
        raise UnsupportedSchemaError(f"{path}: {key} must be an object mapping names to schemas, "
                                     f"got {_short(value)}")  # fmt: skip
    if key == "patternProperties":
        for pattern in value:
            problem = regex_problem(
                _check_regex(pattern, _pointer(path, pattern), "patternProperties key"),
                "patternProperties key",
            )
            if problem is not None:  # keys it may match: any; the check decides
                c.relax(out, _pointer(path, pattern), "patternProperties", problem)
                return
    out[key] = {name: _sub(c, s, _pointer(path, name), base, depth) for name, s in value.items()}


def _h_schema_value(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if key in ("then", "else") and "if" not in node:
        return  # no effect without "if"
    out[key] = _sub(c, value, path, base, depth)


def _h_required(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise UnsupportedSchemaError(
            f"{path}: required must be an array of property names, got {_short(value)}"
        )
    if value:
        out["required"] = list(dict.fromkeys(value))


def _h_dependencies(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, dict):
        raise UnsupportedSchemaError(f"{path}: {key} must be an object, got {_short(value)}")
    names: dict[str, list[str]] = {}
    schemas: dict[str, Any] = {}
    for name, dep in value.items():
        here = _pointer(path, name)
        if isinstance(dep, list) and key != "dependentSchemas":
            if not all(isinstance(n, str) for n in dep):
                raise UnsupportedSchemaError(f"{here}: dependencies must name properties")
            names[name] = list(dep)
        elif key != "dependentRequired":
            schemas[name] = _sub(c, dep, here, base, depth)
        else:
            raise UnsupportedSchemaError(f"{here}: dependentRequired values must be arrays")
    if names:
        out["dependentRequired"] = {**out.get("dependentRequired", {}), **names}
    if schemas:
        out["dependentSchemas"] = {**out.get("dependentSchemas", {}), **schemas}


def _h_unique(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if not isinstance(value, bool):
        raise UnsupportedSchemaError(f"{path}: uniqueItems must be a boolean")
    if value:
        out["uniqueItems"] = True


_APPLICATORS = {"allOf", "anyOf", "oneOf", "if", "$ref", "$dynamicRef", "$recursiveRef",
                "dependentSchemas", "dependencies"}  # fmt: skip


def _h_unevaluated(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if value is True:
        return
    siblings = set(node) & _APPLICATORS
    if key == "unevaluatedProperties" and not siblings:
        # only this node's properties/patternProperties/additionalProperties evaluate keys
        if "additionalProperties" not in node:
            out["additionalProperties"] = _sub(c, value, path, base, depth)
        return
    if key == "unevaluatedItems" and not siblings and "contains" not in node:
        # only this node's items/prefixItems (additionalItems) evaluate items
        rest_open = isinstance(node.get("items"), list) and "additionalItems" not in node
        if "items" not in node or rest_open:
            out["items"] = _sub(c, value, path, base, depth)
        return
    c.relax(out, path, key, "which keywords evaluated each property or item depends on the "
            "instance through the applicators beside it")  # fmt: skip


def _h_dynamic(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    """``$dynamicRef`` / ``$recursiveRef``, resolved statically where the dynamic scope cannot
    change the target (the initial target is no dynamic anchor, the document's root resource
    holds the anchor, or a single resource does); otherwise left to the check."""
    target = c.dynamic_target(key, value, base, path)
    if target is None:
        c.relax(out, path, key, "the target depends on the dynamic scope of the evaluation")
    else:
        ref = c.ref(target, base, path.rsplit("/", 1)[0], depth)
        if "$ref" in out:  # beside a $ref: both apply
            out.setdefault("allOf", []).append({"$ref": ref})
        else:
            out["$ref"] = ref


def _h_contains(c: _Cleaner, out, node, key, value, path, base, depth) -> None:
    if key == "contains":
        out["contains"] = _sub(c, value, path, base, depth)
    elif "contains" in node:
        _h_count(c, out, node, key, value, path, base, depth)


_HANDLERS = {
    "$ref": _h_ref,
    "type": _h_type,
    "enum": _h_enum,
    "const": _h_const,
    **{k: _h_number for k in _NUMBERS},
    **{k: _h_count for k in _COUNTS},
    "pattern": _h_pattern,
    "format": _h_format,
    "items": _h_items,
    "additionalItems": lambda *a: None,  # read by "items" (only meaningful next to an array)
    **{k: _h_schema_list for k in _SCHEMA_LISTS},
    **{k: _h_schema_map for k in ("properties", "patternProperties")},
    **{k: _h_schema_value for k in _SCHEMA_VALUES},
    "required": _h_required,
    "dependencies": _h_dependencies,
    "dependentRequired": _h_dependencies,
    "dependentSchemas": _h_dependencies,
    "uniqueItems": _h_unique,
    "unevaluatedProperties": _h_unevaluated,
    "unevaluatedItems": _h_unevaluated,
    "$dynamicRef": _h_dynamic,
    "$recursiveRef": _h_dynamic,
    "contains": _h_contains,
    "minContains": _h_contains,
    "maxContains": _h_contains,
}
