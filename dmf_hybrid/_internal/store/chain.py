"""The audit log: the only code that numbers events, chains their hashes and queues the
outbox rows the derived indexes apply; its archive files and its reads.

:class:`AuditLog` is a part the store composes (``store.log``), not a layer it inherits: the
layers above hand it the events of their writes and never touch the seq or a hash themselves.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..checks import check_id, check_seq_bounds
from ..clock import utcnow
from ..errors import NotFound
from ..models import AuditEvent, AuditReport
from . import audit
from .journal import Journal
from .tables import EVENTS_ALL
from .txn import Connection, Transactions

#: Every reader of the audit log reads the ``events_all`` view: the hot ``events`` table plus
#: the archived Parquet files listed in ``event_archive`` (see dmf_hybrid._internal.store.archive).
EVENT_ARCHIVE_DDL = """CREATE TABLE IF NOT EXISTS event_archive (
    file VARCHAR PRIMARY KEY, first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
    last_hash VARCHAR NOT NULL, events BIGINT NOT NULL, sha256 VARCHAR NOT NULL,
    archived_seq BIGINT NOT NULL)"""
#: (seq, tenant, entity ID, type, op) of one outbox row
OutboxEntry = tuple[int, str, str, str, str]
#: Called after a commit with the outbox rows it queued.
Listener = Callable[[list[OutboxEntry]], None]
_OUTBOX_COLUMNS = ["seq", "tenant", "entity_id", "type", "op"]
_OP, _TYPE, _TENANT, _ENTITY = (audit.EVENT_COLUMNS.index(c)
                                for c in ("op", "type", "tenant", "entity_id"))


class AuditLog:
    """The hash-chained audit log of a database, its head and its outbox queue."""

    def __init__(self, db: Transactions, journal: Journal) -> None:
        self.db = db
        #: what the events this process committed were about (``journal.Journal``)
        self.journal = journal
        #: told about the outbox rows of each transaction once it commits
        self.listeners: list[Listener] = []
        self._queued: list[OutboxEntry] | None = None
        with db.write() as con:
            con.execute(EVENT_ARCHIVE_DDL)
            self.relativize_archives(con)
            self.refresh_events_view(con)
        row = db.fetchone(f"SELECT seq, hash FROM {EVENTS_ALL} ORDER BY seq DESC LIMIT 1")
        self._seq: int = int(row[0]) if row else 0
        self._last_hash: str = str(row[1]) if row else audit.GENESIS_HASH
        db.visible_seq = self._seq
        db.seq_source = lambda: self._seq

    # ---------------------------------------------------------------- the head

    def follow(self) -> None:
        """Take the head other processes moved (PostgreSQL; the write lock held)."""
        row = self.db.fetchone(f"SELECT seq, hash FROM {EVENTS_ALL} ORDER BY seq DESC LIMIT 1")
        self._seq = int(row[0]) if row else 0
        self._last_hash = str(row[1]) if row else audit.GENESIS_HASH

    @property
    def seq(self) -> int:
        """The seq of the newest committed (or, inside a transaction, written) event."""
        return self._seq

    @property
    def last_hash(self) -> str:
        """The hash of the newest event (the chain's head), which the next one chains to."""
        return self._last_hash

    @property
    def next_seq(self) -> int:
        """The seq the next appended event takes."""
        return self._seq + 1

    @property
    def committed_seq(self) -> int:
        """The seq of the newest committed event (this thread's own, in its transaction)."""
        return self._seq if self.db.in_transaction else self.db.visible_seq

    # ---------------------------------------------------------------- appending

    def append(self, con: Connection, **fields: Any) -> int:
        """Append one audit event (make_event's fields but seq, ts and prev_hash) inside the
        open transaction; its seq."""
        return int(self.append_many(con, [fields], utcnow())[0][0])

    def append_many(self, con: Connection, events: list[dict[str, Any]],
                    ts: dt.datetime) -> list[tuple[Any, ...]]:
        """Append events (make_event's fields but seq, ts and prev_hash), in order, inside the
        open transaction: each takes the next seq and chains to the one before; the head
        moves (and moves back on rollback) and the journal hears of them on commit. Their
        rows."""
        seq_before, hash_before = self._seq, self._last_hash
        rows: list[tuple[Any, ...]] = []
        seq, prev = seq_before, hash_before
        for fields in events:
            seq += 1
            row = audit.make_event(seq=seq, ts=ts, prev_hash=prev, **fields)
            prev = row[audit.HASH_INDEX]
            rows.append(row)
        audit.insert_events(con, rows)
        self._seq, self._last_hash = seq, prev
        self.db.on_rollback(lambda: self._reset(seq_before, hash_before))
        entries = [(r[0], r[_OP], r[_TYPE], r[_TENANT], r[_ENTITY]) for r in rows]
        self.db.after_commit(lambda: self.journal.committed(entries))
        return rows

    def _reset(self, seq: int, last_hash: str) -> None:
        self._seq, self._last_hash = seq, last_hash

    # ---------------------------------------------------------------- the outbox

    def enqueue(self, con: Connection, seq: int, tenant: str, eid: str,
                type_name: str, op: str, unique: bool = True) -> None:
        """An outbox row for the derived indexes (``unique`` False: keyed past the largest,
        for schema-wide requeues that share one event's seq)."""
        if unique:
            con.execute("INSERT INTO outbox (seq, tenant, entity_id, type, op) VALUES (?,?,?,?,?)",
                        [seq, tenant, eid, type_name, op])
        else:
            con.execute(
                "INSERT INTO outbox (seq, tenant, entity_id, type, op) "
                "SELECT coalesce(max(seq), 0) + 1, ?, ?, ?, ? FROM outbox",
                [tenant, eid, type_name, op],
            )
        self._queue([(seq, tenant, eid, type_name, op)])

    def enqueue_many(self, con: Connection, rows: list[OutboxEntry]) -> None:
        """Outbox rows of a bulk write, each keyed by its own event's seq."""
        if not rows:
            return
        if len(rows) < 8:
            con.executemany("INSERT INTO outbox (seq, tenant, entity_id, type, op) "
                            "VALUES (?,?,?,?,?)", rows)
        else:
            self.db.dialect.insert_rows(con, "outbox", _OUTBOX_COLUMNS, rows)
        self._queue(rows)

    def _queue(self, rows: list[OutboxEntry]) -> None:
        """Tell the listeners about these outbox rows once the transaction has committed and
        let the write lock go: one call per transaction, with every row it queued."""
        if self._queued is None:  # the transaction's first: a list of its own
            batch: list[OutboxEntry] = []
            self._queued = batch
            self.db.after_release(lambda: self._notify(batch))
            self.db.after_commit(self._end_queue)
            self.db.on_rollback(self._end_queue)
        self._queued.extend(rows)

    def _end_queue(self) -> None:
        self._queued = None

    def _notify(self, batch: list[OutboxEntry]) -> None:
        for listener in self.listeners:
            listener(batch)

    # ---------------------------------------------------------------- archive files

    def archive_location(self, entry: str) -> Path:
        """The file an ``event_archive`` entry names: a relative one is under the data directory,
        so a copied or moved data directory reads its own archives."""
        path = Path(entry)
        if path.is_absolute() or self.db.path is None:
            return path
        return self.db.path.parent / path

    def archive_entry(self, path: Path) -> str:
        """How ``event_archive`` names a file: relative to the data directory when inside it."""
        resolved = path.resolve()
        if self.db.path is not None:
            root = self.db.path.parent.resolve()
            if resolved.is_relative_to(root):
                return resolved.relative_to(root).as_posix()
        return str(resolved)

    def relativize_archives(self, con: Connection) -> None:
        """Stores that recorded archives by absolute path name those inside the directory
        relative to it (a copy made before this cannot be told from the original)."""
        for (entry,) in con.execute("SELECT file FROM event_archive ORDER BY file").fetchall():
            relative = self.archive_entry(Path(entry)) if Path(entry).is_absolute() else entry
            if relative != entry:
                con.execute("UPDATE event_archive SET file = ? WHERE file = ?", [relative, entry])

    def refresh_events_view(self, con: Connection) -> list[str]:
        """(Re)create the events_all view; returns the archive files it could not find."""
        cols = ", ".join(audit.EVENT_COLUMNS)
        files = [r[0] for r in con.execute(
            "SELECT file FROM event_archive ORDER BY first_seq, file").fetchall()]
        located = {f: str(self.archive_location(f).resolve()) for f in files}
        present = [f for f in files if Path(located[f]).is_file() and "'" not in located[f]]
        sql = f"SELECT {cols} FROM events"
        if self.db.dialect.name != "duckdb":  # archive files are DuckDB's (Parquet)
            con.execute(f"CREATE OR REPLACE VIEW {EVENTS_ALL} AS {sql}")
            return files
        groups: dict[str, list[str]] = {}  # archives written before a column existed lack it
        for f in present:
            columns = ", ".join(audit.archived_columns(con, located[f]).values())
            groups.setdefault(columns, []).append(f"'{located[f]}'")
        for columns, paths in groups.items():
            sql += f" UNION ALL SELECT {columns} FROM read_parquet([{', '.join(paths)}])"
        con.execute(f"CREATE OR REPLACE VIEW {EVENTS_ALL} AS {sql}")
        return [f for f in files if f not in present]

    # ---------------------------------------------------------------- reads

    def history(self, tenant: str, eid: Any) -> list[AuditEvent]:
        """Every event of an entity (including links), oldest first."""
        eid = check_id(eid, "entity_id")
        rows = self.db.fetchall(
            f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} WHERE tenant = ? AND "
            f"(entity_id = ? OR {self.db.dialect.json_text('meta', 'to')} = ?) ORDER BY seq",
            [tenant, eid, eid])
        if not rows:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        return [audit.row_to_event(r) for r in rows]

    def events(self, tenant: str | None, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """Events with since_seq < seq <= until_seq, oldest first (one tenant, or all)."""
        check_seq_bounds(since_seq=since_seq, until_seq=until_seq, limit=limit)
        params: list[Any] = [since_seq]
        sql = f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} WHERE seq > ?"
        if until_seq is not None:
            sql += " AND seq <= ?"
            params.append(until_seq)
        if tenant is not None:
            sql += " AND tenant = ?"
            params.append(tenant)
        sql += f" ORDER BY seq LIMIT {int(limit)}"
        return [audit.row_to_event(r) for r in self.db.fetchall(sql, params)]

    def verify(self) -> AuditReport:
        """Check the whole hash chain; names the first bad seq."""
        with self.db.no_writes():  # the reads below see exactly the chain up to self._seq
            last_written = self._seq
            erased = {(t, e) for t, e in self.db.fetchall(
                f"SELECT tenant, entity_id FROM {EVENTS_ALL} WHERE op = 'erase'")}
            cur = self.db.reader().execute(
                f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} ORDER BY seq")

        def rows() -> Iterable[tuple[Any, ...]]:
            while True:
                batch = cur.fetchmany(5000)
                if not batch:
                    return
                yield from batch

        report = audit.verify_rows(rows(), erased=erased)
        if report.ok and report.last_seq != last_written:
            # a consistent chain that ends too early (or late): events were cut off the end
            return report.model_copy(update={
                "ok": False, "first_bad_seq": min(report.last_seq, last_written) + 1,
                "problem": f"the log ends at seq {report.last_seq} but this store wrote up "
                           f"to seq {last_written} (events were removed or added at the end)"})
        return report
