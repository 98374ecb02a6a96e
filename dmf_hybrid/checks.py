"""Argument checks shared by both front doors: ``Memory`` (via the store) and ``MemoryClient``.

Each check returns the value it accepted or raises :class:`~dmf_hybrid.errors.ValidationError`
naming the field, so a bad argument fails the same way in-process and over HTTP (where the
client fails before sending anything). Imports only the standard library and ``errors``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import FilterError, ValidationError

#: The shape of every entity ID (derived or caller-chosen) and tenant name.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
ID_RE = re.compile(ID_PATTERN)
#: Longest actor, reason or trace id an audit event records.
MAX_AUDIT_TEXT = 10_000
#: Largest audit seq (DuckDB BIGINT).
MAX_SEQ = 2**63 - 1

#: How many links ``related`` may follow.
MAX_DEPTH = 5
DIRECTIONS = ("out", "in", "both")

#: What ``create`` does when the identity (or ID) already exists: return the stored entity
#: as it is (``differs`` names the given fields whose values differ), raise ``Conflict`` when
#: a given field differs, or update the stored entity to the given values (one audited update).
ON_CONFLICT = ("return", "raise", "update")
DEFAULT_ON_CONFLICT = "return"

#: ``as_of``: an audit seq, a datetime, or None for "now".
AsOf = int | dt.datetime | None


def check_id(value: Any, field: str = "id") -> str:
    """An entity ID, or a ValidationError if it is not a well-formed ID string."""
    if not isinstance(value, str) or not ID_RE.match(value):
        raise ValidationError(f"{field} must be an ID string matching {ID_PATTERN}", field=field)
    return value


def check_on_conflict(value: Any) -> str:
    """A create's ``on_conflict`` policy, one of ``ON_CONFLICT``."""
    if value not in ON_CONFLICT:
        raise ValidationError(f"on_conflict must be one of {', '.join(ON_CONFLICT)}",
                              field="on_conflict")
    return str(value)


def check_type_name(value: Any, field: str = "type") -> str:
    """A type name argument (whether the type exists is the store's answer)."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a type name string", field=field)
    return value


def check_audit_text(name: str, value: Any) -> str | None:
    """An actor / reason / trace id, or a ValidationError if it is not a short string."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    if len(value) > MAX_AUDIT_TEXT:
        raise ValidationError(f"{name} is longer than {MAX_AUDIT_TEXT} characters", field=name)
    return value


def check_audit(actor: Any, reason: Any, trace_id: Any
                ) -> tuple[str | None, str | None, str | None]:
    """The audit context of a write (actor, reason, trace id), each checked."""
    return (check_audit_text("actor", actor), check_audit_text("reason", reason),
            check_audit_text("trace_id", trace_id))


def check_expected_version(value: Any) -> int | None:
    """``expected_version``: an integer or None."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValidationError("expected_version must be an integer", field="expected_version")
    return value


def check_as_of(value: Any) -> int | dt.datetime | None:
    """``as_of``: an audit seq >= 0, a datetime, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, dt.datetime)):
        raise ValidationError("as_of must be an audit seq (int) or a datetime", field="as_of")
    if isinstance(value, int) and value < 0:
        raise ValidationError("as_of seq must be >= 0", field="as_of")
    return value


def check_rows(rows: Any) -> Sequence[Any]:
    """The ``rows`` of ``create_many``: a list (not a string or a single object)."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ValidationError("rows must be a list of objects", field="rows")
    return rows


def check_where(where: Any) -> Mapping[str, Any] | None:
    """A ``where`` that must be an object of field conditions (or None)."""
    if where is not None and not isinstance(where, Mapping):
        raise ValidationError("where must be an object of field conditions", field="where")
    return where


def check_seq_bounds(**values: Any) -> None:
    """Each named value is None or a non-negative integer (since_seq, until_seq, limit)."""
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValidationError(f"{name} must be a non-negative integer", field=name)


def check_before_seq(value: Any) -> int:
    """``before_seq`` of an archive: a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError("before_seq must be a positive integer", field="before_seq")
    return value


def check_data(data: Any, where: str = "data") -> Any:
    """Entity data: an object of fields."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where} must be an object", field=where)
    return data


def check_changes(changes: Any) -> Mapping[str, Any]:
    """The ``changes`` of an update: a non-empty object of fields."""
    if not isinstance(changes, Mapping) or not changes:
        raise ValidationError("changes must be a non-empty object of fields", field="changes")
    return changes


def check_filter(where: Any, field: str = "where") -> Mapping[str, Any] | None:
    """A filter's shape: None, {} or a non-empty object (its fields are the schema's answer)."""
    if where is None or where == {}:
        return None
    if not isinstance(where, Mapping):
        raise FilterError("a filter must be a non-empty object", field=field)
    return where


def check_page(limit: Any, cursor: Any, max_limit: int | None = None) -> None:
    """A page's ``limit`` (an integer, at most ``max_limit`` when known) and ``cursor``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or (
            max_limit is not None and limit > max_limit):
        upper = f" to {max_limit}" if max_limit is not None else " of at least 1"
        raise ValidationError(f"limit must be an integer from 1{upper}"
                              if max_limit is not None else
                              f"limit must be an integer{upper}", field="limit")
    if cursor is not None and not isinstance(cursor, str):
        raise FilterError("cursor must be a string", field="cursor")


def check_related(relation: Any, direction: Any, depth: Any) -> None:
    """The walk of ``related``: a relation name or None, a direction, a depth."""
    if direction not in DIRECTIONS:
        raise ValidationError("direction must be 'out', 'in' or 'both'", field="direction")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValidationError(f"depth must be an integer from 1 to {MAX_DEPTH}", field="depth")
    if relation is not None and not isinstance(relation, str):
        raise ValidationError("relation must be a relation name", field="relation")


def first_non_finite(value: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in a JSON-like value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = first_non_finite(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = first_non_finite(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None
