"""PostgreSQL's forms of what the two engines' SQL says differently (see :class:`.dialect.Dialect`),
and the translation of the store's ``?`` placeholders into psycopg's."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.pq import TransactionStatus

from .dialect import Dialect, q


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """A statement with ``?`` placeholders as psycopg takes it: ``%s`` for each ``?`` outside
    quotes, ``%%`` for each ``%``."""
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
            out.append("%%" if ch == "%" else ch)
        elif ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        else:
            out.append("%%" if ch == "%" else ch)
    return "".join(out)


class PostgresDialect(Dialect):
    """PostgreSQL's forms of what differs (see :class:`.dialect.Dialect`)."""

    name = "postgresql"
    begin_snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    types = {**Dialect.types, "float": "DOUBLE PRECISION", "json": "JSONB"}
    vector_type = "BYTEA"
    # an entity's events (get and history as_of, erase) and a type's latest per entity
    # (queries as_of): without them each is a scan and a sort of the log (at 10,000 entities
    # get as_of took 4.6 ms, now 0.17; a query as_of 137 ms, now 115)
    log_indexes = (
        "CREATE INDEX IF NOT EXISTS events_entity ON events (entity_id, tenant, seq)",
        "CREATE INDEX IF NOT EXISTS events_type ON events (type, tenant, entity_id, seq DESC)",
        # what the relay and the searches of many processes ask of the outbox: its pending rows
        "CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (seq) WHERE NOT done",
    )

    def field_index(self, name: str, table: str, column: str, type_name: str) -> str | None:
        """A B-tree for ranges and equality; for text a hash index (equality and IN, the text
        filters an index can answer): a B-tree refuses an entry over ~2.7 KB, which would
        refuse the write of a long text."""
        method = "hash" if type_name == "str" else "btree"
        return f"CREATE INDEX IF NOT EXISTS {q(name)} ON {table} USING {method} ({q(column)})"

    @staticmethod
    def _keys(keys: Sequence[str]) -> str:
        return "'{" + ",".join(keys) + "}'"

    def json_text(self, expr: str, *keys: str) -> str:
        return f"(CAST({expr} AS JSONB) #>> {self._keys(keys)})"

    def json_value(self, expr: str, *keys: str) -> str:
        return f"(CAST({expr} AS JSONB) #> {self._keys(keys)})"

    def json_has(self, expr: str, *keys: str) -> str:
        return f"(CAST({expr} AS JSONB) #> {self._keys(keys)} IS NOT NULL)"

    def column_types(self, con: Any, table: str) -> dict[str, str]:
        name = table[1:-1].replace('""', '"') if table.startswith('"') else table
        return {str(n): str(t) for n, t in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE "
            "table_schema = current_schema() AND table_name = ?", [name]).fetchall()}

    def latest_per(self, key: str, columns: str, source: str, where: str) -> str:
        return (f"SELECT DISTINCT ON ({key}) {columns} FROM {source} WHERE {where} "
                f"ORDER BY {key}, seq DESC")

    def json_cast(self, value: str, type_name: str, item: str | None = None) -> str:
        if type_name == "json":
            return f"NULLIF({value}, 'null'::jsonb)"
        if type_name == "bool":
            return (f"(CASE WHEN jsonb_typeof({value}) = 'boolean' "
                    f"THEN CAST({value} AS BOOLEAN) END)")
        if type_name == "list":
            typ = self.types[item or "str"]
            return (f"(CASE WHEN jsonb_typeof({value}) = 'array' THEN ARRAY(SELECT CAST(e AS "
                    f"{typ}) FROM jsonb_array_elements_text({value}) AS e) END)")
        if type_name in ("str", "enum", "date", "datetime"):
            return f"CAST(({value}) #>> '{{}}' AS {self.types[type_name]})"
        return f"CAST({value} AS {self.types[type_name]})"

    def list_contains(self, col: str, item_type: str) -> str:
        return f"(CAST(? AS {item_type}) = ANY({col}))"

    def text_contains(self, col: str) -> str:
        return f"(strpos({col}, CAST(? AS VARCHAR)) > 0)"

    def row_key(self, alias: str = "") -> str:
        # non-negative 63 bits: the mirrors keep keys unsigned
        return (f"(hashtextextended({alias}tenant || chr(1) || {alias}id, 0) "
                f"& 9223372036854775807)")

    def insert_columns(self, con: Any, table: str, columns: dict[str, Any],
                       select: str | None = None) -> None:
        # a COPY: the server reads each value's text as its column's type (``select``'s casts
        # are what DuckDB needs)
        copy = f"COPY {table} ({', '.join(q(c) for c in columns)}) FROM STDIN"
        with con.raw.cursor() as cur, cur.copy(copy) as out:
            for row in zip(*columns.values(), strict=True):
                out.write_row(row)

    def insert_vectors(self, con: Any, model: str, hashes: list[str],
                       matrix: npt.NDArray[np.float32], skip_existing: bool) -> None:
        dim = int(matrix.shape[1])
        rows = [(model, h, dim, np.ascontiguousarray(v, dtype="<f4").tobytes())
                for h, v in zip(hashes, matrix, strict=True)]
        # always skipping what is there: writers of different tenants (other processes) may
        # cache the same text at once (the check before the insert saw neither)
        con.executemany("INSERT INTO embeddings (model_id, text_hash, dim, vector) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", rows)

    def vector(self, value: Any) -> npt.NDArray[np.float32]:
        return np.frombuffer(bytes(value), dtype="<f4").astype(np.float32)

    def vectors(self, reader: Any, sql: str, params: list[Any]
                ) -> tuple[list[str], npt.NDArray[np.float32]]:
        rows = reader.execute(sql, params).fetchall()
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [r[0] for r in rows], np.stack([self.vector(r[1]) for r in rows])

    def column(self, reader: Any, sql: str, params: list[Any]) -> npt.NDArray[Any]:
        values = [r[0] for r in reader.execute(sql, params).fetchall()]
        if values and isinstance(values[0], int):
            return np.asarray(values, dtype=np.uint64)
        return np.asarray(values, dtype=object)

    @contextmanager
    def record_batches(self, reader: Any, sql: str, params: list[Any], batch: int
                       ) -> Iterator[Any]:
        import pyarrow as pa

        if reader.raw.info.transaction_status == TransactionStatus.IDLE:
            cur = reader.execute(sql, params)
        else:  # in a read transaction (a whole type's load): a server-side cursor streams
            cur = reader.raw.cursor(name="dmf_record_batches")
            cur.execute(translate(sql), params)
        names = [d[0] for d in cur.description]

        def batches() -> Iterator[Any]:
            while rows := cur.fetchmany(batch):
                cols: dict[str, Any] = {}
                for i, name in enumerate(names):
                    values = [r[i] for r in rows]
                    if values and any(isinstance(v, (bytes, memoryview)) for v in values):
                        cols[name] = pa.array([None if v is None else self.vector(v)
                                               for v in values], type=pa.list_(pa.float32()))
                    elif name == "key":
                        cols[name] = pa.array(values, type=pa.uint64())
                    else:
                        cols[name] = pa.array(values)
                yield pa.record_batch(cols)

        try:
            yield batches()
        finally:
            cur.close()


POSTGRES = PostgresDialect()
