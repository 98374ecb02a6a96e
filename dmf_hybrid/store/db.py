"""The DuckDB connection: one writer (a lock and one connection), a read cursor per thread.

Transactions nest: the outermost ``write()`` block commits; an exception that escapes any
block dooms the whole transaction, which is rolled back when the outermost block exits.

Two kinds of commit hooks: :meth:`Database.after_commit` hooks run as the commit becomes
visible, still holding the write lock (bookkeeping the next transaction must not race), and
:meth:`Database.after_release` hooks run once the committing block has let the lock go, so
slow work a commit starts (embedding what it wrote) never holds off other writers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from ..errors import DMFError, StoreLocked

#: A connection that reads one consistent state (callers above the store pass it back, opaque).
Reader = duckdb.DuckDBPyConnection

log = logging.getLogger(__name__)


#: Strings shorter than this are not compressed with zstd, so none is. DuckDB 2.0 compresses
#: strings of 4 KB or more that way by default, and reading one row back decompresses its
#: segment: with 20 KB values a get took 7x as long as uncompressed (as 1.4.4 stored them),
#: an update or a filtered query 3-4x, for a file 4.7x smaller.
ZSTD_MIN_STRING_LENGTH = 2**31 - 1

# Database files open in this process. DuckDB shares one instance per file within a process,
# so a second Database on the same file would be a second writer with its own seq counter.
_OPEN_FILES: set[str] = set()
_OPEN_FILES_LOCK = threading.Lock()


def first_row(cur: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    """The first row of the statement ``cur`` just executed, or None; its result consumed.

    ``fetchone()`` leaves the result open, and the statement's transaction with it, until the
    cursor runs its next statement. Once a schema change has committed after it, DuckDB
    checkpoints no more (``CHECKPOINT`` fails, "other write transactions active", and commits
    skip the automatic one): the WAL grew without bound and kept what it held in memory
    (74 MB of WAL, 70 MB pinned, after 300 rows of 120 KB behind a readiness probe's count).
    Queries read through it return one row or few (a count, a key, ``LIMIT 1``).
    """
    rows = cur.fetchall()
    return rows[0] if rows else None


class Database:
    """A DuckDB database file (or in-memory) with one writer and per-thread readers."""

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
            self._writer = duckdb.connect(target, config=config)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(
                    f"the memory directory {path.parent if path else ''} is open in another "
                    "process (DuckDB allows one process per file); talk to that process's "
                    "server with --url instead", path=str(path), cause=str(exc),
                ) from None
            raise
        self._lock = threading.RLock()
        self._local = threading.local()
        # new read cursors come from a connection nobody queries on, under their own lock, so
        # a thread's first read does not wait for another thread's write transaction
        self._cursor_factory = self._writer.cursor()
        self._cursor_lock = threading.Lock()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._owner: int | None = None
        self._depth = 0
        self._doomed = False
        self._after_commit: list[Callable[[], None]] = []
        self._after_release: list[Callable[[], None]] = []
        self._before_commit: list[Callable[[], None]] = []
        self._on_rollback: list[Callable[[], None]] = []
        self.closed = False
        # A seqlock over commits: odd while a commit is becoming visible, so a reader that
        # sees the same even value before and after its statements read one committed state,
        # the one at ``visible_seq`` (this process is the file's only writer).
        self.generation = 0
        self.visible_seq = 0
        self.seq_source: Callable[[], int] | None = None

    # ------------------------------------------------------------------ reads

    def reader(self) -> duckdb.DuckDBPyConnection:
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

    def fetchall(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """All rows of a read query."""
        return self.reader().execute(sql, params).fetchall()

    def fetchone(self, sql: str, params: list[Any] | tuple[Any, ...] = ()
                 ) -> tuple[Any, ...] | None:
        """The first row of a read query, or None."""
        return first_row(self.reader().execute(sql, params))

    # ------------------------------------------------------------------ writes

    @property
    def in_transaction(self) -> bool:
        """True when the calling thread is inside a write transaction."""
        return self._owner == threading.get_ident()

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A block inside the (possibly outer) write transaction; commits when outermost
        (then, with the lock let go, runs the transaction's ``after_release`` hooks)."""
        released: list[Callable[[], None]] = []
        try:
            with self._write(released) as con:
                yield con
        finally:
            self._run(released)

    @contextmanager
    def _write(self, released: list[Callable[[], None]]
               ) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._lock:
            if self.closed:
                raise DMFError("the memory is closed")
            outer = self._depth == 0
            if outer:
                self._writer.execute("BEGIN TRANSACTION")
                self._owner = threading.get_ident()
                self._doomed = False
            self._depth += 1
            try:
                yield self._writer
            except BaseException:
                self._doomed = True
                if outer:
                    self._finish(commit=False)
                else:
                    self._depth -= 1
                raise
            if outer:
                if self._doomed:
                    self._finish(commit=False)
                    raise DMFError("the transaction was rolled back because a step in it failed")
                checks, self._before_commit = self._before_commit, []
                try:
                    for check in checks:
                        check()
                except BaseException:
                    self._finish(commit=False)
                    raise
                released.extend(self._finish(commit=True))
            else:
                self._depth -= 1

    def _finish(self, commit: bool) -> list[Callable[[], None]]:
        """Commit or roll back; the ``after_release`` hooks to run (none on rollback)."""
        after_commit, on_rollback = self._after_commit, self._on_rollback
        after_release = self._after_release
        self._after_commit, self._on_rollback, self._after_release = [], [], []
        self._before_commit = []
        try:
            if commit:
                self.generation += 1  # odd: readers cannot tell which state they see
                try:
                    self._writer.execute("COMMIT")
                except BaseException:
                    try:
                        self._writer.execute("ROLLBACK")
                    except duckdb.Error:  # a failed COMMIT has usually rolled back already
                        pass
                    self._run(on_rollback[::-1])
                    raise
                else:
                    if self.seq_source is not None:
                        self.visible_seq = self.seq_source()
                finally:
                    self.generation += 1
            else:
                self._writer.execute("ROLLBACK")
        finally:
            self._depth = 0
            self._owner = None
        self._run(after_commit if commit else on_rollback[::-1])
        return after_release if commit else []

    @staticmethod
    def _run(hooks: list[Callable[[], None]]) -> None:
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook must never turn a committed write into an error
                log.exception("transaction hook failed")

    def stable(self) -> tuple[int, int] | None:
        """``(generation, visible_seq)`` to read optimistically at, or None during a commit.

        Reads made after this call read the state at that seq if :meth:`unchanged` holds
        after them.
        """
        generation = self.generation
        seq = self.visible_seq
        return None if generation % 2 else (generation, seq)

    def unchanged(self, generation: int) -> bool:
        """True if no commit has started since :meth:`stable` returned ``generation``."""
        return self.generation == generation

    @contextmanager
    def read_transaction(self, tries: int) -> Iterator[tuple[Reader, int] | None]:
        """A read transaction begun between two commits: (its connection, the audit seq of the
        state it reads), or None if commits kept starting while it began (``tries`` times).
        Commits go on meanwhile; the transaction keeps reading the state it began at. Call
        outside a write transaction; it is rolled back at the end (it only reads)."""
        reader = self.reader()
        for _ in range(tries):
            stamp = self.stable()
            if stamp is None:  # a commit is becoming visible right now
                continue
            reader.execute("BEGIN TRANSACTION")
            try:
                # DuckDB takes a database's snapshot at the transaction's first read of it; no
                # commit started between the stamp and this read, so it is the state at the
                # stamp
                reader.execute("SELECT count(*) FROM meta WHERE false").fetchall()
                if self.unchanged(stamp[0]):
                    yield reader, stamp[1]
                    return
            finally:
                reader.execute("ROLLBACK")
        yield None

    @contextmanager
    def no_writes(self) -> Iterator[None]:
        """Hold off other threads' write transactions for the duration of the block."""
        with self._lock:
            self._local.holding = getattr(self._local, "holding", 0) + 1
            try:
                yield
            finally:
                self._local.holding -= 1

    @property
    def holds_lock(self) -> bool:
        """True when the calling thread holds the write lock (a transaction or no_writes):
        it must not wait for anything that may need that lock."""
        return self.in_transaction or getattr(self._local, "holding", 0) > 0

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the current transaction commits (dropped on rollback)."""
        self._after_commit.append(hook)

    def before_commit(self, check: Callable[[], None]) -> None:
        """Run ``check`` when the outermost block is about to commit; an exception it raises
        rolls the whole transaction back and reaches the caller."""
        self._before_commit.append(check)

    def after_release(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the current transaction has committed and the committing block
        has let the write lock go (dropped on rollback). Inside a caller's :meth:`no_writes`
        the lock is still that caller's."""
        self._after_release.append(hook)

    def on_rollback(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` if the current transaction rolls back (hooks run newest first)."""
        self._on_rollback.append(hook)

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
            self._writer.close()
        self._release()

    def _release(self) -> None:
        if self._key is not None:
            with _OPEN_FILES_LOCK:
                _OPEN_FILES.discard(self._key)
