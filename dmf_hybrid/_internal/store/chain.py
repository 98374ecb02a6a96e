"""The audit log: the only code that numbers events, chains their hashes and queues the
outbox rows the derived indexes apply; its archive files and its reads.

:class:`AuditLog` is a part the store composes (``store.log``), not a layer it inherits: the
layers above hand it the events of their writes and never touch the seq or a hash themselves.
"""

from __future__ import annotations

import datetime as dt
import logging
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

log = logging.getLogger(__name__)

#: Every reader of the audit log reads the ``events_all`` view: the hot ``events`` table plus
#: the archived Parquet files listed in ``event_archive`` (see dmf_hybrid._internal.store.archive).
EVENT_ARCHIVE_DDL = """CREATE TABLE IF NOT EXISTS event_archive (
    file VARCHAR PRIMARY KEY, tenant VARCHAR NOT NULL, first_seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    last_hash VARCHAR NOT NULL, events BIGINT NOT NULL, sha256 VARCHAR NOT NULL,
    archived_seq BIGINT NOT NULL)"""
#: (key, tenant, entity ID, type, op) of one outbox row: keys number the outbox's rows in the
#: order they were queued (their own numbers: a schema-wide requeue queues many rows for one
#: event, and an event may queue none)
OutboxEntry = tuple[int, str, str, str, str]
#: Called after a commit with the outbox rows it queued.
Listener = Callable[[list[OutboxEntry]], None]
_OUTBOX_COLUMNS = ["seq", "tenant", "entity_id", "type", "op"]
_OP, _TYPE, _TENANT, _ENTITY = (audit.EVENT_COLUMNS.index(c)
                                for c in ("op", "type", "tenant", "entity_id"))
#: Each tenant's head (its newest event's seq and hash), read from the hot table: a tenant's
#: newest event is never archived (archiving appends an event of its own).
HEADS_SQL = ("SELECT e.tenant, e.seq, e.hash FROM events AS e JOIN (SELECT tenant, max(seq) "
             "AS seq FROM events GROUP BY tenant) AS h ON e.tenant = h.tenant AND e.seq = h.seq")
_COLS = ", ".join(audit.EVENT_COLUMNS)


class AuditLog:
    """The audit log of a database: each tenant's hash chain and head, the store's position
    over all of them, and the outbox queue.

    A tenant's ``seq`` is what every public answer names (``as_of``, receipts, ``events``,
    ``X-DMF-Seq``); the position (``pos``) orders the whole store's commits for the parts
    that follow them (the search caches' change feed, other processes, the outbox).
    """

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
        self._pos = 0
        self._heads: dict[str, audit.Head] = {}  # written (this transaction's own included)
        self._visible: dict[str, int] = {}  # committed, as readers may see it
        self._written: set[str] = set()  # tenants this transaction appended to
        self._outbox_key = 0  # the newest outbox row's key
        # On an engine shared by processes, a transaction's events and outbox rows take
        # temporary (negative) positions and keys, numbered at its commit (:meth:`_number`):
        # writers of different tenants run at once, and commit in the order they number.
        self._base: int | None = None
        self._events: list[tuple[str, str | None, str, str | None]] = []
        self._changes: list[tuple[str, str, str, str]] = []
        self._newest: audit.Head | None = None  # the open transaction's newest event
        self._newest_tenant = ""
        self.follow()
        db.visible_pos = self._pos
        db.publish = self._publish
        db.landed = self._landed
        if db.shared:
            db.number = self._number

    # ---------------------------------------------------------------- the heads

    def follow(self) -> None:
        """Read the heads from the database (at open; on PostgreSQL, the write lock held,
        when other processes moved them)."""
        row = self.db.fetchone("SELECT max(pos) FROM events WHERE pos > 0")  # not temporary
        pos = int(row[0]) if row and row[0] is not None else 0
        heads = {str(t): (int(s), str(h)) for t, s, h in self.db.fetchall(HEADS_SQL)}
        # a log never goes back: a head that did (events cut off its end) stays where this
        # process saw it, so the next event leaves the gap verify names
        for tenant, (seq, digest) in self._heads.items():
            if heads.get(tenant, (0, ""))[0] < seq:
                log.error("the audit log of tenant %s went back from seq %d to %d", tenant,
                          seq, heads.get(tenant, (0, ""))[0])
                heads[tenant] = (seq, digest)
        self._pos, self._heads = max(pos, self._pos), heads
        # a transaction of this process following others at its commit: what it wrote is
        # not visible before it commits
        self._visible = {t: seq for t, (seq, _hash) in self._heads.items()
                         if t not in self._written} | {
            t: self._visible[t] for t in self._written if t in self._visible}
        if not self.db.shared:  # a shared engine keys the outbox at each commit (_number)
            row = self.db.fetchone("SELECT max(seq) FROM outbox")
            self._outbox_key = int(row[0]) if row and row[0] is not None else 0

    def _publish(self) -> None:
        """A commit becomes visible (the database's seqlock is odd): its position and the
        heads of the tenants it wrote."""
        self.db.visible_pos = self._pos
        for tenant in self._written:
            self._visible[tenant] = self._heads[tenant][0]
        self._written = set()

    @property
    def pos(self) -> int:
        """The position of the newest committed (or, inside a transaction, written) event."""
        return self._pos

    def head(self, tenant: str) -> int:
        """The seq of the tenant's newest committed (or, inside a transaction, written) event
        (0 before its first)."""
        return self._heads.get(tenant, (0, ""))[0]

    def committed_head(self, tenant: str) -> int:
        """The tenant's newest committed seq (this thread's own, in its transaction)."""
        if self.db.in_transaction:
            return self.head(tenant)
        return self._visible.get(tenant, 0)

    def position(self, tenant: str, seq: int) -> int:
        """The position of the tenant's event ``seq`` (0 for seq 0): reading the store as of
        it reads the tenant as of ``seq``."""
        if seq <= 0:
            return 0
        row = self.db.fetchone(f"SELECT pos FROM {EVENTS_ALL} WHERE tenant = ? AND seq = ?",
                               [tenant, seq])
        return int(row[0]) if row else 0

    # ---------------------------------------------------------------- appending

    def append(self, con: Connection, **fields: Any) -> int:
        """Append one audit event (make_event's fields but pos, seq, ts and prev_hash) inside
        the open transaction; its seq (in its tenant's chain)."""
        return int(self.append_many(con, [fields], utcnow())[0][1])

    def append_many(self, con: Connection, events: list[dict[str, Any]],
                    ts: dt.datetime) -> list[tuple[Any, ...]]:
        """Append events (make_event's fields but pos, seq, ts and prev_hash), in order, inside
        the open transaction: each takes the next position and its tenant's next seq, and
        chains to its tenant's event before; the heads move (and move back on rollback) and
        the journal hears of them on commit. Their rows."""
        heads_before = {f["tenant"]: self._heads.get(f["tenant"]) for f in events}
        written_before = set(self._written)
        for tenant in heads_before:
            self.db.join_tenant(tenant)
        pos_before, positions = self._pos, self._positions(len(events))
        # the heads move back on rollback: registered before they move, so that a failure
        # anywhere below (a statement DuckDB stops because Ctrl-C came) cannot leave them on
        # seqs no committed event has, which every later event would then chain after
        self.db.on_rollback(lambda: self._reset(pos_before, heads_before, written_before))
        rows: list[tuple[Any, ...]] = []
        for fields, pos in zip(events, positions, strict=True):
            tenant = fields["tenant"]
            seq, prev = self._heads.get(tenant, (0, audit.GENESIS_HASH))
            row = audit.make_event(pos=pos, seq=seq + 1, ts=ts, prev_hash=prev, **fields)
            self._heads[tenant] = (seq + 1, row[audit.HASH_INDEX])
            rows.append(row)
        if rows:
            if self._newest is None:  # the transaction's first events
                self.db.after_commit(self._forget_newest)
                self.db.on_rollback(self._forget_newest)
            self._newest_tenant, self._newest = tenant, self._heads[tenant]
        self._written.update(heads_before)
        audit.insert_events(con, rows)
        subjects = [(r[_OP], r[_TYPE], r[_TENANT], r[_ENTITY]) for r in rows]
        if self._base is not None:  # numbered at the commit
            self._events.extend(subjects)
        else:
            self._pos = positions[-1] if positions else self._pos
            entries = [(r[0], *s) for r, s in zip(rows, subjects, strict=True)]
            self.db.after_commit(lambda: self.journal.committed(entries))
        return rows

    def _positions(self, count: int) -> list[int]:
        """The positions of ``count`` events appended now: the next ones, or (numbered at the
        commit) temporary ones."""
        if not self.db.shared:
            return list(range(self._pos + 1, self._pos + count + 1))
        self._begin_numbering()
        assert self._base is not None
        done = len(self._events)
        return [-(self._base + done + i) for i in range(1, count + 1)]

    def _begin_numbering(self) -> None:
        if self._base is None:  # (the hooks first: see append_many)
            self.db.on_rollback(self._end_numbering)
            self.db.after_commit(self._end_numbering)
            self._base = self.db.temporary_base()

    def _end_numbering(self) -> None:
        self._base, self._events, self._changes = None, [], []

    def _number(self) -> None:
        """Number the open transaction's events and outbox rows after the newest committed
        ones, under the lock the commit lets go (the shared engine's ``number`` hook)."""
        if self._base is None or not (self._events or self._changes):
            return
        base, count, changes = self._base, len(self._events), self._changes
        pos_before = self._pos  # (following the others moves it too)
        self.db.on_rollback(lambda: setattr(self, "_pos", pos_before))
        head, first = self.db.commit_numbers(base, count, len(changes))
        if count:
            entries = [(head + i, *s) for i, s in enumerate(self._events, 1)]
            self.db.after_commit(lambda: self.journal.committed(entries))
            self._pos = head + count
        if changes:
            self._queue([(first + j, *c) for j, c in enumerate(changes, 1)])

    def _forget_newest(self) -> None:
        self._newest = None

    def _landed(self, con: Connection) -> bool:
        """Whether the transaction whose COMMIT raised is in the database all the same: its
        newest event is (the database's ``landed`` probe)."""
        if self._newest is None:
            return False
        seq, digest = self._newest
        return con.execute("SELECT count(*) FROM events WHERE tenant = ? AND seq = ? AND "
                           "hash = ?", [self._newest_tenant, seq, digest]).fetchone()[0] > 0

    def _reset(self, pos: int, heads: dict[str, audit.Head | None], written: set[str]) -> None:
        self._pos = pos
        for tenant, head in heads.items():
            if head is None:
                self._heads.pop(tenant, None)
            else:
                self._heads[tenant] = head
        self._written = written

    # ---------------------------------------------------------------- the outbox

    def enqueue(self, con: Connection, tenant: str, eid: str, type_name: str, op: str) -> None:
        """An outbox row for the derived indexes, keyed after the newest."""
        self.enqueue_many(con, [(tenant, eid, type_name, op)])

    def enqueue_many(self, con: Connection, changes: list[tuple[str, str, str, str]]) -> None:
        """Outbox rows for (tenant, entity ID, type, op) changes, keyed after the newest in
        order (the keys move back on rollback)."""
        if not changes:
            return
        if self.db.shared:  # temporary keys, numbered at the commit (:meth:`_number`)
            self._begin_numbering()
            assert self._base is not None
            done = len(self._changes)
            rows = [(-(self._base + done + i), *c) for i, c in enumerate(changes, 1)]
            self._changes.extend(changes)
        else:
            first = self._outbox_key
            rows = [(first + i, *change) for i, change in enumerate(changes, 1)]
            self.db.on_rollback(lambda: setattr(self, "_outbox_key", first))
            self._outbox_key = first + len(rows)
        if len(rows) < 8:
            con.executemany("INSERT INTO outbox (seq, tenant, entity_id, type, op) "
                            "VALUES (?,?,?,?,?)", rows)
        else:
            self.db.dialect.insert_rows(con, "outbox", _OUTBOX_COLUMNS, rows)
        if not self.db.shared:
            self._queue(rows)

    def _queue(self, rows: list[OutboxEntry]) -> None:
        """Tell the listeners about these outbox rows once the transaction has committed and
        let the write lock go: one call per transaction, with every row it queued."""
        if self._queued is None:  # the transaction's first: a list of its own
            batch: list[OutboxEntry] = []
            self.db.after_release(lambda: self._notify(batch))
            self.db.after_commit(self._end_queue)
            self.db.on_rollback(self._end_queue)
            self._queued = batch
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
            "SELECT file FROM event_archive ORDER BY tenant, first_seq, file").fetchall()]
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
            f"SELECT {_COLS} FROM {EVENTS_ALL} WHERE tenant = ? AND "
            f"(entity_id = ? OR {self.db.dialect.json_text('meta', 'to')} = ?) ORDER BY seq",
            [tenant, eid, eid])
        if not rows:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        return [audit.row_to_event(r) for r in rows]

    def events(self, tenant: str, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """The tenant's events with since_seq < seq <= until_seq, oldest first."""
        check_seq_bounds(since_seq=since_seq, until_seq=until_seq, limit=limit)
        params: list[Any] = [tenant, since_seq]
        sql = f"SELECT {_COLS} FROM {EVENTS_ALL} WHERE tenant = ? AND seq > ?"
        if until_seq is not None:
            sql += " AND seq <= ?"
            params.append(until_seq)
        sql += f" ORDER BY seq LIMIT {int(limit)}"
        return [audit.row_to_event(r) for r in self.db.fetchall(sql, params)]

    def verify(self, tenant: str | None = None) -> AuditReport:
        """Check the tenant's hash chain, or every tenant's and the store's positions (None);
        names the first bad seq (and its tenant)."""
        with self.db.no_writes():  # the reads below see exactly the chains up to the heads
            heads = {t: seq for t, (seq, _hash) in self._heads.items()}
            written = self._pos
            mine, params = ("", []) if tenant is None else (" AND tenant = ?", [tenant])
            erased = {(t, e) for t, e in self.db.fetchall(
                f"SELECT tenant, entity_id FROM {EVENTS_ALL} WHERE op = 'erase'{mine}", params)}
            order = "pos" if tenant is None else "seq"
            cur = self.db.reader().execute(
                f"SELECT {_COLS} FROM {EVENTS_ALL} WHERE true{mine} ORDER BY {order}", params)

        def rows() -> Iterable[tuple[Any, ...]]:
            while True:
                batch = cur.fetchmany(5000)
                if not batch:
                    return
                yield from batch

        check = audit.ChainCheck(erased, positions=tenant is None)
        report = check.run(rows())
        if tenant is not None:
            report = report.model_copy(update={"scope": "tenant", "chains": 1})
            found = check.heads.get(tenant, (0, ""))[0]
            return _cut_off(report, tenant, heads.get(tenant, 0), found)
        for name in sorted(set(heads) | set(check.heads)):
            report = _cut_off(report, name, heads.get(name, 0), check.heads.get(name, (0, ""))[0])
        if report.ok and check.last_pos != written:
            return report.model_copy(update={
                "ok": False, "problem": f"the store's log ends at position {check.last_pos} "
                f"but this store wrote up to {written} (events were removed or added)"})
        return report


def _cut_off(report: AuditReport, tenant: str, written: int, found: int) -> AuditReport:
    """The report, failed if the tenant's chain ends before or after the seq this store
    wrote up to (events were cut off its end, or added)."""
    if not report.ok or found == written:
        return report
    return report.model_copy(update={
        "ok": False, "first_bad_seq": min(found, written) + 1, "tenant": tenant,
        "problem": f"the log ends at seq {found} but this store wrote up to seq {written} "
                   "(events were removed or added at the end)"})
