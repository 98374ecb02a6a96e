"""Argument checks shared by both front doors: ``Memory`` (via the store) and ``MemoryClient``.

Each check returns the value it accepted or raises
:class:`~dmf_hybrid._internal.errors.ValidationError` naming the field, so a bad argument fails the
same way in-process and over HTTP (where the client fails before sending anything). Imports only the
standard library and ``errors``."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel

from .errors import FilterError, LimitExceeded, SchemaError, ValidationError

#: The shape of every entity ID (derived or caller-chosen) and tenant name. The anchors are for
#: JSON Schema readers; Python always matches it whole (:func:`full_match`).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
#: An ID argument's JSON Schema (request models, tool schemas).
ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": ID_PATTERN}
ID_RE = re.compile(ID_PATTERN)
TENANT_RE = ID_RE
TYPE_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")
FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
RELATION_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
RULE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Snapshot and archive directory names (one path component under the data directory).
SNAPSHOT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
#: The SHA-256 of an API key as a keys file stores it.
KEY_HASH_RE = re.compile(r"^[0-9a-f]{64}$")
#: A plan step reference: ``$0``, ``$1.id``, ``$2.items[0]``.
PLAN_REF_RE = re.compile(r"^\$(\d+)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*)$")

#: Every name, ID and key pattern of the package, by what it names. Each is matched only through
#: :func:`full_match`: with ``re.match``, ``$`` also matches before a final newline, so
#: ``"abc\n"`` would pass and reach SQL, paths and HTTP headers.
NAME_PATTERNS: dict[str, re.Pattern[str]] = {
    "id": ID_RE, "tenant": TENANT_RE, "type": TYPE_NAME_RE, "field": FIELD_NAME_RE,
    "relation": RELATION_NAME_RE, "rule": RULE_NAME_RE, "tool": TOOL_NAME_RE,
    "snapshot": SNAPSHOT_NAME_RE, "key_hash": KEY_HASH_RE, "plan_ref": PLAN_REF_RE,
}


def full_match(pattern: re.Pattern[str], value: object) -> re.Match[str] | None:
    """The match of ``pattern`` over the whole of ``value`` (a str), or None."""
    return pattern.fullmatch(value) if isinstance(value, str) else None

#: Longest reason an audit event records.
MAX_AUDIT_TEXT = 10_000
#: Longest actor label or trace id: one printable line, shown as given.
MAX_AUDIT_LABEL = 256
#: Largest audit seq (DuckDB BIGINT).
MAX_SEQ = 2**63 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: How many links ``related`` may follow.
MAX_DEPTH = 5
#: The directions a link is followed in, and the search modes: each vocabulary is declared
#: here once, as a type (for the wire models) whose values the checks read.
Direction = Literal["out", "in", "both"]
DIRECTIONS: tuple[str, ...] = get_args(Direction)
SearchMode = Literal["hybrid", "vector", "keyword"]
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
#: Longest search query text, in characters.
MAX_QUERY_CHARS = 10_000
#: How many of a conversation's last turns ``context(conversation=...)`` shows by default,
#: and at most.
LAST_TURNS, MAX_TURNS = 6, 50

#: What ``create`` does when the identity (or ID) already exists: return the stored entity
#: as it is (``differs`` names the given fields whose values differ), raise ``Conflict`` when
#: a given field differs, or update the stored entity to the given values (one audited update).
ON_CONFLICT = ("return", "raise", "update")
DEFAULT_ON_CONFLICT = "return"

#: ``as_of``: an audit seq, a datetime, or None for "now".
AsOf = int | dt.datetime | None


def check_id(value: Any, field: str = "id") -> str:
    """An entity ID, or a ValidationError if it is not a well-formed ID string."""
    if not full_match(ID_RE, value):
        raise ValidationError(f"{field} must be an ID string matching {ID_PATTERN}", field=field)
    return value


def check_choice(value: Any, field: str, options: Sequence[str]) -> str:
    """``value`` if it is one of ``options``, else a ValidationError naming them."""
    if value not in options:
        raise ValidationError(f"{field} must be one of {', '.join(options)}", field=field)
    return str(value)


def check_on_conflict(value: Any) -> str:
    """A create's ``on_conflict`` policy, one of ``ON_CONFLICT``."""
    return check_choice(value, "on_conflict", ON_CONFLICT)


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


def check_audit_label(name: str, value: Any) -> str | None:
    """An actor label / trace id: a short printable string (no control characters)."""
    value = check_audit_text(name, value)
    if value is not None and (len(value) > MAX_AUDIT_LABEL or not value.isprintable()):
        raise ValidationError(f"{name} must be at most {MAX_AUDIT_LABEL} printable characters "
                              "(no control characters or line breaks)", field=name)
    return value


def check_audit(actor: Any, reason: Any, trace_id: Any
                ) -> tuple[str | None, str | None, str | None]:
    """The audit context of a write (actor label, reason, trace id), each checked.

    ``actor`` is the caller's own label; the authenticated principal is recorded apart from it.
    """
    return (check_audit_label("actor", actor), check_audit_text("reason", reason),
            check_audit_label("trace_id", trace_id))


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


def parse_as_of(value: Any) -> int | dt.datetime | None:
    """``as_of`` as JSON or a query string gives it: a non-negative integer (or a string of
    digits) is an audit seq, an ISO-8601 string is a time; anything else (a negative or
    fractional number, a bool, a Unix time) is a ValidationError."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit():
            value = int(text)
        else:
            try:
                return dt.datetime.fromisoformat(text)
            except ValueError:
                raise ValidationError(
                    "as_of must be an audit seq (a non-negative integer) or an ISO-8601 time",
                    field="as_of") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise ValidationError(f"as_of must be an audit seq (an integer from 0 to {MAX_SEQ}) or "
                              "an ISO-8601 time string", field="as_of")
    return value


def check_request_as_of(value: Any) -> int | dt.datetime | None:
    """``as_of`` of a request: an audit seq (an integer), a datetime or an ISO-8601 time
    string (JSON's form of one), or None; a string of digits is not a seq here (only a query
    string, where everything is a string, gives a seq that way: :func:`parse_as_of`)."""
    if value == "" or isinstance(value, str) and value.strip().isdigit():
        raise ValidationError("as_of must be an audit seq (int) or a datetime", field="as_of")
    return parse_as_of(value)


def check_time(value: Any, field: str, *, dates: bool = False) -> dt.datetime | None:
    """A time argument: a datetime or an ISO-8601 string (with ``dates``, also a date: its
    midnight), as an aware UTC datetime (naive means UTC); None stays None. Anything else is
    a ValidationError naming ``field``."""
    if value is None:
        return None
    what = "an ISO-8601 date or time" if dates else "an ISO-8601 time"
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValidationError(f"{field} must be {what}", field=field) from None
    elif dates and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if not isinstance(value, dt.datetime):
        raise ValidationError(f"{field} must be {what}, or a datetime", field=field)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def check_reference_time(value: Any) -> dt.datetime | None:
    """``reference_time`` of a search (see :func:`check_time`; a date is its midnight); None
    stays None (the search reads it as now)."""
    return check_time(value, "reference_time", dates=True)


#: Largest stored value of one field, in UTF-8 bytes. DuckDB 1.4 slows every later update of a
#: segment holding a multi-megabyte value (evaluation/reliability_hostile.py measures it).
MAX_VALUE_BYTES = 64 * 1024
#: Most fields one entity type may declare.
MAX_TYPE_FIELDS = 200
#: Largest type definition, as canonical JSON bytes.
MAX_TYPE_BYTES = 64 * 1024
#: Largest default value of one field, in bytes (it is stored in every existing row).
MAX_DEFAULT_BYTES = 4 * 1024


@dataclass(frozen=True)
class Limits:
    """The size limits a store enforces before any write (``Settings`` sets them)."""

    max_value_bytes: int = MAX_VALUE_BYTES
    max_type_fields: int = MAX_TYPE_FIELDS
    max_type_bytes: int = MAX_TYPE_BYTES
    max_default_bytes: int = MAX_DEFAULT_BYTES


def value_bytes(value: Any) -> int:
    """About how many bytes a field value takes stored: UTF-8 text, summed over containers."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, Mapping):
        return sum(value_bytes(k) + value_bytes(v) for k, v in value.items()) + 2
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(value_bytes(v) + 1 for v in value) + 2
    return 8


def check_value_sizes(values: Mapping[str, Any], limits: Limits, where: str = "data") -> None:
    """Each field value fits ``limits.max_value_bytes``; LimitExceeded names the first that
    does not."""
    for name, value in values.items():
        size = value_bytes(value)
        if size > limits.max_value_bytes:
            raise LimitExceeded(f"{where}.{name} is {size} bytes; one field value may hold at "
                                f"most {limits.max_value_bytes}", field=f"{where}.{name}",
                                limit=limits.max_value_bytes)


def check_type_size(definition: Mapping[str, Any], limits: Limits) -> None:
    """A type definition (as JSON data) within the limits: fields, total size, defaults."""
    fields = definition.get("fields") or {}
    if len(fields) > limits.max_type_fields:
        raise LimitExceeded(f"a type may declare at most {limits.max_type_fields} fields, not "
                            f"{len(fields)}", field="fields", limit=limits.max_type_fields)
    for name, spec in fields.items():
        size = value_bytes(spec.get("default"))
        if spec.get("default") is not None and size > limits.max_default_bytes:
            raise LimitExceeded(f"the default of {name!r} is {size} bytes; a default may hold at "
                                f"most {limits.max_default_bytes}", field=f"fields.{name}.default",
                                limit=limits.max_default_bytes)
    size = len(json.dumps(definition, sort_keys=True, default=str).encode("utf-8"))
    if size > limits.max_type_bytes:
        raise LimitExceeded(f"the type definition is {size} bytes; at most "
                            f"{limits.max_type_bytes} are allowed", field="definition",
                            limit=limits.max_type_bytes)


def check_values(values: Any) -> list[Any]:
    """The ``values`` of an ``append``: a non-empty list."""
    if not isinstance(values, list) or not values:
        raise ValidationError("values must be a non-empty list", field="values")
    return values


def check_rows(rows: Any) -> Sequence[Any]:
    """The ``rows`` of ``create_many``: a list (not a string or a single object)."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise ValidationError("rows must be a list of objects", field="rows")
    return rows


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


#: C0 control characters other than tab, line feed and carriage return: refused in any string.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
#: Characters that do not show, or that reorder what is shown: dropped from identity fields,
#: where they would make look-alike identities (zero-width space/joiners, word joiner, BOM,
#: left-to-right and right-to-left marks, bidi embeddings, overrides and isolates).
_INVISIBLE = re.compile("[\u200b-\u200f\u2060\ufeff\u202a-\u202e\u2066-\u2069]")


def control_at(value: Any, path: str = "") -> str | None:
    """The path (``""``, ``.key`` or ``[i]``, nested) of the first string in ``value`` (a
    string, or strings in lists and objects, keys included) holding a C0 control character
    other than tab, line feed and carriage return; None when there is none."""
    if isinstance(value, str):
        return path if _CONTROL.search(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and _CONTROL.search(key):
                return f"{path}.{key!r}"
            found = control_at(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = control_at(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def identity_text(value: str) -> str:
    """An identity field's text as it is stored and matched: invisible and reordering
    characters dropped, then NFC, so text that looks the same is one identity (composed and
    decomposed forms, a stray zero-width space or left-to-right mark)."""
    return unicodedata.normalize("NFC", _INVISIBLE.sub("", value))


def check_data(data: Any, where: str = "data") -> Any:
    """Entity data: an object of fields."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where} must be an object", field=where)
    return data


def check_changes(changes: Any, renews: bool = False) -> Mapping[str, Any]:
    """The ``changes`` of an update: a non-empty object of fields (may be empty when the
    update ``renews`` the expiry)."""
    if not isinstance(changes, Mapping) or not (changes or renews):
        raise ValidationError("changes must be a non-empty object of fields (or empty with a "
                              "new ttl / expires_at)", field="changes")
    return changes


def check_filter(where: Any, field: str = "where") -> Mapping[str, Any] | None:
    """A filter's shape: None, {} or a non-empty object (its fields are the schema's answer)."""
    if where is None or where == {}:
        return None
    if not isinstance(where, Mapping):
        raise FilterError("a filter must be a non-empty object", field=field)
    return where


#: How many fields an ``order_by`` may name.
MAX_ORDER_FIELDS = 4


def check_order(order_by: Any) -> list[str] | None:
    """An ``order_by``'s shape: a field name, ``-`` prefixed for descending, or a list of
    them (whether the fields exist and can be ordered by is the schema's answer)."""
    if order_by is None:
        return None
    if isinstance(order_by, str):
        items: list[Any] = [order_by]
    elif isinstance(order_by, Sequence):
        items = list(order_by)
    else:
        raise FilterError("order_by takes a field name or a list of them", field="order_by")
    for item in items:
        if not isinstance(item, str) or not item.lstrip("-"):
            raise FilterError("order_by takes field names, '-' prefixed for descending",
                              field="order_by")
    return items


def check_mode(mode: Any) -> str:
    """A search mode, one of :data:`SEARCH_MODES`."""
    return check_choice(mode, "mode", SEARCH_MODES)


def check_k(k: Any, max_k: int | None = None) -> int:
    """How many hits a search asks for: an integer from 1 (to ``max_k`` when known)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or (
            max_k is not None and k > max_k):
        upper = f"from 1 to {max_k}" if max_k is not None else "of at least 1"
        raise ValidationError(f"k must be an integer {upper}", field="k")
    return k


def check_search_text(text: Any) -> str:
    """A search's query text: a non-empty string of at most :data:`MAX_QUERY_CHARS`."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("text must be a non-empty string", field="text")
    if len(text) > MAX_QUERY_CHARS:
        raise ValidationError(f"text is longer than {MAX_QUERY_CHARS} characters", field="text")
    return text


def check_related_to(related_to: Any) -> dict[str, str] | None:
    """A search's ``related_to``: ``{"relation": name, "from": entity_id, "direction":
    "out"|"in"}`` (direction defaults to "out"), or None."""
    if related_to is None:
        return None
    if not isinstance(related_to, Mapping) or not {"relation", "from"} <= set(
            related_to) or set(related_to) - {"relation", "from", "direction"}:
        raise FilterError('related_to takes {"relation": name, "from": entity_id, '
                          '"direction": "out"|"in"}', field="related_to")
    direction = related_to.get("direction", "out")
    if direction not in ("out", "in"):
        raise FilterError("related_to.direction must be 'out' or 'in'",
                          field="related_to.direction")
    if not isinstance(related_to["relation"], str) or not isinstance(related_to["from"], str):
        raise FilterError("related_to.relation and .from must be strings", field="related_to")
    return {"relation": related_to["relation"], "from": related_to["from"],
            "direction": direction}


def check_limit(limit: Any, max_limit: int | None = None) -> int:
    """A page's ``limit``: an integer from 1 (to ``max_limit`` when known)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or (
            max_limit is not None and limit > max_limit):
        upper = f" to {max_limit}" if max_limit is not None else " of at least 1"
        raise ValidationError(f"limit must be an integer from 1{upper}"
                              if max_limit is not None else
                              f"limit must be an integer{upper}", field="limit")
    return limit


def check_cursor(cursor: Any) -> str | None:
    """A page's ``cursor``: None or the ``next_cursor`` string of the previous page."""
    if cursor is not None and not isinstance(cursor, str):
        raise FilterError("cursor must be a string", field="cursor")
    return cursor


def check_page(limit: Any, cursor: Any, max_limit: int | None = None) -> None:
    """A page's ``limit`` (an integer, at most ``max_limit`` when known) and ``cursor``."""
    check_limit(limit, max_limit)
    check_cursor(cursor)


def check_related(relation: Any, direction: Any, depth: Any) -> None:
    """The walk of ``related``: a relation name or None, a direction, a depth."""
    check_direction(direction)
    check_depth(depth)
    if relation is not None:
        check_relation(relation)


def check_direction(direction: Any) -> str:
    """A direction of ``related``, one of :data:`DIRECTIONS`."""
    if direction not in DIRECTIONS:
        raise ValidationError("direction must be 'out', 'in' or 'both'", field="direction")
    return str(direction)


def check_depth(depth: Any) -> int:
    """How many links away ``related`` walks: 1 to :data:`MAX_DEPTH`."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ValidationError(f"depth must be an integer from 1 to {MAX_DEPTH}", field="depth")
    return depth


def check_relation(relation: Any) -> str:
    """A relation's name (whether the type has it is the schema's answer)."""
    if not isinstance(relation, str):
        raise ValidationError("relation must be a relation name", field="relation")
    return relation


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


#: The most values an enum field may list.
MAX_ENUM_VALUES = 1000


def check_enum_values(name: str, values: Sequence[str] | None, where: str) -> None:
    """SchemaError naming ``where.values`` for an enum listing a value twice or too many."""
    if values and len(values) > MAX_ENUM_VALUES:
        raise SchemaError(f"enum field {name!r} has {len(values)} values; at most "
                          f"{MAX_ENUM_VALUES} (a longer list is a str field)",
                          field=f"{where}.values")
    if values and len(set(values)) != len(values):
        twice = next(v for i, v in enumerate(values) if v in values[:i])
        raise SchemaError(f"enum field {name!r} lists {twice!r} more than once",
                          field=f"{where}.values")

RESERVED_FIELDS = frozenset(
    {"id", "tenant", "version", "created_at", "updated_at", "deleted_at", "deleted_seq",
     "created_seq", "type", "text_hash"}
)
#: Names a field may not take because each entity's pydantic model has an attribute so named
#: (``json``, ``copy``, ``model_dump``...): a field would shadow it and break validation.
MODEL_ATTRIBUTES = frozenset(n for n in dir(BaseModel) if not n.startswith("_"))


def reserved_reason(name: str) -> str | None:
    """Why ``name`` cannot be a field name, or None when it can."""
    if name in RESERVED_FIELDS:
        return "every entity already has a column of that name"
    if name in MODEL_ATTRIBUTES or name.startswith("model_"):
        return "it would shadow an attribute of the entity's pydantic model"
    return None


def fits_int64(value: Any) -> bool:
    """False for an int (or a list holding one) that a BIGINT column cannot store."""
    if isinstance(value, list):
        return all(fits_int64(v) for v in value)
    return not isinstance(value, int) or isinstance(value, bool) or (
        INT64_MIN <= value <= INT64_MAX)
