"""The filter language: ``where`` mappings validated against an entity type's fields.

A filter is data, never SQL text: field names are checked against the schema and values are
coerced to the field's type here; ``store.sql`` compiles the tree with bound parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Union

import pydantic
from pydantic import TypeAdapter

from .checks import (
    INT64_MAX,
    INT64_MIN,
    MAX_ORDER_FIELDS,
    check_filter,
    check_order,
    fits_int64,
    identity_text,
)
from .errors import FilterError, first_problem
from .jsonpaths import split_path
from .schema import PY_TYPES, EntityType, FieldSpec

#: The filter language, described where a ``where`` is taken: in full (the wire models, so
#: the OpenAPI document) and in brief (the tool schemas, where every token is paid for).
FILTER_DOC = (
    "Filter (exact, evaluated in DuckDB). {field: value} means equals; {field: {op: value, "
    "...}} applies operators, all of which must hold: $eq, $ne (null allowed: {\"$eq\": "
    "null} matches missing values), $gt, $gte, $lt, $lte (numbers, dates, datetimes, "
    "strings), $in and $nin (a list of values), $contains (a list field holds the value; a "
    "string field contains the substring). Several fields in one object must all hold; "
    "{\"$and\": [filter, ...]} and {\"$or\": [filter, ...]} combine filters and nest (up to "
    "16 deep, 256 terms). Keys are the type's field names, or a dotted path into a json "
    "field ({\"metadata.user\": \"ana\"}, {\"value.tags\": {\"$contains\": \"x\"}}: keys of "
    "letters, digits, _ and -, at most 16; a missing path is null). An error names the path "
    "of the bad term, e.g. where.$or[1].rating.$gte. Example: {\"city\": \"Shanghai\", "
    "\"estimated_cost\": {\"$lte\": 50}, \"$or\": [{\"category\": \"museum\"}, "
    "{\"rating\": {\"$gte\": 4.5}}]}.")
FILTER_DOC_BRIEF = (
    "Filter: {field: value} (equals) or {field: {op: value}}; ops $eq $ne $gt $gte "
    "$lt $lte $in $nin (a list) and $contains (a list field's item or a substring); "
    "several fields must all hold; {\"$and\": [filters]}, {\"$or\": [filters]}; "
    "a json field's inner value by a dotted path, e.g. {\"metadata.user\": \"ana\"}.")


FILTER_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains")
MAX_FILTER_DEPTH = 16
MAX_FILTER_NODES = 256

@dataclass(frozen=True)
class Cmp:
    """``field <op> value`` with the value already coerced to the field's type.

    On a ``json`` field, ``path`` holds the keys below the field (``()``: the whole value) and
    ``value`` is a JSON scalar (or a tuple of them for ``$in`` / ``$nin``).
    """

    field: str
    op: str
    value: Any
    spec: FieldSpec
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class BoolOp:
    """``$and`` / ``$or`` over sub-filters."""

    op: Literal["$and", "$or"]
    items: tuple[FilterNode, ...] = field(default_factory=tuple)


FilterNode = Union[Cmp, BoolOp]  # noqa: UP007 - a runtime alias used before 3.12


def parse_filter(etype: EntityType, where: Any) -> FilterNode | None:
    """The validated filter tree of a ``where`` mapping (None: no filter)."""
    if check_filter(where) is None:
        return None
    counter = [0]
    return _parse(etype, where, 0, counter, "where")


def _parse(etype: EntityType, node: Any, depth: int, counter: list[int], path: str) -> FilterNode:
    if depth > MAX_FILTER_DEPTH:
        raise FilterError(f"filter nests deeper than {MAX_FILTER_DEPTH}", field=path)
    if not isinstance(node, Mapping) or not node:
        raise FilterError("a filter must be a non-empty object", field=path)
    items: list[FilterNode] = []
    for key, value in node.items():
        counter[0] += 1
        if counter[0] > MAX_FILTER_NODES:
            raise FilterError(f"filter has more than {MAX_FILTER_NODES} terms", field=path)
        if not isinstance(key, str):
            raise FilterError("filter keys must be strings", field=path)
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise FilterError(f"{key} takes a non-empty list of filters", field=f"{path}.{key}")
            subs = tuple(_parse(etype, v, depth + 1, counter, f"{path}.{key}[{i}]")
                         for i, v in enumerate(value))
            items.append(BoolOp(key, subs))  # type: ignore[arg-type]
        elif key.startswith("$"):
            raise FilterError(f"unknown filter operator {key!r} (use $and, $or or a field name)",
                              field=f"{path}.{key}")
        else:
            root, keys = split_path(key, f"{path}.{key}")
            spec = etype.field(root, where=f"{path}.{key}")
            if keys and spec.type != "json":
                raise FilterError(f"{root!r} is a {spec.type} field: only json fields take a "
                                  "path", field=f"{path}.{key}")
            if isinstance(value, Mapping):
                if not value:
                    raise FilterError("an operator object may not be empty", field=f"{path}.{key}")
                for op, operand in value.items():
                    items.append(_cmp(etype, root, spec, op, operand, f"{path}.{key}.{op}",
                                      keys))
            else:
                items.append(_cmp(etype, root, spec, "$eq", value, f"{path}.{key}", keys))
    return items[0] if len(items) == 1 else BoolOp("$and", tuple(items))


@lru_cache(maxsize=256)
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    """The validator of a field type (building one costs more than a whole cached search)."""
    return TypeAdapter(annotation)


def _coerce(spec: FieldSpec, value: Any, where: str, element: bool = False) -> Any:
    annotation = PY_TYPES[spec.item or "str"] if element else spec.python_type()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise FilterError("filter values must be finite numbers", field=where)
    try:
        coerced = _adapter(annotation).validate_python(value)
    except pydantic.ValidationError as exc:
        raise FilterError(f"value {value!r} does not fit field type {spec.type}: "
                          f"{first_problem(exc)[1]}", field=where) from None
    if not fits_int64(coerced):
        raise FilterError(f"value {value!r} is out of the 64-bit integer range", field=where)
    return coerced


def _identity_operand(operand: Any) -> Any:
    """A filter operand on an identity field as identities are stored (a string, or the
    strings of a list; see ``checks.identity_text``)."""
    if isinstance(operand, str):
        return identity_text(operand)
    if isinstance(operand, list):
        return [_identity_operand(v) for v in operand]
    return operand


def _json_scalar(value: Any, where: str) -> Any:
    """A filter operand on a json field: a string, a finite number or a boolean."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise FilterError(f"value {value!r} is out of the 64-bit integer range", field=where)
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise FilterError("filter values must be finite numbers", field=where)
        return value
    raise FilterError("a json field is compared with a string, a number or a boolean, not "
                      f"{type(value).__name__}", field=where)


def _cmp(etype: EntityType, name: str, spec: FieldSpec, op: Any, operand: Any,
         where: str, keys: tuple[str, ...] = ()) -> Cmp:
    if op not in FILTER_OPS:
        raise FilterError(f"unknown operator {op!r} (known: {', '.join(FILTER_OPS)})",
                          field=where)
    if operand is None:
        if op not in ("$eq", "$ne"):
            raise FilterError(f"{op} does not take null", field=where)
        return Cmp(name, op, None, spec, keys)
    if spec.type == "str" and name in (etype.typedef.identity or ()):
        operand = _identity_operand(operand)  # as identity fields are stored
    if op in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise FilterError(f"{op} takes a list", field=where)
        if len(operand) > 10_000:
            raise FilterError(f"{op} takes at most 10000 values", field=where)
        values = tuple(_json_scalar(v, where) if spec.type == "json" else
                       _coerce(spec, v, where) for v in operand)
        return Cmp(name, op, values, spec, keys)
    if spec.type == "json":
        value = _json_scalar(operand, where)
        if op in ("$gt", "$gte", "$lt", "$lte") and isinstance(value, bool):
            raise FilterError(f"{op} compares numbers or strings, not booleans", field=where)
        return Cmp(name, op, value, spec, keys)
    if op == "$contains":
        if spec.type == "list":
            return Cmp(name, op, _coerce(spec, operand, where, element=True), spec)
        if spec.type == "str":
            if not isinstance(operand, str):
                raise FilterError("$contains on a text field takes a string", field=where)
            return Cmp(name, op, operand, spec)
        raise FilterError(f"$contains works on list and str fields, not {spec.type}", field=where)
    if op in ("$gt", "$gte", "$lt", "$lte") and spec.type in ("list", "bool"):
        raise FilterError(f"{op} does not apply to a {spec.type} field", field=where)
    return Cmp(name, op, _coerce(spec, operand, where), spec)


def parse_order(etype: EntityType, order_by: str | Sequence[str] | None) -> list[tuple[str, bool]]:
    """``[(field, descending)]`` from ``"field"`` / ``"-field"`` or a list of those."""
    result = []
    for item in check_order(order_by) or ():
        desc = item.startswith("-")
        name = item.lstrip("-")
        if name in ("created_at", "updated_at", "version"):
            result.append((name, desc))
            continue
        spec = etype.field(name, where="order_by")
        if spec.type in ("list", "json"):
            raise FilterError(f"cannot order by {spec.type} field {name!r}", field="order_by")
        result.append((name, desc))
    if len(result) > MAX_ORDER_FIELDS:
        raise FilterError(f"order_by takes at most {MAX_ORDER_FIELDS} fields", field="order_by")
    return result
