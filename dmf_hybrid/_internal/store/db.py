"""The DuckDB database: one writer (a lock and one connection), a read cursor per thread;
the transactions themselves are :class:`.txn.Transactions`'."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb

from ..errors import DMFError, StoreLocked
from .dialect import DUCKDB
from .txn import Connection, Reader, Transactions, first_row

__all__ = ["Connection", "Database", "Reader", "ZSTD_MIN_STRING_LENGTH", "first_row"]


#: Strings shorter than this are not compressed with zstd, so none is. DuckDB 2.0 compresses
#: strings of 4 KB or more that way by default, and reading one row back decompresses its
#: segment: with 20 KB values a get took 7x as long as uncompressed (as 1.4.4 stored them),
#: an update or a filtered query 3-4x, for a file 4.7x smaller.
ZSTD_MIN_STRING_LENGTH = 2**31 - 1

# Database files open in this process. DuckDB shares one instance per file within a process,
# so a second Database on the same file would be a second writer with its own seq counter.
_OPEN_FILES: set[str] = set()
_OPEN_FILES_LOCK = threading.Lock()


class Database(Transactions):
    """A DuckDB database file (or in-memory) with one writer and per-thread readers."""

    dialect = DUCKDB

    def __init__(self, path: Path | None, memory_limit: str | None = None) -> None:
        self.path = path
        self.memory_limit = memory_limit
        target = ":memory:" if path is None else str(path)
        self._key = None if path is None else str(path.resolve())
        if self._key is not None:
            with _OPEN_FILES_LOCK:
                if self._key in _OPEN_FILES:
                    raise StoreLocked(
                        f"the memory directory {path.parent if path else ''} is already open in "
                        "this process; share that Memory (it is thread-safe) instead of "
                        "opening it again, or talk to its server with --url", path=str(path))
                _OPEN_FILES.add(self._key)
        try:
            self._open(target, path)
        except BaseException:
            self._release()
            raise

    def _open(self, target: str, path: Path | None) -> None:
        try:
            config: dict[str, str | bool | int | float | list[str]] = {
                "zstd_min_string_length": ZSTD_MIN_STRING_LENGTH}
            if self.memory_limit is not None:
                config["memory_limit"] = self.memory_limit
            self._duck = duckdb.connect(target, config=config)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(
                    f"the memory directory {path.parent if path else ''} is open in another "
                    "process (DuckDB allows one process per file); talk to that process's "
                    "server with --url instead", path=str(path), cause=str(exc),
                ) from None
            raise
        self._writer: Connection = self._duck
        self._init_transactions()
        # new read cursors come from a connection nobody queries on, under their own lock, so
        # a thread's first read does not wait for another thread's write transaction
        self._cursor_factory = self._duck.cursor()
        self._cursor_lock = threading.Lock()
        self._cursors: list[duckdb.DuckDBPyConnection] = []

    # ------------------------------------------------------------------ reads

    def reader(self) -> Connection:
        """The connection this thread reads with (the writer inside its own transaction)."""
        if self._owner == threading.get_ident():
            return self._writer
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            with self._cursor_lock:
                if self.closed:
                    raise DMFError("the memory is closed")
                cur = self._cursor_factory.cursor()
                self._cursors.append(cur)
            self._local.cursor = cur
        return cur

    def checkpoint(self) -> None:
        """Write the WAL into the database file."""
        with self._lock:
            self._writer.execute("CHECKPOINT")

    def close(self) -> None:
        """Close every cursor and the database."""
        with self._lock, self._cursor_lock:
            if self.closed:
                return
            self.closed = True
            for cur in [*self._cursors, self._cursor_factory]:
                try:
                    cur.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
            self._duck.close()
        self._release()

    def _release(self) -> None:
        if self._key is not None:
            with _OPEN_FILES_LOCK:
                _OPEN_FILES.discard(self._key)
