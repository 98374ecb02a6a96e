"""The PostgreSQL engine: the same store on a PostgreSQL 15+ database, through psycopg 3.

:class:`PgDatabase` is the counterpart of :class:`.db.Database`: one writer connection (the
store's transactions, under the same lock), and a read connection per thread taken from a
``psycopg_pool`` pool and kept by that thread. Statements are the store's own, written with
``?`` placeholders; :func:`translate` turns them into psycopg's. JSON and JSONB values are read
back as their text, as DuckDB returns them.

Many processes may open one store. A write transaction of one tenant's data takes that
tenant's transaction-level advisory lock (:data:`_TENANT_LOCK`), and the store-wide one
(:data:`_WRITE_LOCK`) shared: writers of different tenants run at once, writers of one tenant
take turns, so each tenant's seqs are numbered and chained in commit order with no gap and no
fork. A whole-store write takes the store-wide lock alone, waiting for every other writer. A
transaction's events take temporary positions in the store's log; just before it commits it
takes the commit lock (:data:`_COMMIT_LOCK`, held until the commit), follows what other
processes committed meanwhile and numbers its events after them, so positions too are in
commit order with no gap, whatever the number of processes. A process
follows the others' commits from the audit log: a write transaction reads the log's head after
taking its locks, and a read first looks whether the head moved (:meth:`PgDatabase.sync`, which
the store calls before it looks a type up); when it has, :attr:`PgDatabase.on_foreign` brings
the process's state (the log's head, the types, the mirrors and caches) forward. An optimistic
read that a commit of another process overtook (:meth:`PgDatabase.unchanged`) is read again.
Holding off writes (:meth:`PgDatabase.no_writes`) holds off every process's, through the same
lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import DMFError, ServiceUnavailable, ValidationError
from .dialect import redact
from .pg_dialect import POSTGRES, translate
from .txn import Connection, Transactions

log = logging.getLogger(__name__)

#: The channel a writer notifies once its commit's outbox rows are ready to relay (their texts
#: embedded into the shared cache), and the relay leader listens on (a wake-up only: the
#: outbox is what it reads).
OUTBOX_CHANNEL = "dmf_outbox"
#: The advisory lock the process that relays the outbox to a shared vector index holds, as a
#: session lock on a connection of its own: it goes when the process or the connection dies.
_RELAY_LOCK = (0x646D66, 0x726C79)
#: The advisory lock (two int4 keys: "dmf-hybrid", "write") every write transaction of every
#: process takes first (shared by writers of one tenant's data, exclusive for a whole-store
#: write), and a process holding off writes takes (exclusive) for as long as it does.
_WRITE_LOCK = (0x646D66, 0x777274)
#: The first key of a tenant's write lock (the second: the hash of the tenant's name).
_TENANT_LOCK = 0x746E74
#: Held from a transaction's numbering of its events to its commit.
_COMMIT_LOCK = (0x646D66, 0x636D74)
#: The newest position of the audit log (the head every process follows; the open
#: transaction's own events have temporary, negative ones).
_HEAD_SQL = "SELECT pos FROM events WHERE pos > 0 ORDER BY pos DESC LIMIT 1"
#: Seconds to wait for a connection (opening, and from the pool).
CONNECT_TIMEOUT = 10.0


class PgConnection:
    """A psycopg connection that runs the store's statements (``?`` placeholders)."""

    dialect = POSTGRES

    def __init__(self, raw: psycopg.Connection[Any],
                 replace: Callable[[psycopg.Connection[Any]], psycopg.Connection[Any]] | None
                 = None) -> None:
        self.raw = raw
        #: gives a new connection for one the server dropped (readers only)
        self._replace = replace
        #: statements sent (a reader's tell whether its thread read the database lately)
        self.statements = 0

    def execute(self, query: str, parameters: Any = None) -> psycopg.Cursor[Any]:
        self._check_not_busy()
        self.statements += 1
        idle = self.raw.info.transaction_status == TransactionStatus.IDLE
        try:
            return self._execute(query, parameters)
        except psycopg.OperationalError:
            # a statement of its own on a connection the server dropped (a restart): run it
            # again on a new one; inside a transaction the state it read is gone with it
            if self._replace is None or not idle or not self.raw.broken:
                raise
            self.raw = self._replace(self.raw)
            return self._execute(query, parameters)

    def _check_not_busy(self) -> None:
        """A statement stopped half-way (a signal's handler, Ctrl-C, raised between psycopg's
        steps) leaves the connection busy with it, and it cannot run another: a reader's is
        replaced; the writer's is closed (the server rolls its transaction back) and the next
        write transaction connects again. A reader's closed by a replacement that was itself
        interrupted is replaced too."""
        busy = self.raw.info.transaction_status == TransactionStatus.ACTIVE
        if not busy and not (self.raw.closed and self._replace is not None):
            return
        if busy:
            log.warning("a statement was interrupted half-way on a PostgreSQL connection: "
                        "the connection is replaced")
        if self._replace is not None:
            self.raw = self._replace(self.raw)
        else:
            self.raw.close()

    def _execute(self, query: str, parameters: Any) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        if parameters:
            cur.execute(translate(query), list(parameters))  # type: ignore[arg-type]
        else:
            cur.execute(query.encode())  # no parameters: sent as written ("%" included)
        return cur

    def executemany(self, query: str, parameters: Any = None) -> psycopg.Cursor[Any]:
        self._check_not_busy()
        self.statements += 1
        cur = self.raw.cursor()
        cur.executemany(translate(query), parameters or [])  # type: ignore[arg-type]
        return cur

    def close(self) -> None:
        self.raw.close()


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Every connection reads JSON as text (as DuckDB does) and commits each statement
    itself unless a transaction was begun."""
    conn.autocommit = True
    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, TextLoader)


def connect(url: str) -> psycopg.Connection[Any]:
    """A configured connection to ``url``, or a clear error naming ``store_url``."""
    try:
        conn = psycopg.connect(url, connect_timeout=int(CONNECT_TIMEOUT))
    except psycopg.ProgrammingError as exc:  # a malformed URL
        raise ValidationError(f"store_url {redact(url)!r} is not a valid PostgreSQL URL: "
                              f"{exc}", field="store_url") from None
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(f"cannot connect to the PostgreSQL store at store_url "
                                 f"{redact(url)!r}: {str(exc).strip()}",
                                 field="store_url") from None
    _configure(conn)
    return conn


#: Read connections at most (one per reading thread; PostgreSQL allows 100 by default).
READERS = 32


class _Lease:
    """A thread's read connection, given back to the pool when the thread ends (its
    thread-local storage, which holds this, is dropped then)."""

    def __init__(self, db: PgDatabase, con: PgConnection) -> None:
        self.db, self.con = db, con

    def __del__(self) -> None:
        try:
            self.db._give_back(self.con.raw)
        except Exception:  # noqa: BLE001 - at interpreter exit the pool may be gone
            pass


class PgDatabase(Transactions):
    """A PostgreSQL database with one writer connection and a pooled reader per thread."""

    dialect = POSTGRES
    shared = True

    def __init__(self, url: str, readers: int = READERS) -> None:
        self.url = url
        self.path = None
        self._connect_writer()
        self._init_transactions()
        #: Told (after, upto, writing) when commits of other processes moved the log's head
        #: past ``visible_pos`` (and again, not writing, to finish what it could not do in a
        #: write transaction), holding the write lock; it brings the process's state forward.
        self.on_foreign: Callable[[int, int, bool], None] | None = None
        self._unfinished = False
        self._exclusive = False  # the open transaction holds the store-wide lock alone
        self._tenants: set[str] = set()  # and these tenants' locks
        self._tables_made = False
        self._following = False
        self._pool = ConnectionPool(url, min_size=0, max_size=readers, configure=_configure,
                                    timeout=CONNECT_TIMEOUT, open=True,
                                    kwargs={"connect_timeout": int(CONNECT_TIMEOUT)})
        self._held: list[psycopg.Connection[Any]] = []
        self._held_lock = threading.Lock()
        self._relay: psycopg.Connection[Any] | None = None  # holds or asks for the relay lock
        self._leading = False
        self._listening: psycopg.Connection[Any] | None = None  # the relay's, once it LISTENs
        self._relay_guard = threading.Lock()

    def _connect_writer(self) -> None:
        """Connect the writer."""
        self._raw = connect(self.url)
        self._writer = PgConnection(self._raw)

    def _begin_write(self, tenant: str | None) -> None:
        """Begin a write transaction once its locks are free (a tenant's: the tenant's lock and
        the store-wide one shared; the whole store's: the store-wide one), and follow what
        other processes committed before it; a writer connection the server dropped (a
        restart, an administrator) is made again."""
        try:
            super()._begin_write(tenant)
        except psycopg.OperationalError:
            if not (self._raw.closed or self._raw.broken):
                raise
            self._raw.close()
            self._connect_writer()
            super()._begin_write(tenant)
        self._exclusive, self._tenants = tenant is None, set()
        # (a failure from here on is rolled back by the write block, as any of its BEGIN's)
        if tenant is None:
            self._writer.execute("SELECT pg_advisory_xact_lock(?, ?)", _WRITE_LOCK)
        elif tenant:  # one statement, one round trip: the store-wide lock shared, then
            self._writer.execute(  # the tenant's
                "SELECT pg_advisory_xact_lock_shared(?, ?), "
                "pg_advisory_xact_lock(?, hashtext(?))", [*_WRITE_LOCK, _TENANT_LOCK, tenant])
            self._tenants.add(tenant)
        else:
            self._writer.execute("SELECT pg_advisory_xact_lock_shared(?, ?)", _WRITE_LOCK)
        self._follow(self._writer, writing=True)

    def join_tenant(self, tenant: str) -> None:
        """Take ``tenant``'s lock if the open transaction does not hold it (nor the whole
        store's), and follow what other processes committed until then."""
        if self._exclusive or tenant in self._tenants or not self.in_transaction:
            return
        self._writer.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))",
                             [_TENANT_LOCK, tenant])
        self._tenants.add(tenant)
        self._follow(self._writer, writing=True)

    def temporary_base(self) -> int:
        """Where the open transaction's temporary positions start (negated): the writer
        connection's server process ID (no two live connections share one) times 2**32."""
        return int(self._raw.info.backend_pid) << 32

    def commit_numbers(self, base: int, events: int, changes: int) -> tuple[int, int]:
        """Take the commit lock (held until the commit), number the open transaction's
        ``events`` and outbox ``changes`` (their temporary places from ``base``) after the
        newest committed ones, and follow what other processes committed up to those; (the
        log's head before them, the outbox's). Two round trips: the lock, then both
        updates, each reading its table's newest committed place in its own statement."""
        self._writer.execute("SELECT pg_advisory_xact_lock(?, ?)", _COMMIT_LOCK)
        raw, head, first = self._raw, None, 0
        with raw.pipeline(), raw.cursor() as moved, raw.cursor() as queued:
            if events:
                moved.execute(
                    "WITH m AS (UPDATE events SET pos = (SELECT coalesce(max(pos), 0) FROM "
                    "events WHERE pos > 0) - %s - pos WHERE pos BETWEEN %s AND %s RETURNING "
                    "pos) SELECT min(pos) FROM m", [base, -(base + events), -(base + 1)])
            if changes:
                queued.execute(
                    "WITH m AS (UPDATE outbox SET seq = (SELECT coalesce(max(seq), 0) FROM "
                    "outbox WHERE seq > 0) - %s - seq WHERE seq BETWEEN %s AND %s RETURNING "
                    "seq) SELECT min(seq) FROM m", [base, -(base + changes), -(base + 1)])
            if events:
                head = int(moved.fetchall()[0][0]) - 1
            if changes:
                first = int(queued.fetchall()[0][0]) - 1
        self._follow(self._writer, writing=True, head=head)
        return self.visible_pos, first

    def _head(self, con: Connection) -> int:
        """The position of the log's newest committed event (0 before the log exists)."""
        if not self._tables_made:
            if "events" not in self.tables():
                return self.visible_pos
            self._tables_made = True
        row = con.execute(_HEAD_SQL).fetchone()
        return int(row[0]) if row else 0

    def _follow(self, con: Connection, writing: bool = False, head: int | None = None) -> None:
        """Bring the process's state to the log's head (``head``, or read now) if other
        processes moved it (the write lock held); a commit-like change of generation, so
        optimistic reads retry. ``writing``: in a write transaction, where only what reads
        may be done; the rest is finished by the next follow outside one."""
        if self._following or self.on_foreign is None:  # a write the following makes
            return
        head = self._head(con) if head is None else head
        if head == self.visible_pos and (writing or not self._unfinished):
            return
        self.generation += 1
        self._following = True
        try:
            self.on_foreign(self.visible_pos, head, writing)
            self.visible_pos = head
            self._unfinished = writing
        finally:
            self._following = False
            self.generation += 1

    def sync(self) -> None:
        """Follow other processes' commits now, if the log's head moved past what this
        process has seen (outside a write transaction of this thread)."""
        if self.in_transaction or self.closed:
            return
        if self._unfinished or self._head(self.reader()) != self.visible_pos:
            with self._lock:
                if self._depth == 0:
                    self._follow(self.reader())

    def reads(self) -> int:
        """How many statements this thread's read connection has sent (-1: it has none)."""
        lease: _Lease | None = getattr(self._local, "lease", None)
        return -1 if lease is None else lease.con.statements

    def unchanged(self, generation: int, reads: int | None = None) -> bool:
        """No commit of this process started since ``generation``, and none of another
        process moved the log's head, or none could matter: given ``reads`` (:meth:`reads`
        when ``generation`` was taken), a thread that has read nothing from the database
        since then read only this process's state at ``visible_pos``, one committed state
        (saves the head's round trip)."""
        if not super().unchanged(generation):
            return False
        if self.in_transaction or (reads is not None and reads == self.reads()):
            return True
        return self._head(self.reader()) == self.visible_pos

    @contextmanager
    def no_writes(self) -> Iterator[None]:
        """Hold off write transactions: this process's (the lock) and every other's (the
        write lock, taken on the idle writer connection for the duration)."""
        with super().no_writes():
            outer = self._local.holding == 1 and self._depth == 0 and not self.closed
            if outer:
                self._writer.execute("SELECT pg_advisory_lock(?, ?)", _WRITE_LOCK)
            try:
                if outer:
                    self._follow(self.reader())
                yield
            finally:
                if outer and not self.closed:
                    self._writer.execute("SELECT pg_advisory_unlock(?, ?)", _WRITE_LOCK)

    def reader(self) -> Connection:
        """The connection this thread reads with (the writer inside its own transaction)."""
        if self._owner == threading.get_ident():
            return self._writer
        lease: _Lease | None = getattr(self._local, "lease", None)
        if lease is None:
            lease = _Lease(self, PgConnection(self._take(), self._swap))
            self._local.lease = lease
        return lease.con

    def _give_back(self, raw: psycopg.Connection[Any]) -> None:
        """A thread that read has ended: its connection goes back to the pool."""
        with self._held_lock:
            if self.closed or raw not in self._held:
                return
            self._held.remove(raw)
        self._pool.putconn(raw)

    def _take(self) -> psycopg.Connection[Any]:
        """A read connection from the pool, held until the database closes."""
        with self._held_lock:
            if self.closed:
                raise DMFError("the memory is closed")
        try:
            raw = self._pool.getconn()
        except PoolTimeout:
            raise ServiceUnavailable("no connection to the PostgreSQL store came free "
                                     f"within {CONNECT_TIMEOUT:.0f} s") from None
        with self._held_lock:
            self._held.append(raw)
        return raw

    def _swap(self, dropped: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """Give back a read connection the server dropped (the pool discards it); a new one."""
        with self._held_lock:
            held = any(h is dropped for h in self._held)
            self._held = [h for h in self._held if h is not dropped]
        if held:  # (not when a swap interrupted after giving it back is run again)
            self._pool.putconn(dropped)
        return self._take()

    def lead(self) -> bool:
        """Whether this process holds the relay lock (taking it if it is free). Leading, its
        connection is checked alive on each call: a connection the server dropped took the
        lock with it, and the next call connects again and asks anew."""
        with self._relay_guard:
            if self.closed:
                return False
            try:
                if self._relay is None or self._relay.closed or self._relay.broken:
                    self._relay, self._leading = connect(self.url), False
                if self._leading:
                    self._relay.execute("SELECT 1")
                else:
                    row = self._relay.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                              _RELAY_LOCK).fetchone()
                    self._leading = bool(row and row[0])
            except (psycopg.OperationalError, ServiceUnavailable):
                self._leading = False
                if self._relay is not None:
                    self._relay.close()
                    self._relay = None
            return self._leading

    def announce_outbox(self) -> None:
        """``NOTIFY`` the relay leader now (outside any transaction: delivered at once)."""
        try:
            self.reader().execute(f"NOTIFY {OUTBOX_CHANNEL}")
        except (psycopg.Error, DMFError):  # a wake-up only: the leader's poll finds the rows
            log.debug("could not notify the relay leader", exc_info=True)

    def wait_for_outbox(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a commit that queued outbox rows (a ``NOTIFY``
        on the relay's connection, which listens once it leads); whether one came. Never the
        source of truth: the caller drains the outbox either way."""
        relay = self._relay
        if relay is not None and self._leading and not relay.closed:
            try:
                if self._listening is not relay:
                    relay.execute(f"LISTEN {OUTBOX_CHANNEL}")
                    self._listening = relay
                return any(True for _ in relay.notifies(timeout=timeout, stop_after=1))
            except psycopg.Error:  # closed meanwhile, or dropped: lead() connects again
                pass
        time.sleep(timeout)
        return False

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints by itself."""

    def close(self) -> None:
        """Give the readers back, close the pool and the writer (its lock goes with it)."""
        with self._lock, self._held_lock:
            if self.closed:
                return
            self.closed = True
            for raw in self._held:
                try:
                    self._pool.putconn(raw)
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass
            self._held.clear()
            self._pool.close()
            self._raw.close()
        with self._relay_guard:
            if self._relay is not None:  # the relay lock goes with it
                self._relay.close()
                self._relay, self._leading = None, False
