"""DDL: the fixed tables and one typed table per entity type."""

from __future__ import annotations

import duckdb

from ..schema import EntityType, FieldSpec, TypeDef
from .audit import EVENTS_DDL
from .sql import q, sql_type

STORE_FORMAT = 1
SYSTEM_COLUMNS = (
    "id", "tenant", "version", "created_at", "updated_at", "deleted_at", "deleted_seq",
    "text_hash",
)
ENTITY_OPS = ("create", "update", "append", "delete", "restore", "erase")

FIXED_DDL = [
    EVENTS_DDL,
    """CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS schema_types (
        name VARCHAR NOT NULL, version INTEGER NOT NULL, definition VARCHAR NOT NULL,
        seq BIGINT NOT NULL, created_at TIMESTAMP NOT NULL, PRIMARY KEY (name, version))""",
    """CREATE TABLE IF NOT EXISTS entity_index (
        id VARCHAR PRIMARY KEY, type VARCHAR NOT NULL, tenant VARCHAR NOT NULL,
        erased_seq BIGINT)""",
    """CREATE TABLE IF NOT EXISTS relations (
        tenant VARCHAR NOT NULL, from_id VARCHAR NOT NULL, relation VARCHAR NOT NULL,
        to_id VARCHAR NOT NULL, created_seq BIGINT NOT NULL, deleted_seq BIGINT)""",
    """CREATE TABLE IF NOT EXISTS outbox (
        seq BIGINT PRIMARY KEY, tenant VARCHAR NOT NULL, entity_id VARCHAR NOT NULL,
        type VARCHAR NOT NULL, op VARCHAR NOT NULL, done BOOLEAN NOT NULL DEFAULT FALSE)""",
    """CREATE TABLE IF NOT EXISTS embeddings (
        model_id VARCHAR NOT NULL, text_hash VARCHAR NOT NULL, dim INTEGER NOT NULL,
        vector FLOAT[] NOT NULL, PRIMARY KEY (model_id, text_hash))""",
]


def table_name(type_name: str) -> str:
    """The quoted name of an entity type's table."""
    return q(f"ent_{type_name}")


def create_fixed(con: duckdb.DuckDBPyConnection) -> None:
    """Create the fixed tables if missing."""
    for ddl in FIXED_DDL:
        con.execute(ddl)
    con.execute(
        "INSERT INTO meta VALUES ('store_format', ?) ON CONFLICT DO NOTHING", [str(STORE_FORMAT)]
    )


def _column_ddl(name: str, spec: FieldSpec) -> str:
    return f"{q(name)} {sql_type(spec)}"


def create_type_table(con: duckdb.DuckDBPyConnection, etype: EntityType) -> None:
    """Create the typed table of an entity type."""
    cols = ", ".join(_column_ddl(n, s) for n, s in etype.fields.items())
    # No PRIMARY KEY here: DuckDB 1.4 rewrites an UPDATE of a list column as delete + insert,
    # which fails to commit ("write-write conflict on key") while any reader holds an older
    # snapshot. IDs are unique through entity_index's primary key; a plain index keeps
    # lookups by ID fast.
    con.execute(
        f"""CREATE TABLE IF NOT EXISTS {table_name(etype.name)} (
            id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, version INTEGER NOT NULL,
            created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL, deleted_at TIMESTAMP,
            deleted_seq BIGINT, text_hash VARCHAR, {cols})"""
    )
    con.execute(f"CREATE INDEX IF NOT EXISTS {q(f'ent_{etype.name}_id')} "
                f"ON {table_name(etype.name)} (id)")


def add_columns(con: duckdb.DuckDBPyConnection, typedef: TypeDef, added: list[str]) -> None:
    """Add new fields to a type's table; existing rows get the field's default."""
    from .sql import bind_value

    # every ALTER before any UPDATE: DuckDB 1.4 refuses to commit a transaction that alters a
    # table after updating or deleting rows of it ("another transaction has altered this table")
    for name in added:
        spec = typedef.fields[name]
        con.execute(f"ALTER TABLE {table_name(typedef.name)} ADD COLUMN {_column_ddl(name, spec)}")
    for name in added:
        spec = typedef.fields[name]
        if spec.default is not None:
            con.execute(
                f"UPDATE {table_name(typedef.name)} SET {q(name)} = CAST(? AS {sql_type(spec)})",
                [bind_value(spec.default)],
            )
