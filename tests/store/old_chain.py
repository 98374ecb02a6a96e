"""The audit log as stores of format 4 and older kept it, rebuilt from a store written now:
one hash chain over every tenant's events, numbered by their place in the store's log."""

from __future__ import annotations

import json
from typing import Any

from dmf_hybrid._internal.store import audit

#: The events table of format 4 and older (no ``pos``; ``seq`` numbers the whole store's log).
OLD_EVENTS_DDL = """CREATE TABLE events_old (
    seq BIGINT PRIMARY KEY, ts TIMESTAMP NOT NULL, tenant VARCHAR NOT NULL, actor VARCHAR,
    reason VARCHAR, trace_id VARCHAR, op VARCHAR NOT NULL, type VARCHAR, entity_id VARCHAR,
    version_before INTEGER, version_after INTEGER, before VARCHAR, after VARCHAR, meta VARCHAR,
    payload_hash VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL,
    redacted BOOLEAN NOT NULL DEFAULT FALSE, principal VARCHAR)"""
#: Where a tenant's seq is stored outside the log (tables of format 4, which have a tenant).
SEQ_COLUMNS = [("relations", "created_seq"), ("relations", "deleted_seq"),
               ("schema_types", "seq"), ("dmf_rules", "seq"), ("entity_index", "erased_seq")]


def to_one_chain(con: Any) -> int:
    """Rewrite the events (DuckDB connection, in the caller's transaction) into one chain;
    every stored seq becomes its event's position. The last seq."""
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
    ).fetchall()}
    targets = SEQ_COLUMNS + [(t, "deleted_seq") for t in sorted(tables) if t.startswith("ent_")]
    for table, column in targets:
        if table in tables:
            con.execute(f'UPDATE "{table}" SET {column} = (SELECT e.pos FROM events AS e '
                        f'WHERE e.tenant = "{table}".tenant AND e.seq = "{table}".{column}) '
                        f"WHERE {column} IS NOT NULL")
    columns = [c for c in audit.EVENT_COLUMNS if c != "pos"]
    rows = con.execute(f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM events ORDER BY pos"
                       ).fetchall()
    prev, out = audit.GENESIS_HASH, []
    for row in rows:
        values = dict(zip(audit.EVENT_COLUMNS, row, strict=True))
        values["seq"], values["prev_hash"] = values["pos"], prev
        meta = None if values["meta"] is None else json.loads(values["meta"])
        values["hash"] = prev = audit.event_hash(prev, audit.event_header(values, meta))
        out.append([values[c] for c in columns])
    con.execute("DROP VIEW IF EXISTS events_all")
    con.execute(OLD_EVENTS_DDL)
    if out:
        con.executemany(f"INSERT INTO events_old ({', '.join(columns)}) VALUES "
                        f"({', '.join('?' * len(columns))})", out)
    con.execute("DROP TABLE events")
    con.execute("ALTER TABLE events_old RENAME TO events")
    con.execute("CREATE VIEW events_all AS SELECT * FROM events")
    return len(out)
