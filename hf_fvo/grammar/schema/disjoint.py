"""A sound test that two JSON schemas share no instance (never wrong, sometimes silent), so
that ``oneOf`` branches that cannot overlap need no complement at all.

Example:
    >>> from hf_fvo.grammar.schema.disjoint import disjoint
    >>> disjoint({"type": "string"}, {"type": "null"}, {}), disjoint({}, {"type": "null"}, {})
    (True, False)
"""

from __future__ import annotations

from typing import Any

from hf_fvo.grammar.schema.facts import (
    Intersect,
    below,
    json_type,
    number_bounds,
    object_facts,
    property_count_bounds,
    property_schema,
    satisfies,
    string_patterns,
    types_of,
    value_set,
)

__all__ = ["disjoint", "disjoint_on"]


def disjoint(
    a: Any, b: Any, defs: dict[str, Any], depth: int = 0, *, intersect: Intersect | None = None
) -> bool:
    """True only if no JSON value satisfies both ``a`` and ``b`` (sound, not complete).

    Example:
        >>> from hf_fvo.grammar.schema.disjoint import disjoint
        >>> disjoint({"type": "string"}, {"type": "null"}, {}), disjoint({}, {"type": "null"}, {})
        (True, False)
    """
    if depth > 16:
        return False
    if a is False or b is False:
        return True
    common = types_of(a, defs) & types_of(b, defs)
    return all(disjoint_on(kind, a, b, defs, depth, intersect=intersect) for kind in common)


def disjoint_on(
    kind: str,
    a: Any,
    b: Any,
    defs: dict[str, Any],
    depth: int,
    *,
    intersect: Intersect | None = None,
) -> bool:
    """No value of JSON type ``kind`` satisfies both schemas (sound, not complete)."""
    va, vb = value_set(a, defs), value_set(b, defs)
    if va is not None:
        return not any(satisfies(v, b, defs) for v in va if json_type(v) == kind)
    if vb is not None:
        return not any(satisfies(v, a, defs) for v in vb if json_type(v) == kind)
    if kind == "object":
        ra, fa, ca = object_facts(a, defs)
        rb, fb, cb = object_facts(b, defs)
        if ra & fb or rb & fa:
            return True
        if (ca is not None and rb - ca) or (cb is not None and ra - cb):
            return True
        for name in ra | rb:
            pa, pb = property_schema(a, name, defs), property_schema(b, name, defs)
            if (
                pa is not None
                and pb is not None
                and disjoint(pa, pb, defs, depth + 1, intersect=intersect)
            ):
                return True
        low_a, high_a = property_count_bounds(a, defs)
        low_b, high_b = property_count_bounds(b, defs)
        return low_a > high_b or low_b > high_a
    if kind == "number":
        la, ha = number_bounds(a, defs)
        lb, hb = number_bounds(b, defs)
        return below(ha, lb) or below(hb, la)
    if kind == "string":
        pa, pb = string_patterns(a, defs), string_patterns(b, defs)
        if pa and pb and intersect is not None:
            return not intersect(tuple(pa + pb))
    return False
