"""Time travel: a type's rows as they were at an audit seq, rebuilt from the event log."""

from __future__ import annotations

from typing import Any

from ..schema import EntityType
from .sql import SQL_TYPES, bind_value, q, sql_type

ENTITY_OPS_SQL = "('create', 'update', 'append', 'delete', 'restore', 'erase')"


def _field_expr(name: str, spec: Any, params: list[Any]) -> str:
    typ = sql_type(spec)
    path = f"'$.data.{name}'"
    if spec.type == "list":
        expr = f"CAST(json_extract(after, {path}) AS {typ})"
    elif spec.type == "bool":
        expr = f"CAST(json_extract(after, {path}) AS BOOLEAN)"
    else:
        expr = f"CAST(json_extract_string(after, {path}) AS {SQL_TYPES[spec.type]})"
    if spec.default is None:
        return f"{expr} AS {q(name)}"
    # a field added by a later migration is missing from older snapshots: read its default
    params.append(bind_value(spec.default))
    return (f"CASE WHEN json_exists(after, {path}) THEN {expr} "
            f"ELSE CAST(? AS {typ}) END AS {q(name)}")


def as_of_table_sql(etype: EntityType, tenant: str, seq: int, params: list[Any]) -> str:
    """A FROM-clause source with the same columns as the type's table, at ``seq``."""
    fields = ", ".join(_field_expr(n, s, params) for n, s in etype.fields.items())
    params.extend([tenant, etype.name, seq])
    return f"""(SELECT
        json_extract_string(after, '$.id') AS id,
        json_extract_string(after, '$.tenant') AS tenant,
        CAST(json_extract(after, '$.version') AS INTEGER) AS version,
        CAST(json_extract_string(after, '$.created_at') AS TIMESTAMP) AS created_at,
        CAST(json_extract_string(after, '$.updated_at') AS TIMESTAMP) AS updated_at,
        CAST(json_extract_string(after, '$.deleted_at') AS TIMESTAMP) AS deleted_at,
        CAST(NULL AS BIGINT) AS deleted_seq,
        json_extract_string(after, '$.text_hash') AS text_hash,
        {fields}
      FROM (
        SELECT after, redacted FROM events_all
        WHERE tenant = ? AND type = ? AND seq <= ? AND op IN {ENTITY_OPS_SQL}
        QUALIFY row_number() OVER (PARTITION BY entity_id ORDER BY seq DESC) = 1
      ) AS latest
      WHERE NOT redacted AND after IS NOT NULL
        AND json_extract_string(after, '$.deleted_at') IS NULL) AS t"""
