"""The outbox: one row per committed change the vector index still has to apply.

A write appends its outbox row in its own transaction; the indexer reads the
pending rows, applies them to the derived indexes, and marks them done here. A crash between
the two leaves the row pending, and it is applied again (applying is idempotent).
"""

from __future__ import annotations

from .txn import SHARED, Transactions

#: (key, type, tenant, entity ID) of one pending change (keys number the rows in queue order)
OutboxRow = tuple[int, str, str, str]


class Outbox:
    """The outbox of the store's database."""

    def __init__(self, db: Transactions) -> None:
        self._db = db

    def pending(self, limit: int) -> list[OutboxRow]:
        """The oldest ``limit`` rows not applied yet, by key."""
        return [(int(seq), str(type_name), str(tenant), str(eid))
                for seq, type_name, tenant, eid in self._db.fetchall(
                    "SELECT seq, type, tenant, entity_id FROM outbox WHERE NOT done "
                    f"ORDER BY seq LIMIT {int(limit)}")]

    def still_pending(self, rows: list[OutboxRow]) -> list[OutboxRow]:
        """Those of ``rows`` not marked done meanwhile."""
        done = {int(r[0]) for r in self._db.fetchall(
            "SELECT seq FROM outbox WHERE done AND seq IN (SELECT unnest(CAST(? AS BIGINT[])))",
            [[r[0] for r in rows]])}
        return [r for r in rows if r[0] not in done]

    def mark_done(self, seqs: list[int]) -> None:
        """Mark the rows of those keys applied (in a transaction of its own)."""
        with self._db.write(SHARED) as con:
            con.execute("UPDATE outbox SET done = TRUE WHERE NOT done AND seq IN "
                        "(SELECT unnest(CAST(? AS BIGINT[])))", [seqs])

    def pending_ids(self, type_name: str, tenant: str, limit: int) -> list[str] | None:
        """The IDs of a tenant's entities of a type with rows pending (None: more than
        ``limit``)."""
        rows = self._db.fetchall(
            "SELECT DISTINCT entity_id FROM outbox WHERE NOT done AND type = ? AND tenant = ? "
            f"ORDER BY entity_id LIMIT {int(limit) + 1}", [type_name, tenant])
        return None if len(rows) > limit else [str(r[0]) for r in rows]

    def count(self) -> int:
        """How many rows wait to be applied."""
        row = self._db.fetchone("SELECT count(*) FROM outbox WHERE NOT done")
        return int(row[0]) if row else 0
