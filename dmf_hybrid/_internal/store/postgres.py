"""The PostgreSQL engine: the same store on a PostgreSQL 15+ database, through psycopg 3.

:class:`PgDatabase` is the counterpart of :class:`.db.Database`: one writer connection (the
store's transactions, under the same lock), and a read connection per thread taken from a
``psycopg_pool`` pool and kept by that thread. Statements are the store's own, written with
``?`` placeholders; :func:`translate` turns them into psycopg's. JSON and JSONB values are read
back as their text, as DuckDB returns them.

Many processes may open one store. Their write transactions take turns: each begins by
taking a transaction-level advisory lock (:data:`_WRITE_LOCK`), so log positions and each
tenant's seqs are numbered and chained in commit order with no gap and no fork, whatever the
number of processes. A process
follows the others' commits from the audit log: a write transaction reads the log's head after
taking the lock, and a read first looks whether the head moved (:meth:`PgDatabase.sync`, which
the store calls before it looks a type up); when it has, :attr:`PgDatabase.on_foreign` brings
the process's state (the log's head, the types, the mirrors and caches) forward. An optimistic
read that a commit of another process overtook (:meth:`PgDatabase.unchanged`) is read again.
Holding off writes (:meth:`PgDatabase.no_writes`) holds off every process's, through the same
lock.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolTimeout

from ..errors import DMFError, ServiceUnavailable, ValidationError
from .dialect import Dialect, q, redact
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
#: process takes first, and a process holding off writes takes for as long as it does.
_WRITE_LOCK = (0x646D66, 0x777274)
#: The newest position of the audit log (the head every process follows).
_HEAD_SQL = "SELECT pos FROM events ORDER BY pos DESC LIMIT 1"
#: Seconds to wait for a connection (opening, and from the pool).
CONNECT_TIMEOUT = 10.0
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
        con.executemany("INSERT INTO embeddings (model_id, text_hash, dim, vector) "
                        "VALUES (?, ?, ?, ?)"
                        + (" ON CONFLICT DO NOTHING" if skip_existing else ""), rows)

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


class PgConnection:
    """A psycopg connection that runs the store's statements (``?`` placeholders)."""

    dialect = POSTGRES

    def __init__(self, raw: psycopg.Connection[Any],
                 replace: Callable[[psycopg.Connection[Any]], psycopg.Connection[Any]] | None
                 = None) -> None:
        self.raw = raw
        #: gives a new connection for one the server dropped (readers only)
        self._replace = replace

    def execute(self, query: str, parameters: Any = None) -> psycopg.Cursor[Any]:
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

    def _execute(self, query: str, parameters: Any) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        if parameters:
            cur.execute(translate(query), list(parameters))  # type: ignore[arg-type]
        else:
            cur.execute(query.encode())  # no parameters: sent as written ("%" included)
        return cur

    def executemany(self, query: str, parameters: Any = None) -> psycopg.Cursor[Any]:
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

    def _begin_write(self) -> None:
        """Begin a write transaction once no other process's is open (the write lock), and
        follow what other processes committed before it; a writer connection the server
        dropped (a restart, an administrator) is made again."""
        try:
            super()._begin_write()
        except psycopg.OperationalError:
            if not (self._raw.closed or self._raw.broken):
                raise
            self._raw.close()
            self._connect_writer()
            super()._begin_write()
        try:
            self._writer.execute("SELECT pg_advisory_xact_lock(?, ?)", _WRITE_LOCK)
            self._follow(self._writer, writing=True)
        except BaseException:
            self._writer.execute("ROLLBACK")
            raise

    def _head(self, con: Connection) -> int:
        """The position of the log's newest committed event (0 before the log exists)."""
        if not self._tables_made:
            if "events" not in self.tables():
                return self.visible_pos
            self._tables_made = True
        row = con.execute(_HEAD_SQL).fetchone()
        return int(row[0]) if row else 0

    def _follow(self, con: Connection, writing: bool = False) -> None:
        """Bring the process's state to the log's head if other processes moved it (the
        write lock held); a commit-like change of generation, so optimistic reads retry.
        ``writing``: at the start of a write transaction, where only what reads may be
        done; the rest is finished by the next follow outside one."""
        if self._following or self.on_foreign is None:  # a write the following makes
            return
        head = self._head(con)
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

    def unchanged(self, generation: int) -> bool:
        """No commit of this process started since ``generation``, and none of another
        process moved the log's head."""
        if not super().unchanged(generation):
            return False
        return self.in_transaction or self._head(self.reader()) == self.visible_pos

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
            self._held = [h for h in self._held if h is not dropped]
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
