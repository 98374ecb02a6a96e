"""The reads the in-memory mirrors are built and kept in step from.

The exact vector mirror and the BM25 indexes of a type (outside the store) are loaded from
a type's live rows, joined to the embedding cache, and brought forward by reading again the
rows the audit events name. These are those reads; their callers never see SQL. A whole
load may run in one read transaction (``Database.read_transaction``), so it shows one
committed state while commits go on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..schema import EntityType
from .dialect import dialect_of
from .sql import LOOKUP_CHUNK, POINT_LOOKUP_MAX, field_values, key_sql, q
from .tables import table_name
from .txn import Reader

#: (id, tenant, version, text_hash, data, hash(tenant, id)) of one live row
LiveRow = tuple[str, str, int, str | None, dict[str, Any], int]
#: (tenant, entity ID)
Key = tuple[str, str]


def _select(reader: Reader, etype: EntityType, live_only: bool = True) -> str:
    """SELECT of the live rows of a type, as :func:`live_row` reads them; with ``live_only``
    False, of every row, ``deleted_at IS NULL`` first and no WHERE (the caller's own)."""
    columns = (f"id, tenant, version, text_hash, {key_sql(dialect=dialect_of(reader))}, "
               + ", ".join(q(n) for n in etype.fields))
    if live_only:
        return f"SELECT {columns} FROM {table_name(etype.key)} WHERE deleted_at IS NULL"
    return f"SELECT deleted_at IS NULL, {columns} FROM {table_name(etype.key)}"


def live_row(etype: EntityType, row: Sequence[Any]) -> LiveRow:
    """(id, tenant, version, text_hash, data, hash(tenant, id)) of a row :func:`_select` read."""
    return row[0], row[1], row[2], row[3], field_values(etype, row[5:]), row[4]


def live_rows(reader: Reader, etype: EntityType, keys: Sequence[Key] | None = None
              ) -> list[LiveRow]:
    """The live rows of a type (all, or those of the (tenant, id) ``keys``), by ID then tenant."""
    base = _select(reader, etype)
    rows: list[tuple[Any, ...]] = []
    if keys is None:
        rows = reader.execute(base + " ORDER BY id, tenant").fetchall()
    else:
        # by ID alone (DuckDB finds IDs by their index); another tenant's rows with the
        # same IDs are dropped here
        wanted = set(keys)
        unique = sorted({eid for _, eid in wanted})
        if 0 < len(unique) <= POINT_LOOKUP_MAX:  # `id IN (...)` alone: the id index
            found = reader.execute(
                _select(reader, etype, live_only=False)
                + f" WHERE id IN ({', '.join('?' * len(unique))})", unique).fetchall()
            rows = sorted((r[1:] for r in found if r[0] and (r[2], r[1]) in wanted),
                          key=lambda r: (r[0], r[1]))
            unique = []
        for i in range(0, len(unique), LOOKUP_CHUNK):
            rows.extend(r for r in reader.execute(
                base + " AND id IN (SELECT unnest(CAST(? AS VARCHAR[]))) ORDER BY id, tenant",
                [unique[i:i + LOOKUP_CHUNK]]).fetchall() if (r[1], r[0]) in wanted)
    return [live_row(etype, r) for r in rows]


def live_row_batches(reader: Reader, etype: EntityType, batch: int) -> Iterator[list[LiveRow]]:
    """Every live row of a type, by ID then tenant, ``batch`` at a time."""
    cursor = reader.execute(_select(reader, etype) + " ORDER BY id, tenant")
    while rows := cursor.fetchmany(batch):
        yield [live_row(etype, r) for r in rows]


def embedded_count(reader: Reader, etype: EntityType) -> int:
    """How many live rows of a type (every tenant) have a text to embed."""
    rows = reader.execute(f"SELECT count(*) FROM {table_name(etype.key)} "
                          "WHERE deleted_at IS NULL AND text_hash IS NOT NULL").fetchall()
    return int(rows[0][0]) if rows else 0  # read to the end: the connection is free again


@contextmanager
def vector_batches(reader: Reader, etype: EntityType, model_id: str, batch: int
                   ) -> Iterator[Any]:
    """Arrow record batches of (id, key, tenant, text_hash, vector) of every live row of a
    type with a text, joined to the embedding cache of ``model_id`` (vector null: not
    cached); the connection is held until the block ends, also when a batch fails."""
    live = "t.deleted_at IS NULL AND t.text_hash IS NOT NULL"
    dialect = dialect_of(reader)
    with dialect.record_batches(
            reader, f"SELECT t.id, {key_sql('t.', dialect)} AS key, t.tenant, t.text_hash, "
            f"e.vector FROM {table_name(etype.key)} AS t LEFT JOIN embeddings AS e "
            f"ON e.model_id = ? AND e.text_hash = t.text_hash WHERE {live}",
            [model_id], batch) as batches:
        yield batches
