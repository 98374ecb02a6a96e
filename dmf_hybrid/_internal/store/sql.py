"""Compile the filter language and orderings to SQL: field names checked, values bound."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import FilterError
from ..filters import BoolOp, Cmp, FilterNode
from ..ids import canonical_json, content_hash
from ..jsonpaths import jsonpath
from ..schema import EntityType, FieldSpec
from .dialect import DUCKDB, Dialect, q

#: The DuckDB column type of each field type (``Dialect.types`` has each engine's).
SQL_TYPES = DUCKDB.types
#: Up to this many IDs or hashes are looked up as `col IN (?, ...)` alone, which DuckDB answers
#: from the column's index; more are scanned for (the list form, or any other condition).
POINT_LOOKUP_MAX = 64
#: IDs or hashes per lookup past that (bound as one list parameter).
LOOKUP_CHUNK = 20_000
SYSTEM_ORDER_TYPES = {"created_at": "TIMESTAMP", "updated_at": "TIMESTAMP", "version": "INTEGER"}


def sql_type(spec: FieldSpec, dialect: Dialect = DUCKDB) -> str:
    """The column type of a field."""
    return dialect.sql_type(spec.type, spec.item)


def key_sql(alias: str = "", dialect: Dialect = DUCKDB) -> str:
    """The SQL of the 64-bit key the mirrors find an entity row by (``alias``: "t." etc.)."""
    return dialect.row_key(alias)


def bind_value(value: Any) -> Any:
    """A Python value as DuckDB binds it (aware datetimes become naive UTC)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, (list, tuple)):
        return [bind_value(v) for v in value]
    if isinstance(value, enum.Enum):  # a model's Enum field: its value is what is stored
        return value.value
    return value


def bind_field(spec: FieldSpec, value: Any) -> Any:
    """A field's value as DuckDB binds it into the field's column (json: its JSON text)."""
    if spec.type == "json":
        return None if value is None else json.dumps(value, ensure_ascii=False,
                                                     separators=(",", ":"))
    return bind_value(value)


def field_values(etype: EntityType, values: Sequence[Any]) -> dict[str, Any]:
    """A row's field columns by name, JSON columns (which DuckDB returns as text) decoded."""
    data = dict(zip(etype.fields, values, strict=True))
    for name in etype.json_fields:
        value = data[name]
        if isinstance(value, str):
            data[name] = json.loads(value)
    return data


def compile_filter(node: FilterNode | None, params: list[Any], alias: str = "",
                   dialect: Dialect = DUCKDB) -> str:
    """SQL for a parsed filter (a WHERE condition), appending its bound values to ``params``.

    A comparison with NULL is NULL, not FALSE, and is left so: the language has only AND and
    OR, under which a NULL leaf decides a row exactly as FALSE would, and a bare comparison
    lets DuckDB push the filter into the table scan (a ``coalesce`` around it costs 2.5x).
    """
    if node is None:
        return "TRUE"
    if isinstance(node, BoolOp):
        joiner = " AND " if node.op == "$and" else " OR "
        return "(" + joiner.join(compile_filter(n, params, alias, dialect)
                                 for n in node.items) + ")"
    return _compile_cmp(node, params, alias, dialect)


def _compile_cmp(node: Cmp, params: list[Any], alias: str, dialect: Dialect) -> str:
    col = f"{alias}{q(node.field)}"
    if node.spec.type == "json":
        return _compile_json_cmp(node, col, params, dialect)
    typ = sql_type(node.spec, dialect)
    op, value = node.op, node.value
    if value is None:
        return f"({col} IS NULL)" if op == "$eq" else f"({col} IS NOT NULL)"
    if op == "$in" or op == "$nin":
        if not value:
            return "FALSE" if op == "$in" else "TRUE"
        params.extend(bind_value(v) for v in value)
        marks = ", ".join(f"CAST(? AS {typ})" for _ in value)
        if op == "$in":
            return f"({col} IN ({marks}))"
        return f"({col} IS NULL OR {col} NOT IN ({marks}))"
    if op == "$contains":
        params.append(bind_value(value))
        if node.spec.type == "list":
            return dialect.list_contains(col, dialect.types[node.spec.item or "str"])
        return dialect.text_contains(col)
    params.append(bind_value(value))
    sql_op = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}.get(op)
    if sql_op is not None:
        return f"({col} {sql_op} CAST(? AS {typ}))"
    return f"({col} IS DISTINCT FROM CAST(? AS {typ}))"  # $ne


def order_sql(order: list[tuple[str, bool]], alias: str = "") -> str:
    """ORDER BY clause: the given keys (NULLS LAST), then the ID as unique tie-breaker."""
    parts = [f"{alias}{q(name)} {'DESC' if desc else 'ASC'} NULLS LAST" for name, desc in order]
    parts.append(f"{alias}id ASC")
    return "ORDER BY " + ", ".join(parts)


def column_type(etype: EntityType, name: str, dialect: Dialect = DUCKDB) -> str:
    """The SQL type of an orderable column (a field or a system column)."""
    if name in SYSTEM_ORDER_TYPES:
        return SYSTEM_ORDER_TYPES[name]
    return sql_type(etype.fields[name], dialect)


def query_fingerprint(type_name: str, where: Any, order: list[tuple[str, bool]],
                      as_of: int | None) -> str:
    """A short hash of a query's shape, so a cursor is only accepted by the same query."""
    return content_hash([type_name, canonical_json(where), order, as_of])[:16]


def _cursor_cipher(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV  # only paging needs it

    return AESSIV(key)


def encode_cursor(key: bytes, fingerprint: str, last_values: list[Any], last_id: str) -> str:
    """An opaque cursor pointing just after a row: the row's order values and ID sealed with
    the store's key (AES-SIV: deterministic, so the same query and state give the same cursor,
    and authenticated, so a changed cursor is refused)."""
    values = [v.isoformat() if isinstance(v, (dt.date, dt.datetime)) else v for v in last_values]
    raw = json.dumps([values, last_id], separators=(",", ":")).encode()
    sealed = _cursor_cipher(key).encrypt(raw, [fingerprint.encode()])
    return base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def decode_cursor(key: bytes, cursor: str, fingerprint: str) -> tuple[list[Any], str]:
    """The (order values, id) a cursor points after; FilterError if this store did not make it
    for this query."""
    from cryptography.exceptions import InvalidTag

    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        sealed = base64.urlsafe_b64decode(padded.encode())
    except (ValueError, binascii.Error):
        raise FilterError("cursor is malformed", field="cursor") from None
    try:
        raw = _cursor_cipher(key).decrypt(sealed, [fingerprint.encode()])
    except (InvalidTag, ValueError):
        raise FilterError("cursor belongs to a different query (or another store)",
                          field="cursor") from None
    values, last_id = json.loads(raw)
    return values, last_id


def keyset_sql(etype: EntityType, order: list[tuple[str, bool]], values: list[Any], last_id: str,
               params: list[Any], alias: str = "", dialect: Dialect = DUCKDB) -> str:
    """SQL selecting rows strictly after (values, last_id) in ``order_sql`` order."""
    if len(values) != len(order):
        raise FilterError("cursor belongs to a different query", field="cursor")
    keys = [(name, desc, column_type(etype, name, dialect),
             _cursor_value(column_type(etype, name), value))
            for (name, desc), value in zip(order, values, strict=True)]
    keys.append(("id", False, "VARCHAR", last_id))
    disjuncts = []
    for i, (name, desc, typ, value) in enumerate(keys):
        col = f"{alias}{q(name)}" if name != "id" else f"{alias}id"
        if value is None:
            continue  # NULLS LAST: nothing sorts after a null on this key
        conj = []
        for pname, _, ptyp, pvalue in keys[:i]:
            pcol = f"{alias}{q(pname)}" if pname != "id" else f"{alias}id"
            if pvalue is None:
                conj.append(f"{pcol} IS NULL")
            else:
                params.append(pvalue)
                conj.append(f"{pcol} = CAST(? AS {ptyp})")
        params.append(value)
        cmp = "<" if desc else ">"
        nulls = f" OR {col} IS NULL" if name != "id" else ""
        conj.append(f"({col} {cmp} CAST(? AS {typ}){nulls})")
        disjuncts.append("(" + " AND ".join(conj) + ")")
    return "(" + (" OR ".join(disjuncts) or "FALSE") + ")"


def _cursor_value(typ: str, value: Any) -> Any:
    """A cursor's order value checked against its column type (a cursor is caller input)."""
    if value is None:
        return None
    try:
        if typ == "VARCHAR" and isinstance(value, str):
            return value
        if typ in ("BIGINT", "INTEGER") and isinstance(value, int) and not isinstance(
                value, bool) and -(2**63) <= value < 2**63:
            return value
        if typ == "DOUBLE" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if typ == "BOOLEAN" and isinstance(value, bool):
            return value
        if typ == "DATE" and isinstance(value, str):
            return dt.date.fromisoformat(value)
        if typ == "TIMESTAMP" and isinstance(value, str):
            return dt.datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        pass
    raise FilterError("cursor is malformed", field="cursor")


JSON_NUMBER_TYPES = "('BIGINT', 'UBIGINT', 'HUGEINT', 'DOUBLE')"


class _JsonSql:
    """The SQL of tests at a path inside a json field, DuckDB's forms (JSON text columns).

    Each method takes ``at``, which writes the value's expression (binding its path) each
    time it is called, in the order the expressions appear in the SQL.
    """

    def path(self, col: str) -> str:
        return f"json_extract({col}, CAST(? AS VARCHAR))"

    def is_null(self, at: Callable[[], str]) -> str:
        first, second = at(), at()
        return f"(json_type({first}) IS NULL OR json_type({second}) = 'NULL')"

    def equals(self, at: Callable[[], str], value: Any, params: list[Any], op: str = "=") -> str:
        """The value is of ``value``'s kind and compares by ``op`` with it: a string equals
        only a string, a number only a number (as DOUBLE), a boolean only a boolean; TRY_CAST
        because DuckDB does not promise to evaluate an AND left to right."""
        kind, cast, typ = (("= 'BOOLEAN'", "TRY_CAST({} AS BOOLEAN)", "BOOLEAN")
                           if isinstance(value, bool) else
                           ("= 'VARCHAR'", "({} ->> '$')", "VARCHAR") if isinstance(value, str)
                           else (f"IN {JSON_NUMBER_TYPES}", "TRY_CAST({} AS DOUBLE)", "DOUBLE"))
        test = f"(json_type({at()}) {kind} AND {cast.format(at())} {op} CAST(? AS {typ}))"
        params.append(value if isinstance(value, bool | str) else float(value))
        return test

    def has_member(self, at: Callable[[], str], member: Callable[[], str]) -> str:
        """The value is an array with an element ``e`` for which ``member()`` holds."""
        array = at()
        return f"(len(list_filter(TRY_CAST({array} AS JSON[]), lambda e: {member()})) > 0)"

    def has_text(self, at: Callable[[], str]) -> str:
        """The value is a string containing the bound text."""
        kind, text = at(), at()
        return (f"(json_type({kind}) = 'VARCHAR' "
                f"AND contains({text} ->> '$', CAST(? AS VARCHAR)))")


class _JsonbSql(_JsonSql):
    """PostgreSQL's forms (JSONB columns; the same JSONPath): a value is cast only when it is
    of the kind (CASE), since a cast of another kind fails rather than giving NULL."""

    def path(self, col: str) -> str:
        return f"jsonb_path_query_first({col}, CAST(? AS jsonpath))"

    def is_null(self, at: Callable[[], str]) -> str:
        first, second = at(), at()
        return f"({first} IS NULL OR jsonb_typeof({second}) = 'null')"

    def equals(self, at: Callable[[], str], value: Any, params: list[Any], op: str = "=") -> str:
        kind, typ = (("boolean", "BOOLEAN") if isinstance(value, bool) else
                     ("string", "VARCHAR") if isinstance(value, str) else
                     ("number", "DOUBLE PRECISION"))
        target = "{} #>> '{{}}'" if kind == "string" else f"CAST({{}} AS {typ})"
        probe, cast = at(), at()
        test = (f"(CASE WHEN jsonb_typeof({probe}) = '{kind}' THEN {target.format(cast)} END "
                f"{op} CAST(? AS {typ}))")
        params.append(value if isinstance(value, bool | str) else float(value))
        return test

    def has_member(self, at: Callable[[], str], member: Callable[[], str]) -> str:
        probe, array = at(), at()
        return (f"EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof({probe}) "
                f"= 'array' THEN {array} END) AS e WHERE {member()})")

    def has_text(self, at: Callable[[], str]) -> str:
        kind, text = at(), at()
        return (f"(jsonb_typeof({kind}) = 'string' "
                f"AND strpos({text} #>> '{{}}', CAST(? AS VARCHAR)) > 0)")


def _compile_json_cmp(node: Cmp, col: str, params: list[Any], dialect: Dialect) -> str:
    """SQL for a comparison at a path inside a json field (the path a bound parameter).

    A missing path, like JSON null, matches ``null``; ``$ne`` / ``$nin`` hold where the
    positive test does not, so they match a missing path too.
    """
    forms = _JsonSql() if dialect is DUCKDB else _JsonbSql()

    def at() -> str:
        if not node.path:
            return col
        params.append(jsonpath(node.path))
        return forms.path(col)

    op, value = node.op, node.value
    negate = op in ("$ne", "$nin")
    if value is None:
        test = forms.is_null(at)
    elif op in ("$in", "$nin"):
        if not value:
            return "TRUE" if negate else "FALSE"
        test = "(" + " OR ".join(forms.equals(at, v, params) for v in value) + ")"
    elif op == "$contains":
        test = forms.has_member(at, lambda: forms.equals(lambda: "e", value, params))
        if isinstance(value, str):
            test = f"({test} OR {forms.has_text(at)}"
            params.append(value)
            test += ")"
    else:
        sql_op = {"$eq": "=", "$ne": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[op]
        test = forms.equals(at, value, params, sql_op)
    return f"(NOT coalesce({test}, FALSE))" if negate else f"coalesce({test}, FALSE)"
