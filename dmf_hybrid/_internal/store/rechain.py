"""Format 4 -> 5: one hash chain per tenant (in the opening transaction).

Stores of format 4 and older numbered every event in one sequence and chained it to the
event before, whatever its tenant. From format 5 each tenant's events are numbered 1, 2, 3...
and chained among themselves (:mod:`.audit`); an event's place in the whole log is its
``pos``, which is what its old seq was. The migration:

1. verifies the old chain, archived events included, and refuses to go on if it does not
   hold (re-hashing would hide what it found; the store stays as it was, and the error
   names the first bad seq);
2. brings archived events back into the events table (the archive files stay where they
   are; archiving again writes each tenant's own files);
3. numbers and chains each tenant's events anew, in the old order, and maps every stored
   seq (relations, erasures, deletions, type and rule versions) to its tenant's new seq;
4. appends to every tenant's chain a ``migrate`` event that records the old chain's last
   seq and hash, so the new chains vouch for the old one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..clock import utcnow
from ..errors import DMFError
from . import audit
from .dialect import dialect_of
from .sql import q
from .txn import Connection

log = logging.getLogger(__name__)

#: Who the migration's own events name.
MIGRATION_ACTOR = "dmf-hybrid"
_BATCH = 10_000
_NEW_TABLE = "events_v5"


def rechain(con: Connection, directory: Path | None, found: int, to: int) -> None:
    """Migrate the events of a store of format ``found`` to one chain per tenant (format
    ``to``)."""
    unarchived = _unarchive(con, directory)
    columns = _columns(con, "events")
    order = "pos" if "pos" in columns else "seq"
    select = ", ".join(c if c in columns else
                       (f"{order} AS pos" if c == "pos" else f"NULL AS {c}")
                       for c in audit.EVENT_COLUMNS)
    erased = {(str(t), str(e)) for t, e in con.execute(
        "SELECT tenant, entity_id FROM events WHERE op = 'erase'").fetchall()}
    old = audit.ChainCheck(erased, positions=False, one_chain=True)
    con.execute(f"DROP VIEW IF EXISTS {q('events_all')}")
    con.execute(audit.EVENTS_DDL.replace("IF NOT EXISTS events", _NEW_TABLE))
    heads: dict[str, audit.Head] = {}
    last = 0
    while True:
        rows = con.execute(f"SELECT {select} FROM events WHERE {order} > ? ORDER BY {order} "
                           f"LIMIT {_BATCH}", [last]).fetchall()
        if not rows:
            break
        for row in rows:
            failed = old.feed(row)
            if failed is not None:
                raise DMFError(
                    f"the audit chain does not verify at seq {failed.first_bad_seq} "
                    f"({failed.problem}); this version re-chains the log per tenant when it "
                    "opens a store, which would hide that: open it with the version that "
                    "wrote it to look into it, or restore a good copy", store_format=found,
                    first_bad_seq=failed.first_bad_seq)
        dialect_of(con).insert_rows(con, _NEW_TABLE, audit.EVENT_COLUMNS,
                                    [_chained(row, heads) for row in rows])
        last = int(rows[-1][0])
    con.execute("DROP TABLE events")
    con.execute(f"ALTER TABLE {_NEW_TABLE} RENAME TO events")
    _map_seqs(con)
    now = utcnow()
    pos = last
    for tenant in sorted(heads):
        pos += 1
        seq, prev = heads[tenant]
        audit.insert_events(con, [audit.make_event(
            pos=pos, seq=seq + 1, ts=now, prev_hash=prev, tenant=tenant, op="migrate",
            type_name=None, entity_id=None, version_before=None, version_after=None,
            before=None, after={"store_format": to},
            actor=MIGRATION_ACTOR, reason="each tenant has its own seqs and hash chain",
            trace_id=None, meta={"from_format": found, "old_last_seq": old.checked,
                                 "old_last_hash": old.last_hash or audit.GENESIS_HASH,
                                 "unarchived": unarchived})])
    log.warning("store migrated to format 5: %d events re-chained into %d tenant chains%s",
                old.checked, len(heads), f"; archive files no longer read: {unarchived}"
                if unarchived else "")


def _chained(row: tuple[Any, ...], heads: dict[str, audit.Head]) -> tuple[Any, ...]:
    """An event row numbered and chained in its tenant's chain (``heads`` moves on)."""
    values = dict(zip(audit.EVENT_COLUMNS, row, strict=True))
    seq, prev = heads.get(values["tenant"], (0, audit.GENESIS_HASH))
    values["seq"], values["prev_hash"] = seq + 1, prev
    meta = None if values["meta"] is None else json.loads(values["meta"])
    values["hash"] = audit.event_hash(prev, audit.event_header(values, meta))
    heads[values["tenant"]] = (seq + 1, values["hash"])
    return tuple(values[c] for c in audit.EVENT_COLUMNS)


def _map_seqs(con: Connection) -> None:
    """Every seq stored outside the log (an old, store-wide one: the new ``pos``) becomes its
    event's seq in its tenant's chain."""
    targets = [("relations", "created_seq"), ("relations", "deleted_seq"),
               ("schema_types", "seq"), ("dmf_rules", "seq"), ("entity_index", "erased_seq")]
    tables = {str(r[0]) for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = "
        "current_schema() AND table_type = 'BASE TABLE'").fetchall()}
    targets += [(t, "deleted_seq") for t in sorted(tables) if t.startswith("ent_")]
    for table, column in targets:
        if table in tables:
            col = q(column)
            con.execute(f"UPDATE {q(table)} SET {col} = (SELECT e.seq FROM events AS e "
                        f"WHERE e.pos = {q(table)}.{col}) WHERE {col} IS NOT NULL")


def _columns(con: Connection, table: str) -> set[str]:
    return set(dialect_of(con).column_types(con, table))


def _unarchive(con: Connection, directory: Path | None) -> list[str]:
    """Archived events back into the events table (old layout); the files it read."""
    if "event_archive" not in {str(r[0]) for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema()").fetchall()}:
        return []
    files = [str(r[0]) for r in con.execute(
        "SELECT file FROM event_archive ORDER BY first_seq, file").fetchall()]
    columns = sorted(_columns(con, "events"))
    for entry in files:
        path = Path(entry)
        if not path.is_absolute() and directory is not None:
            path = directory / path
        if not path.is_file():
            raise DMFError(f"archive file {path} is missing: the audit chain cannot be "
                           "verified and re-chained per tenant without it; put it back and "
                           "open the store again", file=str(path))
        present = {str(d[0]) for d in con.execute(
            f"SELECT * FROM read_parquet('{path}') LIMIT 0").description}
        cols = ", ".join(q(c) for c in columns)
        picks = ", ".join(q(c) if c in present else f"NULL AS {q(c)}" for c in columns)
        con.execute(f"INSERT INTO events ({cols}) SELECT {picks} FROM read_parquet('{path}')")
    con.execute("DROP TABLE event_archive")
    return files
