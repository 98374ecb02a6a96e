"""Transactions over one writer connection, engine-neutral (DuckDB's and PostgreSQL's
databases share it).

Transactions nest: the outermost ``write()`` block commits; an exception that escapes any
block dooms the whole transaction, which is rolled back when the outermost block exits.

A write says whose data it writes: ``write(tenant)`` (one tenant's entities, relations, types
and audit chain), ``write(SHARED)`` (no tenant's: derived tables such as the outbox's marks
and the embedding cache) or ``write()`` (the whole store: migrations, store settings). An
engine that other processes share (PostgreSQL) lets writers of different tenants run at once
and makes a whole-store write wait for them all; an embedded one has one writer anyway.

Two kinds of commit hooks: :meth:`Transactions.after_commit` hooks run as the commit becomes
visible, still holding the write lock (bookkeeping the next transaction must not race), and
:meth:`Transactions.after_release` hooks run once the committing block has let the lock go, so
slow work a commit starts (embedding what it wrote) never holds off other writers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..errors import DMFError
from .dialect import Dialect

log = logging.getLogger(__name__)


class Connection(Protocol):
    """What the store runs statements on: a DuckDB connection, or :class:`.postgres.PgConnection`.

    ``execute`` returns a cursor (``fetchall``, ``fetchmany``, ``description``); one-row reads
    go through :func:`first_row`.
    """

    def execute(self, query: str, parameters: Any = None) -> Any: ...

    def executemany(self, query: str, parameters: Any = None) -> Any: ...


#: A connection that reads one consistent state (callers above the store pass it back, opaque).
Reader = Connection
#: ``write(SHARED)``: a write of no tenant's data, which appends no audit event.
SHARED = ""


def first_row(cur: Any) -> tuple[Any, ...] | None:
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


class Transactions:
    """One writer connection under a lock, nested write blocks, commit hooks, and a seqlock
    readers use to tell which committed state they read. Subclasses open the connections."""

    dialect: Dialect
    #: whether other processes may write the same database (a server's)
    shared = False
    #: the database file (None: in memory, or a server's database)
    path: Path | None
    _writer: Connection

    def _init_transactions(self) -> None:
        self._lock = threading.RLock()
        self._local = threading.local()
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
        # the one at log position ``visible_pos`` (this process is the only writer, or, on a
        # shared engine, has followed the others' commits up to it before reading:
        # postgres.PgDatabase). ``publish`` (the audit log's) moves it, and the tenants'
        # heads with it, while the seqlock is odd.
        self.generation = 0
        self.visible_pos = 0
        self.publish: Callable[[], None] | None = None
        #: run last before a commit (after the checks): the audit log numbers what the
        #: transaction appended, on an engine where that waits for the commit
        self.number: Callable[[], None] | None = None
        #: after a COMMIT that raised, given the writer: whether the transaction is in the
        #: database all the same (a signal's handler, Ctrl-C, can interrupt the statement
        #: after the commit went through); the audit log looks for its newest event
        self.landed: Callable[[Connection], bool] | None = None

    def reader(self) -> Connection:
        """The connection this thread reads with (the writer inside its own transaction)."""
        raise NotImplementedError

    def tables(self) -> list[str]:
        """The names of the store's tables, sorted."""
        return [str(r[0]) for r in self.fetchall(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name")]

    def sync(self) -> None:
        """Follow what other processes committed (an engine they may share overrides it)."""

    def announce_outbox(self) -> None:
        """Tell the process that relays the outbox that rows of this process's commit are
        ready to relay (their texts embedded); an embedded database has one process."""

    def wait_for_outbox(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for another process's commit that queued outbox
        rows; whether one came (an embedded database has no other process: it waits)."""
        time.sleep(timeout)
        return False

    def lead(self) -> bool:
        """Whether this process leads the relay of the outbox to a vector index the store's
        processes share (taking the lead if no other process holds it); an embedded database
        has one process, which always does."""
        return not self.closed

    def _begin_write(self, tenant: str | None) -> None:
        """Begin the outermost write transaction on the writer connection, writing
        ``tenant``'s data (SHARED: no tenant's; None: the whole store's)."""
        self._writer.execute("BEGIN TRANSACTION")

    def join_tenant(self, tenant: str) -> None:
        """The open transaction writes ``tenant``'s data too (an engine shared by processes
        takes that tenant's lock now, if the transaction does not hold it)."""

    def temporary_base(self) -> int:
        """Where the open transaction's temporary positions start (see :meth:`commit_position`;
        an engine that numbers as it appends has none)."""
        raise NotImplementedError

    def commit_numbers(self, base: int, events: int, changes: int) -> tuple[int, int]:
        """Just before the open transaction commits, on an engine shared by processes: number
        its ``events`` and outbox ``changes`` (temporary places from ``base``) after the
        newest committed ones, under a lock held until the commit, so that they follow them in
        commit order (the other processes' commits up to them are followed first); (the
        log's head and the outbox's newest key before them)."""
        raise NotImplementedError

    def checkpoint(self) -> None:
        """Make what is committed durable in the database's own files."""
        raise NotImplementedError

    def close(self) -> None:
        """Close every connection."""
        raise NotImplementedError

    def fetchall(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """All rows of a read query."""
        rows: list[tuple[Any, ...]] = self.reader().execute(sql, params).fetchall()
        return rows

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
    def write(self, tenant: str | None = None) -> Iterator[Connection]:
        """A block inside the (possibly outer) write transaction, writing ``tenant``'s data
        (SHARED: no tenant's; None: the whole store's, see the module docstring); commits when
        outermost (then, with the lock let go, runs the transaction's ``after_release``
        hooks)."""
        released: list[Callable[[], None]] = []
        try:
            with self._write(released, tenant) as con:
                yield con
        finally:
            self._run(released)

    @contextmanager
    def _write(self, released: list[Callable[[], None]], tenant: str | None
               ) -> Iterator[Connection]:
        with self._lock:
            if self.closed:
                raise DMFError("the memory is closed")
            depth = self._depth
            outer = depth == 0
            try:
                if outer:
                    self._begin_write(tenant)
                    self._owner = threading.get_ident()
                    self._doomed = False
                elif tenant:
                    self.join_tenant(tenant)
                self._depth += 1
                yield self._writer
            except BaseException:
                # the outermost block rolls back even when its BEGIN was what failed: one
                # interrupted (Ctrl-C) may have begun the transaction all the same
                if outer:
                    self._doomed = True
                    self._finish(commit=False)
                elif self._depth > depth:
                    self._doomed = True
                    self._depth = depth
                raise
            if outer:
                if self._doomed:
                    self._finish(commit=False)
                    raise DMFError("the transaction was rolled back because a step in it failed")
                checks, self._before_commit = self._before_commit, []
                try:
                    for check in checks:
                        check()
                    if self.number is not None:
                        self.number()
                except BaseException:
                    self._finish(commit=False)
                    raise
                self._finish(commit=True, released=released)
            else:
                self._depth -= 1

    def _finish(self, commit: bool, released: list[Callable[[], None]] | None = None) -> None:
        """Commit or roll back, and run the transaction's hooks: ``after_commit`` ones (with
        ``after_release`` ones added to ``released``, to run once the lock is let go) when it
        committed, ``on_rollback`` ones otherwise.

        A COMMIT that raised is rolled back, unless the transaction is in the database all the
        same (:attr:`landed`): then it counts as committed, so that what this process holds
        (the log's heads, the mirrors) is what the database holds, and the error still
        reaches the caller. A ROLLBACK interrupted by a signal still runs the hooks."""
        after_commit, on_rollback = self._after_commit, self._on_rollback
        after_release = self._after_release
        self._after_commit, self._on_rollback, self._after_release = [], [], []
        self._before_commit = []
        committed, failure = False, None
        try:
            if commit:
                self.generation += 1  # odd: readers cannot tell which state they see
                try:
                    try:
                        self._writer.execute("COMMIT")
                    except BaseException as exc:
                        self._roll_back()
                        if not self._landed():
                            raise
                        failure = exc
                    committed = True
                    if self.publish is not None:
                        self.publish()
                finally:
                    self.generation += 1
            else:
                failure = self._roll_back()
        finally:
            self._depth = 0
            self._owner = None
            if not committed:
                self._run(on_rollback[::-1])
        if committed:
            if released is not None:
                released.extend(after_release)
            self._run(after_commit)
        if failure is not None:
            raise failure

    def _landed(self) -> bool:
        """Whether the transaction whose COMMIT raised is in the database all the same (no:
        when that cannot be read)."""
        if self.landed is None:
            return False
        try:
            return self.landed(self._writer)
        except Exception:  # noqa: BLE001 - the connection is gone with the outcome
            log.warning("cannot tell whether a failed COMMIT went through", exc_info=True)
            return False

    def _roll_back(self) -> BaseException | None:
        """ROLLBACK, made sure of; the interruption that stopped it, if one did. A failed
        COMMIT has usually rolled back already (nothing to roll back: not an error here, the
        COMMIT's is the caller's); a statement stopped by a signal (Ctrl-C: DuckDB reports
        "Query interrupted", psycopg cancels it) is sent once more, so that the connection is
        not left inside the transaction."""
        try:
            self._writer.execute("ROLLBACK")
        except BaseException as exc:
            try:
                self._writer.execute("ROLLBACK")
            except Exception as again:  # noqa: BLE001 - most likely nothing left to roll back
                log.debug("second ROLLBACK: %s (first: %s)", again, exc)
            return None if isinstance(exc, Exception) else exc
        return None

    @staticmethod
    def _run(hooks: list[Callable[[], None]]) -> None:
        """Run every hook: one that fails is logged (a hook must never turn a committed
        write into an error), and an interruption (Ctrl-C) during one is raised only once
        the others have run, which undo or publish the rest of the transaction's state."""
        interrupted: BaseException | None = None
        for hook in hooks:
            try:
                hook()
            except Exception:
                log.exception("transaction hook failed")
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def stable(self) -> tuple[int, int] | None:
        """``(generation, visible_pos)`` to read optimistically at, or None during a commit.

        Reads made after this call read the state at that log position if :meth:`unchanged`
        holds after them.
        """
        generation = self.generation
        pos = self.visible_pos
        return None if generation % 2 else (generation, pos)

    def reads(self) -> int:
        """How many statements this thread has read the database with, as far as
        :meth:`unchanged` needs to know (an engine no other process writes: none)."""
        return 0

    def unchanged(self, generation: int, reads: int | None = None) -> bool:
        """True if no commit has started since :meth:`stable` returned ``generation``
        (``reads``: :meth:`reads` then; an engine other processes write may need it)."""
        return self.generation == generation

    @contextmanager
    def read_transaction(self, tries: int) -> Iterator[tuple[Reader, int] | None]:
        """A read transaction begun between two commits: (its connection, the log position of
        the state it reads), or None if commits kept starting while it began (``tries`` times).
        Commits go on meanwhile; the transaction keeps reading the state it began at. Call
        outside a write transaction; it is rolled back at the end (it only reads)."""
        reader = self.reader()
        for _ in range(tries):
            stamp = self.stable()
            if stamp is None:  # a commit is becoming visible right now
                continue
            reader.execute(self.dialect.begin_snapshot)
            try:
                # both engines take the snapshot at the transaction's first read; no commit
                # started between the stamp and this read, so it is the state at the stamp
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

