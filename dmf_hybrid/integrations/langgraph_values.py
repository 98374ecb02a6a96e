"""What a LangGraph store does with an item's value: the texts its index paths make, and
whether it passes a search ``filter``. Pure functions, from the contract of
``langgraph.store.base`` and the reference ``InMemoryStore``.

Texts: each index path (``"$"``: the whole value as JSON, ``"a.b"``, ``"a[*].b"``,
``"a[0]"``, ``"{a,b}"``) makes its texts with LangGraph's own ``get_text_at_path``; each
text is embedded on its own and labelled as the reference store labels it (the path, or
``path.i`` when the path makes several texts). An item's score is its best text's.

Filter: each key names a top-level key of the value (``"a.b"`` is the key ``"a.b"``, as in
the reference stores); a nested object compares keys below it; a list compares element by
element; ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte`` compare with an operand.
Equality is JSON equality (a boolean never equals a number); the order operators compare
numbers only (a missing or non-numeric value does not match; the reference store raises on
a missing key and converts strings with ``float``).

:func:`pushdown` turns as much of a filter as the memory's json-path filters can say into
``where`` terms that hold for every item :func:`matches` accepts (never fewer items), so a
search can narrow its candidates in the store and decide with :func:`matches`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from .._internal.checks import full_match
from .._internal.errors import FilterError
from .._internal.jsonpaths import MAX_PATH_KEYS, PATH_KEY_RE
from .common import missing_extra

try:
    from langgraph.store.base import get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - the optional extra is missing
    raise missing_extra("LangGraph", "langgraph") from exc

#: The index path of the whole value.
WHOLE = "$"
ORDER: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
OPERATORS = ("$eq", "$ne", *ORDER)
#: Most ``where`` terms a filter is pushed down as (the rest is decided by ``matches``).
MAX_TERMS = 64
INT64 = 2**63

IndexPaths = list[tuple[str, Any]]


def index_paths(fields: list[str]) -> IndexPaths:
    """``(path, tokens)`` of index paths; ``"$"`` stays the whole value."""
    return [(p, p if p == WHOLE else tokenize_path(p)) for p in fields]


def index_texts(value: Mapping[str, Any], paths: IndexPaths) -> dict[str, str]:
    """The texts ``paths`` make of ``value``, by label (the path, or ``path.i`` for each of
    several texts); a later path making the same label replaces the earlier one."""
    texts: dict[str, str] = {}
    for path, tokens in paths:
        found = get_text_at_path(value, tokens)
        if len(found) == 1:
            texts[path] = found[0]
        else:
            texts.update((f"{path}.{i}", text) for i, text in enumerate(found))
    return texts


# ---------------------------------------------------------------- checking a filter


def check_filter(flt: Any) -> None:
    """FilterError (a ValueError) for a filter no LangGraph store can run."""
    if flt is None:
        return
    if not isinstance(flt, Mapping):
        raise FilterError("filter must be a mapping of value keys", field="filter")
    for key, cond in flt.items():
        _check(cond, f"filter.{key}")


def _check(cond: Any, where: str) -> None:
    if isinstance(cond, Mapping):
        if _is_operators(cond):
            for op, operand in cond.items():
                if op not in OPERATORS:
                    raise FilterError(f"unsupported filter operator {op!r} (LangGraph's: "
                                      f"{', '.join(OPERATORS)})", field=f"{where}.{op}")
                if op in ORDER and _number(operand) is None:
                    raise FilterError(f"{op} compares with a number, not {operand!r}",
                                      field=f"{where}.{op}")
        else:
            for key, sub in cond.items():
                _check(sub, f"{where}.{key}")
    elif isinstance(cond, list | tuple):
        for i, sub in enumerate(cond):
            _check(sub, f"{where}[{i}]")


def _is_operators(cond: Mapping[Any, Any]) -> bool:
    return any(isinstance(k, str) and k.startswith("$") for k in cond)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# ---------------------------------------------------------------- deciding


def matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a (checked) filter."""
    return all(_compare(value.get(key), cond) for key, cond in (flt or {}).items())


def _compare(found: Any, cond: Any) -> bool:
    if isinstance(cond, Mapping):
        if _is_operators(cond):
            return all(_apply(found, op, operand) for op, operand in cond.items())
        return isinstance(found, Mapping) and all(
            _compare(found.get(k), sub) for k, sub in cond.items())
    if isinstance(cond, list | tuple):
        return (isinstance(found, list | tuple) and len(found) == len(cond)
                and all(_compare(f, c) for f, c in zip(found, cond, strict=True)))
    return json_equal(found, cond)


def _apply(found: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return json_equal(found, operand)
    if op == "$ne":
        return not json_equal(found, operand)
    a, b = _number(found), _number(operand)
    return a is not None and b is not None and ORDER[op](a, b)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: a boolean equals only a boolean, numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping | list | tuple) or isinstance(b, Mapping | list | tuple):
        return False
    return bool(a == b)


# ---------------------------------------------------------------- narrowing in the store


def pushdown(flt: Mapping[str, Any] | None, field: str = "value") -> list[dict[str, Any]]:
    """``where`` terms on the json ``field`` that every value :func:`matches` accepts
    satisfies; a part they cannot say (a key outside ``[\\w-]``, a list) is left out."""
    terms: list[dict[str, Any]] = []
    for key, cond in (flt or {}).items():
        _push(terms, field, (key,), cond)
    return terms[:MAX_TERMS]


def _push(terms: list[dict[str, Any]], field: str, keys: tuple[Any, ...], cond: Any) -> None:
    if len(keys) > MAX_PATH_KEYS or not all(full_match(PATH_KEY_RE, k) for k in keys):
        return
    path = ".".join((field, *keys))
    if isinstance(cond, Mapping):
        if not _is_operators(cond):
            for key, sub in cond.items():
                _push(terms, field, (*keys, key), sub)
            return
        for op, operand in cond.items():
            if _storable(operand):  # an object or list operand is decided by ``matches``
                terms.append({path: {op: operand}})
    elif _storable(cond):
        terms.append({path: {"$eq": cond}})


def _storable(value: Any) -> bool:
    """Whether the store's json filters compare with ``value`` as JSON equality does."""
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return -INT64 <= value < INT64
    return isinstance(value, float) and math.isfinite(value)
