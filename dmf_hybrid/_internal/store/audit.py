"""The audit log: one hash-chained event per mutation, verification and erasure-safe redaction.

Each tenant has its own chain: its events are numbered ``seq`` 1, 2, 3... with no gap, and each
chains to the tenant's previous event (the first to :data:`GENESIS_HASH`), so a tenant's log
verifies on its own and its seqs say nothing of other tenants' writes. Events also have a
``pos``: their place in the whole store's log (1, 2, 3... over all tenants, in commit order),
which only the store itself reads (to follow commits, key the outbox, order a whole-store
listing); it is not hashed, so a tenant's chain keeps its hashes wherever it is imported.

Hashing: ``payload_hash = sha256(canonical({"before", "after"}))`` and
``hash = sha256(prev_hash + "\\n" + canonical(header))`` where the header holds every column
except the snapshots themselves but *including* ``payload_hash``. ``principal`` (the key that
authenticated the write, apart from ``actor``, the caller's own label) joins the header only when
it is set, so events written before the column existed keep their hashes and keep verifying.
Erasure may therefore replace an event's snapshots with NULL (``redacted = true``) without
breaking the chain: the chain covers the payload's hash, not its bytes. ``verify`` recomputes
the payload hash of every unredacted event and accepts a redacted one only if the same entity
has a later ``erase`` event, so redaction cannot be used to hide an arbitrary change.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from ..clock import to_aware_utc, to_naive_utc
from ..ids import canonical_json, content_hash, sha256_hex
from ..models import AuditEvent, AuditReport
from .dialect import dialect_of
from .txn import Connection

GENESIS_HASH = "0" * 64
EVENT_COLUMNS = (
    "pos", "seq", "ts", "tenant", "actor", "principal", "reason", "trace_id", "op", "type",
    "entity_id", "version_before", "version_after", "before", "after", "meta", "payload_hash",
    "prev_hash", "hash", "redacted",
)
#: Where an event row (:func:`make_event`) holds its own hash, which the next event chains to.
HASH_INDEX = EVENT_COLUMNS.index("hash")
EVENTS_DDL = """
CREATE TABLE IF NOT EXISTS events (
    pos BIGINT PRIMARY KEY, seq BIGINT NOT NULL, ts TIMESTAMP NOT NULL,
    tenant VARCHAR NOT NULL, actor VARCHAR, reason VARCHAR, trace_id VARCHAR,
    op VARCHAR NOT NULL, type VARCHAR, entity_id VARCHAR,
    version_before INTEGER, version_after INTEGER, before VARCHAR, after VARCHAR, meta VARCHAR,
    payload_hash VARCHAR NOT NULL, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL,
    redacted BOOLEAN NOT NULL DEFAULT FALSE, principal VARCHAR, UNIQUE (tenant, seq)
)
"""
#: Stores made before the principal column existed gain it (NULL for their old events).
EVENTS_MIGRATION = "ALTER TABLE events ADD COLUMN IF NOT EXISTS principal VARCHAR"
def archived_columns(con: Connection, path: str) -> dict[str, str]:
    """Each event column's expression over an archive file (older files lack ``principal``)."""
    present = {d[0] for d in con.execute(f"SELECT * FROM read_parquet('{path}') LIMIT 0"
                                         ).description}
    return {c: c if c in present else f"NULL::VARCHAR AS {c}" for c in EVENT_COLUMNS}


def event_header(values: dict[str, Any], meta: Any) -> dict[str, Any]:
    """The hashed header of an event (every column but the snapshots) from its values."""
    header = {
        "seq": values["seq"], "ts": to_naive_utc(values["ts"]).isoformat(),
        "tenant": values["tenant"], "actor": values["actor"], "reason": values["reason"],
        "trace_id": values["trace_id"], "op": values["op"], "type": values["type"],
        "entity_id": values["entity_id"], "version_before": values["version_before"],
        "version_after": values["version_after"], "meta": meta,
        "payload_hash": values["payload_hash"],
    }
    if values.get("principal") is not None:
        header["principal"] = values["principal"]
    return header


def event_hash(prev_hash: str, header: dict[str, Any]) -> str:
    """The chained hash of an event from its header and the previous hash."""
    return sha256_hex(prev_hash + "\n" + canonical_json(header))


def payload_hash_of(before_json: str | None, after_json: str | None) -> str:
    """``content_hash({"before": before, "after": after})`` from the two canonical JSON texts.

    Canonical JSON sorts keys and has no spaces, so the pair's text is the two texts spliced
    into ``{"after":…,"before":…}``: each snapshot is encoded once, not twice.
    """
    return sha256_hex('{"after":' + ("null" if after_json is None else after_json)
                      + ',"before":' + ("null" if before_json is None else before_json) + "}")


def make_event(
    *, pos: int, seq: int, ts: dt.datetime, prev_hash: str, tenant: str, op: str,
    type_name: str | None, entity_id: str | None, version_before: int | None,
    version_after: int | None,
    before: dict[str, Any] | None, after: dict[str, Any] | None, actor: str | None,
    reason: str | None, trace_id: str | None, meta: dict[str, Any] | None = None,
    principal: str | None = None,
) -> tuple[Any, ...]:
    """One events-table row, hashed and chained to ``prev_hash`` (the hash of the tenant's
    event before, ``seq - 1``); ``pos``: its place in the store's log; ``principal``: who
    authenticated the write (the API key's label), None for an in-process caller."""
    before_json = None if before is None else canonical_json(before)
    after_json = None if after is None else canonical_json(after)
    payload_hash = payload_hash_of(before_json, after_json)
    ts = to_naive_utc(ts)
    header = event_header({
        "seq": seq, "ts": ts, "tenant": tenant, "actor": actor, "principal": principal,
        "reason": reason, "trace_id": trace_id, "op": op, "type": type_name,
        "entity_id": entity_id, "version_before": version_before, "version_after": version_after,
        "payload_hash": payload_hash}, meta)
    digest = event_hash(prev_hash, header)
    return (
        pos, seq, ts, tenant, actor, principal, reason, trace_id, op, type_name, entity_id,
        version_before, version_after, before_json, after_json,
        None if meta is None else canonical_json(meta), payload_hash, prev_hash, digest, False,
    )


def insert_events(con: Connection, rows: list[tuple[Any, ...]]) -> None:
    """Append event rows (already chained) to the events table."""
    if not rows:
        return
    marks = ",".join("?" * len(EVENT_COLUMNS))
    if len(rows) == 1:
        con.execute(f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES ({marks})", rows[0])
        return
    dialect_of(con).insert_rows(con, "events", EVENT_COLUMNS, rows)


def row_to_event(row: tuple[Any, ...]) -> AuditEvent:
    """An AuditEvent from an events-table row (columns in EVENT_COLUMNS order)."""
    values = dict(zip(EVENT_COLUMNS, row, strict=True))
    del values["pos"]  # the store's own: a tenant sees its seqs only
    for key in ("before", "after", "meta"):
        values[key] = None if values[key] is None else json.loads(values[key])
    values["ts"] = to_aware_utc(values["ts"])
    return AuditEvent.model_validate(values)


class ChainCheck:
    """Checks event rows as they come: each tenant's chain (gap-free seqs from 1, payloads,
    hashes chained from :data:`GENESIS_HASH`), and, with ``positions``, the store's positions
    1, 2, 3... in the order the rows come. :meth:`feed` returns the first problem's report.
    ``one_chain``: every row in one chain, whatever its tenant (the log of a store written
    before each tenant had its own, :mod:`.rechain`)."""

    def __init__(self, erased: set[tuple[str, str]], positions: bool = True,
                 one_chain: bool = False) -> None:
        self.erased = erased
        self.positions = positions
        self.one_chain = one_chain
        self.heads: dict[str, Head] = {}
        self.checked = 0
        self.last_pos = 0
        self.last_hash: str | None = None

    def feed(self, row: tuple[Any, ...]) -> AuditReport | None:
        """Check one more row; a failed report naming it, or None."""
        values = dict(zip(EVENT_COLUMNS, row, strict=True))
        tenant, seq = values["tenant"], values["seq"]
        chain = "" if self.one_chain else tenant
        head_seq, prev = self.heads.get(chain, (0, GENESIS_HASH))

        def bad(problem: str, seq: int = seq) -> AuditReport:
            return AuditReport(ok=False, events_checked=self.checked, first_bad_seq=seq,
                               problem=problem, last_seq=head_seq, last_hash=prev,
                               tenant=tenant, chains=len(self.heads))

        if seq != head_seq + 1:  # the first bad seq is the one that is missing
            return bad(f"expected seq {head_seq + 1}, found {seq} (an event is missing or "
                       "moved)", seq=head_seq + 1)
        if self.positions and values["pos"] != self.last_pos + 1:
            return bad(f"expected position {self.last_pos + 1} in the store's log, found "
                       f"{values['pos']} (an event is missing or moved)")
        if values["prev_hash"] != prev:
            return bad("prev_hash does not match the previous event's hash")
        if values["redacted"]:
            if (tenant, values["entity_id"]) not in self.erased:
                return bad("snapshots removed but the entity was never erased")
        else:
            before = None if values["before"] is None else json.loads(values["before"])
            after = None if values["after"] is None else json.loads(values["after"])
            if content_hash({"before": before, "after": after}) != values["payload_hash"]:
                return bad("snapshot content does not match its payload_hash (edited)")
        header = event_header(values, None if values["meta"] is None
                              else json.loads(values["meta"]))
        if event_hash(prev, header) != values["hash"]:
            return bad("hash does not match the event's content (edited)")
        self.heads[chain] = (seq, values["hash"])
        self.checked += 1
        self.last_pos = values["pos"] if self.positions else self.last_pos
        self.last_hash = values["hash"]
        return None

    def run(self, rows: Iterable[tuple[Any, ...]]) -> AuditReport:
        """Check every row; the report: with positions, the store's last position and newest
        hash, else the head of the (one) chain."""
        for row in rows:
            failed = self.feed(row)
            if failed is not None:
                return failed
        if not self.positions:
            seq, digest = next(iter(self.heads.values()), (0, None))
            return AuditReport(ok=True, events_checked=self.checked, last_seq=seq,
                               last_hash=digest, chains=len(self.heads))
        return AuditReport(ok=True, events_checked=self.checked, last_seq=self.last_pos,
                           last_hash=self.last_hash, chains=len(self.heads))


#: A tenant's chain head: the seq and hash of its newest event.
Head = tuple[int, str]
