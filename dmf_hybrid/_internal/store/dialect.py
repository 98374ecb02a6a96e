"""What differs between the two engines' SQL: column types, JSON paths, row keys, bulk loads.

The store writes its statements once, in SQL both engines read (``?`` placeholders, which
:mod:`.postgres` turns into psycopg's), and asks a :class:`Dialect` for the few pieces that
differ. ``DUCKDB`` is the embedded default; ``POSTGRES`` the shared engine. A connection says
which it is through :func:`dialect_of`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
import numpy.typing as npt

from ..config import is_postgres_url, redact

#: The SQL type of each field type on DuckDB.
_DUCKDB_TYPES = {
    "str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "date": "DATE",
    "datetime": "TIMESTAMP", "enum": "VARCHAR", "json": "JSON",
}


def q(name: str) -> str:
    """A quoted identifier (names are validated against a strict pattern before this)."""
    return '"' + name.replace('"', '""') + '"'


def _path(keys: Sequence[str]) -> str:
    """A JSONPath of object keys (names are validated identifiers: no quoting needed)."""
    return "'$." + ".".join(keys) + "'"


class Dialect:
    """The DuckDB forms; :class:`.pg_dialect.PostgresDialect` overrides what PostgreSQL
    writes otherwise."""

    name = "duckdb"
    #: begins a read-only transaction that keeps the state its first read sees
    begin_snapshot = "BEGIN TRANSACTION"
    #: the SQL type of each field type
    types = _DUCKDB_TYPES
    #: the embedding cache's vector column
    vector_type = "FLOAT[]"
    #: indexes of the fixed tables this engine has besides the keys (DuckDB: none; its scans
    #: of the log are fast, and every index would slow each append)
    log_indexes: tuple[str, ...] = ()

    def field_index(self, name: str, table: str, column: str, type_name: str) -> str | None:
        """The statement that indexes a field's column (``type_name``: the field's type), or
        None: DuckDB makes none. Its scan of a column with min-max zone maps answers a new
        filter of 1 % of 100,000 rows in 0.93 ms, where an ART index on the column, which its
        planner then prefers, took 9.9 ms (DuckDB 2.0.1, the benchmark's store on disk)."""
        return None

    def sql_type(self, type_name: str, item: str | None = None) -> str:
        """The column type of a field type (``list`` of ``item``)."""
        if type_name == "list":
            return f"{self.types[item or 'str']}[]"
        return self.types[type_name]

    # ------------------------------------------------------------------ JSON text columns

    def json_text(self, expr: str, *keys: str) -> str:
        """The text (a string's value, other values' JSON) at ``keys`` in a JSON text."""
        return f"json_extract_string({expr}, {_path(keys)})"

    def json_value(self, expr: str, *keys: str) -> str:
        """The JSON value at ``keys`` in a JSON text."""
        return f"json_extract({expr}, {_path(keys)})"

    def json_has(self, expr: str, *keys: str) -> str:
        """Whether a JSON text has a value (null included) at ``keys``."""
        return f"json_exists({expr}, {_path(keys)})"

    def column_types(self, con: Any, table: str) -> dict[str, str]:
        """Each column of ``table`` (a name as the store writes it, maybe quoted) and its type."""
        return {str(d[0]): str(d[1]) for d in con.execute(f"DESCRIBE {table}").fetchall()}

    def latest_per(self, key: str, columns: str, source: str, where: str) -> str:
        """A query of ``columns`` of the newest row (by seq) of each ``key`` in ``source``."""
        # DuckDB: a window (as_of queries took 1.6x as long with DISTINCT ON at 10,000)
        return (f"SELECT {columns} FROM {source} WHERE {where} QUALIFY row_number() "
                f"OVER (PARTITION BY {key} ORDER BY seq DESC) = 1")

    def json_cast(self, value: str, type_name: str, item: str | None = None) -> str:
        """A JSON value (:meth:`json_value`) as the column type of a field type."""
        return f"CAST({value} AS {self.sql_type(type_name, item)})"

    # ------------------------------------------------------------------ filters

    def list_contains(self, col: str, item_type: str) -> str:
        """A list column holds the bound value."""
        return f"(list_contains({col}, CAST(? AS {item_type})))"

    def text_contains(self, col: str) -> str:
        """A text column contains the bound text."""
        return f"(contains({col}, CAST(? AS VARCHAR)))"

    def row_key(self, alias: str = "") -> str:
        """The 64-bit key (unsigned) the mirrors find an entity row by."""
        return f"hash({alias}tenant, {alias}id)"

    # ------------------------------------------------------------------ bulk

    def insert_rows(self, con: Any, table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]]) -> None:
        """Insert many rows into those columns of ``table`` in one statement."""
        self.insert_columns(con, table, {c: [r[i] for r in rows] for i, c in enumerate(columns)})

    def insert_columns(self, con: Any, table: str, columns: dict[str, Any],
                       select: str | None = None) -> None:
        """Insert many rows given column by column (name: values) into ``table`` (a name as
        the store writes it, maybe quoted); ``select``: the expressions inserted, over the
        columns by name (default: the values as given)."""
        import pyarrow as pa  # start-up cost: only bulk loads and vector fetches need Arrow

        names = ", ".join(q(c) for c in columns)
        con.register("_batch", pa.table(
            {c: pa.nulls(len(v)) if all(x is None for x in v) else pa.array(v)
             for c, v in columns.items()}))
        try:
            con.execute(f"INSERT INTO {table} ({names}) SELECT {select or names} FROM _batch")
        except BaseException:
            # the transaction is aborted now: DuckDB refuses the unregister too, and its
            # error must not hide the insert's (the rollback drops the registration)
            with suppress(Exception):
                con.unregister("_batch")
            raise
        con.unregister("_batch")

    def insert_vectors(self, con: Any, model: str, hashes: list[str],
                       matrix: npt.NDArray[np.float32], skip_existing: bool) -> None:
        """Cache vectors of ``model`` (one row of ``matrix`` per text hash)."""
        import pyarrow as pa

        n, dim = matrix.shape
        offsets = pa.array(np.arange(0, (n + 1) * dim, dim, dtype=np.int32))
        table = pa.table({
            "model_id": pa.array([model] * n), "text_hash": pa.array(hashes),
            "dim": pa.array(np.full(n, dim, dtype=np.int32)),
            "vector": pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1))),
        })
        con.register("_vec_batch", table)
        try:
            con.execute("INSERT INTO embeddings SELECT * FROM _vec_batch"
                        + (" ON CONFLICT DO NOTHING" if skip_existing else ""))
        finally:
            con.unregister("_vec_batch")

    def vector(self, value: Any) -> npt.NDArray[np.float32]:
        """One vector as a row of the embedding cache holds it."""
        return np.asarray(value, dtype=np.float32)

    def vectors(self, reader: Any, sql: str, params: list[Any]
                ) -> tuple[list[str], npt.NDArray[np.float32]]:
        """(first column, vectors) of a query selecting (text, vector) rows."""
        table = reader.sql(sql, params=params).to_arrow_table()
        return (table.column(0).to_pylist(),
                vector_matrix(table.column(1), table.num_rows))

    def column(self, reader: Any, sql: str, params: list[Any]) -> npt.NDArray[Any]:
        """The single column a query selects, as a numpy array."""
        result: npt.NDArray[Any] = reader.execute(sql, params).fetchnumpy()["c"]
        return result

    @contextmanager
    def record_batches(self, reader: Any, sql: str, params: list[Any], batch: int
                       ) -> Iterator[Any]:
        """Arrow record batches of a query's rows (a vector column as list<float>)."""
        # Arrow through a relation (an execute() result copies every row once more)
        with reader.sql(sql, params=params).to_arrow_reader(batch) as batches:
            yield batches


def vector_matrix(column: Any, rows: int) -> npt.NDArray[np.float32]:
    """A (rows, dim) float32 matrix from an Arrow list<float> column (or array)."""
    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    flat = column.flatten().to_numpy(zero_copy_only=False)
    matrix: npt.NDArray[np.float32] = np.asarray(flat, dtype=np.float32).reshape(rows, -1)
    return matrix


DUCKDB = Dialect()


def dialect_of(con: Any) -> Dialect:
    """The dialect of a connection the store runs statements on."""
    found: Dialect = getattr(con, "dialect", DUCKDB)
    return found


def store_target(path: Any, store_url: str | None) -> tuple[Any, str | None]:
    """(directory, PostgreSQL URL) of ``Memory.open(path)`` with ``settings.store_url``: a
    ``path`` that is a URL is the store itself; a store_url of another kind is refused."""
    if is_postgres_url(path):
        return None, path
    if store_url is not None and not is_postgres_url(store_url):
        from ..errors import ValidationError

        raise ValidationError(f"store_url must be a postgresql:// URL, not "
                              f"{redact(str(store_url))!r}", field="store_url")
    return path, store_url
