"""Is a JSON *value* in a grammar's language? Search its serializations, guided by the grammar.

Grammars for JSON schemas fix one text per value up to key order (properties in the schema's
order, compact or given whitespace, canonical string escapes). A test that asks "does the grammar
accept this instance" must therefore try the key orders the schema allows; a test that asks "does
it reject this invalid instance" feeds it in the schema's key order.
:func:`accepting_serialization` does both: a depth-first search over key orders (the schema's
order first, when given) that feeds the compact text through the grammar piece by piece and
prunes every prefix the grammar refuses. Scalars keep their compact serialization (``2.0`` stays
``2.0``).

Example:
    >>> from hf_fvo import Grammar
    >>> from hf_fvo.eval.instances import accepting_serialization
    >>> from hf_fvo.models import load_default_tokenizer
    >>> tok = load_default_tokenizer()
    >>> g = Grammar.from_json_schema({"type": "object", "properties": {"a": {}, "b": {}}}, tok,
    ...                              whitespace="")
    >>> accepting_serialization(g, {"b": 1, "a": 2}, tok)
    '{"a":2,"b":1}'
    >>> accepting_serialization(g, {"c": 1}, tok) is None
    True
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.grammar import Grammar, TokenVocabulary

__all__ = ["accepting_serialization", "in_schema_order", "schema_key_order"]


def accepting_serialization(
    grammar: Grammar,
    value: Any,
    tokenizer: Any,
    *,
    key_order: Sequence[str] = (),
    search: bool = True,
    max_steps: int = 2_000_000,
) -> str | None:
    """A compact JSON text of ``value`` that ``grammar`` accepts in full (its masks, and its
    final check where it has one: :attr:`Grammar.checked`), or ``None`` if no key order (and no
    integral-number spelling) is accepted.

    Args:
        grammar: A grammar over ``tokenizer``'s ids (compact whitespace, ``whitespace=""``).
        value: The JSON value.
        tokenizer: The tokenizer the grammar was compiled for (the text is fed as greedy
            longest-match tokens).
        key_order: Property names in the order to try first (see :func:`schema_key_order`);
            other keys follow in the instance's order.
        search: Try other key orders when that one is refused (``False``: only that order,
            which is how a grammar with a fixed property order is meant to be fed). The search
            backtracks over each object's key orders; a nested value keeps the first spelling
            the grammar accepts.
        max_steps: Bound on grammar steps; exceeding it raises ``RuntimeError``.
    """
    vocab = (
        tokenizer
        if isinstance(tokenizer, TokenVocabulary)
        else TokenVocabulary.from_tokenizer(tokenizer, grammar.eos_token_ids)
    )
    rank = {k: i for i, k in enumerate(dict.fromkeys(key_order))}
    walker = _Search(grammar, _Spelling(vocab), max_steps, rank, search)
    for text, state in walker.value(value, grammar.initial_state):
        if grammar.is_accepting(state):
            if grammar.checked and grammar.check_text(text) is not None:
                continue
            return text
    return None


class _Spelling:
    """Greedy longest-match token ids for a byte string (any spelling of the text is a token
    sequence of the language when the text is; fewer tokens mean fewer grammar steps)."""

    def __init__(self, vocab: TokenVocabulary) -> None:
        self.ids: dict[bytes, int] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b is not None:
                self.ids.setdefault(b, i)
        self.longest = max(len(b) for b in self.ids)

    def tokens(self, data: bytes) -> list[int]:
        out, i = [], 0
        while i < len(data):
            for size in range(min(self.longest, len(data) - i), 0, -1):
                token = self.ids.get(data[i : i + size])
                if token is not None:
                    out.append(token)
                    i += size
                    break
            else:
                raise InvalidArgumentError(f"no token spells byte {data[i]:#x}")
        return out


class _Search:
    def __init__(self, grammar: Grammar, spelling: _Spelling, max_steps: int,
                 rank: dict[str, int], search: bool) -> None:  # fmt: skip
        self.grammar = grammar
        self.search = search
        self.rank = rank
        self.spelling = spelling
        self.steps = max_steps

    def feed(self, text: str, state: Any) -> Any:
        for token in self.spelling.tokens(text.encode()):
            self.steps -= 1
            if self.steps < 0:
                raise RuntimeError("serialization search exceeded max_steps")
            state = self.grammar.next_state(state, token)
            if state is None:
                return None
        return state

    def value(self, value: Any, state: Any) -> Iterator[tuple[str, Any]]:
        if isinstance(value, dict):
            start = self.feed("{", state)
            if start is not None:
                items = sorted(value.items(), key=lambda kv: self.rank.get(kv[0], len(self.rank)))
                yield from self.members(items, start, "{", first=True)
        elif isinstance(value, list):
            start = self.feed("[", state)
            if start is not None:
                yield from self.items(value, start, "[")
        else:
            text = json.dumps(value, ensure_ascii=False)
            end = self.feed(text, state)
            if end is not None:
                yield text, end

    def members(self, rest: list[tuple[str, Any]], state: Any, text: str,
                first: bool) -> Iterator[tuple[str, Any]]:  # fmt: skip
        if not rest:
            end = self.feed("}", state)
            if end is not None:
                yield text + "}", end
            return
        for i, (key, val) in enumerate(rest if self.search else rest[:1]):
            head = ("" if first else ",") + json.dumps(key, ensure_ascii=False) + ":"
            after_key = self.feed(head, state)
            if after_key is None:
                continue
            others = rest[:i] + rest[i + 1 :]
            # a value's first accepted spelling is kept (its other key orders lead to the
            # same place in a JSON grammar); the search backtracks over this object's keys
            for val_text, after_val in itertools.islice(self.value(val, after_key), 1):
                yield from self.members(others, after_val, text + head + val_text, first=False)

    def items(self, values: list[Any], state: Any, text: str) -> Iterator[tuple[str, Any]]:
        if not values:
            end = self.feed("]", state)
            if end is not None:
                yield text + "]", end
            return
        sep = "" if text == "[" else ","
        after_sep = self.feed(sep, state) if sep else state
        if after_sep is None:
            return
        for item_text, after_item in itertools.islice(self.value(values[0], after_sep), 1):
            yield from self.items(values[1:], after_item, text + sep + item_text)


def schema_key_order(schema: Any) -> list[str]:
    """Property names in the order a JSON schema lists them (depth-first over the prepared
    schema, so definitions reached by ``$ref`` count where they are defined).

    Example:
        >>> from hf_fvo.eval.instances import schema_key_order
        >>> schema_key_order({"properties": {"b": {}, "a": {"properties": {"c": {}}}}})
        ['b', 'a', 'c']
    """
    from hf_fvo.grammar import prepare_json_schema

    order: list[str] = []
    stack = [prepare_json_schema(schema, strict=False).schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                order.extend(props)
            stack.extend(reversed([v for k, v in node.items() if k not in ("enum", "const")]))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return list(dict.fromkeys(order))


def in_schema_order(value: Any, schema: Any) -> Any:
    """``value`` with each object's keys in the order of the subschema that value matches.

    :func:`schema_key_order` builds one order for the whole schema; where ``anyOf``/``oneOf``
    branches list the same keys in different orders, no single order fits every branch. This
    walks ``schema`` beside ``value`` instead: an object's keys follow its node's
    ``properties``, then those of ``$ref`` targets and ``allOf`` members, then those of the first
    ``anyOf``/``oneOf`` branch the value validates against (``jsonschema``), in the order the
    keywords are written; keys no schema lists keep their given order, after the listed ones.
    Only local references (``#...``) are followed.

    Example:
        >>> from hf_fvo.eval.instances import in_schema_order
        >>> schema = {"anyOf": [{"properties": {"a": {}, "b": {"type": "string"}}},
        ...                     {"properties": {"b": {"type": "integer"}, "a": {}}}]}
        >>> in_schema_order({"a": 1, "b": 2}, schema)
        {'b': 2, 'a': 1}
    """
    import jsonschema

    root = schema if isinstance(schema, dict) else {}
    try:
        validator = jsonschema.validators.validator_for(root)(root)
    except Exception:  # a schema jsonschema cannot load orders nothing
        return value

    def resolve(ref: str) -> Any:
        if not ref.startswith("#"):
            return None
        node: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def valid(sub: Any, v: Any) -> bool:
        try:
            return validator.evolve(schema=sub).is_valid(v)
        except Exception:  # an unloadable branch is not the match
            return False

    def applicable(v: Any, nodes: list[Any], depth: int = 0) -> list[dict]:
        out: list[dict] = []
        for node in nodes:
            if not isinstance(node, dict) or depth > 32:
                continue
            out.append(node)
            for key, sub in node.items():
                if key == "$ref" and isinstance(sub, str):
                    out.extend(applicable(v, [resolve(sub)], depth + 1))
                elif key == "allOf" and isinstance(sub, list):
                    out.extend(applicable(v, sub, depth + 1))
                elif key in ("anyOf", "oneOf") and isinstance(sub, list):
                    match = next((b for b in sub if valid(b, v)), None)
                    out.extend(applicable(v, [match], depth + 1))
        return out

    def walk(v: Any, nodes: list[Any]) -> Any:
        if not isinstance(v, dict | list):
            return v
        found = applicable(v, nodes)
        if isinstance(v, list):
            return [walk(item, _item_schemas(found, i)) for i, item in enumerate(v)]
        order: list[str] = []
        for node in found:
            props = node.get("properties")
            if isinstance(props, dict):
                order.extend(props)
        rank = {k: j for j, k in enumerate(dict.fromkeys(order))}
        keys = sorted(v, key=lambda k: rank.get(k, len(rank)))
        return {k: walk(v[k], _member_schemas(found, k)) for k in keys}

    return walk(value, [root])


def _member_schemas(nodes: list[dict], key: str) -> list[Any]:
    import re

    out: list[Any] = []
    for node in nodes:
        props = node.get("properties")
        if isinstance(props, dict) and key in props:
            out.append(props[key])
            continue
        patterns = node.get("patternProperties")
        hits = []
        if isinstance(patterns, dict):
            for pattern, sub in patterns.items():
                try:
                    if re.search(pattern, key):
                        hits.append(sub)
                except re.error:
                    pass
        out.extend(hits)
        if not hits and isinstance(node.get("additionalProperties"), dict):
            out.append(node["additionalProperties"])
    return out


def _item_schemas(nodes: list[dict], index: int) -> list[Any]:
    out: list[Any] = []
    for node in nodes:
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list):
            out.append(prefix[index] if index < len(prefix) else items)
        elif isinstance(items, list):
            out.append(items[index] if index < len(items) else node.get("additionalItems"))
        else:
            out.append(items)
    return out
