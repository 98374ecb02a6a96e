"""How MemoryClient encodes arguments: URL segments and JSON bodies, checked as Memory checks.

Each function runs the shared checks of :mod:`dmf_hybrid._internal.checks` first, so a bad argument
fails before anything is sent, with the error ``Memory`` raises for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import pydantic
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from .checks import (
    check_audit,
    check_data,
    check_expected_version,
    check_id,
    check_type_name,
    first_non_finite,
)
from .errors import SchemaError, ValidationError
from .schema import TypeDef


def type_segment(value: Any) -> str:
    """A type name as one URL path segment."""
    return quote(check_type_name(value), safe="")


def id_segment(value: Any, field: str = "entity_id") -> str:
    """An entity ID as one URL path segment (checked as Memory checks it)."""
    return quote(check_id(value, field), safe="")


def audit_headers(actor: Any = None, reason: Any = None, trace_id: Any = None,
                  expected_version: Any = None) -> dict[str, str]:
    """The headers of a write's audit context (``X-Actor``, ``X-Reason``, ``X-Trace-Id``) and
    of its ``expected_version`` (``If-Match``), checked as Memory checks them."""
    headers = {}
    for header, value in zip(("X-Actor", "X-Reason", "X-Trace-Id"),
                             check_audit(actor, reason, trace_id), strict=True):
        if value is not None:
            headers[header] = quote(value, safe="")
    if check_expected_version(expected_version) is not None:
        headers["If-Match"] = f'"{expected_version}"'
    return headers


def jsonable(value: Any, field: str, error: type[ValidationError] = ValidationError) -> Any:
    """``value`` as JSON values; a NaN or infinite number is refused naming where it is."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        plain = to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise ValidationError(f"{field} is not JSON-serialisable: {exc}", field=field) from None
    path = first_non_finite(plain)
    if path is not None:
        where = f"{field}.{path}" if path and not path.startswith("[") else f"{field}{path}"
        raise error(f"{where} must be a finite number (NaN and Infinity are not JSON)",
                    field=where)
    return plain


def row_json(i: int, row: Any) -> Any:
    """One row of create_many as JSON (a bad row is named as the memory names it)."""
    try:
        return check_data(jsonable(row, "data"))
    except ValidationError as exc:
        exc.details["row"] = i
        exc.message = f"row {i}: {exc.message}"
        exc.args = (exc.message,)
        raise


@functools.lru_cache(maxsize=1024)  # building an adapter costs far more than using it
def field_adapter(model: type[BaseModel], name: str) -> pydantic.TypeAdapter[Any] | None:
    info = model.model_fields.get(name)
    if info is None or info.annotation is None:
        return None
    return pydantic.TypeAdapter(info.annotation)


def typedef_body(typedef: TypeDef | Mapping[str, Any]) -> Any:
    """A type definition as the JSON body ``POST /types`` takes."""
    if isinstance(typedef, TypeDef):
        return typedef.model_dump(mode="json")
    if isinstance(typedef, Mapping):
        return jsonable(dict(typedef), "typedef")
    raise SchemaError(f"invalid type definition: expected an object, not "
                      f"{type(typedef).__name__}")
