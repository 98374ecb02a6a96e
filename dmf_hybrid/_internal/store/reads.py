"""Reads: the read-only view of the store that lifecycle, plans and tools use (one tenant).

The code above ``Memory`` (prompt context, summaries, plan validation, tool hints) reads the
store through this small interface of typed reads, never through the store's internals or
SQL of its own. Every method is confined to the view's tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import AuditEvent, AuditReport, Entity
from ..schema import EntityType
from .audit import EVENT_COLUMNS, row_to_event
from .dialect import Dialect
from .store import Store
from .tables import EVENTS_ALL

__all__ = ["EventSelection", "Reads"]

_EVENT_COLUMNS = ", ".join(EVENT_COLUMNS)


@dataclass(frozen=True)
class EventSelection:
    """Which of a tenant's audit events a read selects: ``after < seq <= upto``, ``op`` among
    ``ops``, of ``type_name`` (or any type other than ``other_than``), and ``about`` some
    entities (an event of one of them, or a link to one of them)."""

    ops: Sequence[str]
    upto: int
    after: int = 0
    type_name: str | None = None
    other_than: str | None = None
    about: Sequence[str] | None = None

    def where(self, tenant: str, dialect: Dialect) -> tuple[str, list[Any]]:
        """The SQL condition and its bound values."""
        sql = (f"tenant = ? AND seq > ? AND seq <= ? "
               f"AND op IN ({', '.join('?' * len(self.ops))})")
        params: list[Any] = [tenant, self.after, self.upto, *self.ops]
        if self.type_name is not None:
            sql += " AND type = ?"
            params.append(self.type_name)
        if self.other_than is not None:
            sql += " AND type IS DISTINCT FROM ?"
            params.append(self.other_than)
        if self.about is not None:
            marks = ", ".join("?" * len(self.about))
            target = dialect.json_text("meta", "to")
            sql += f" AND (entity_id IN ({marks}) OR {target} IN ({marks}))"
            params += [*self.about, *self.about]
        return sql, params


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions of characters)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


class Reads:
    """Read-only access to one tenant's part of the store."""

    def __init__(self, store: Store, tenant: str) -> None:
        self._store = store
        self.tenant = tenant

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._store.db.fetchall(sql, list(params))

    def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return self._store.db.fetchone(sql, list(params))

    def events(self, selection: EventSelection, *, newest_first: bool = False,
               limit: int | None = None) -> list[AuditEvent]:
        """The selected events of this tenant, by seq (``newest_first``: descending)."""
        where, params = selection.where(self.tenant, self._store.db.dialect)
        order = "DESC" if newest_first else "ASC"
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        rows = self._fetchall(f"SELECT {_EVENT_COLUMNS} FROM {EVENTS_ALL} WHERE {where} "
                              f"ORDER BY seq {order}{tail}", params)
        return [row_to_event(r) for r in rows]

    def nth_event_seq(self, selection: EventSelection, n: int) -> int | None:
        """The seq of the selected event after ``n`` others (by seq), None if fewer."""
        where, params = selection.where(self.tenant, self._store.db.dialect)
        row = self._fetchone(f"SELECT seq FROM {EVENTS_ALL} WHERE {where} ORDER BY seq "
                             "LIMIT 1 OFFSET ?", [*params, int(n)])
        return None if row is None else int(row[0])

    def last_changed(self, selection: EventSelection, limit: int) -> list[str]:
        """IDs of the entities of the selected events, newest last event first (then ID)."""
        where, params = selection.where(self.tenant, self._store.db.dialect)
        rows = self._fetchall(
            f"SELECT entity_id, max(seq) AS last FROM {EVENTS_ALL} WHERE {where} "
            "AND entity_id IS NOT NULL GROUP BY entity_id ORDER BY last DESC, entity_id "
            "LIMIT ?", [*params, int(limit)])
        return [str(r[0]) for r in rows]

    def similar_ids(self, text: str, limit: int = 3) -> list[tuple[str, str]]:
        """(ID, type) of this tenant's entities (not erased) whose IDs are nearest ``text``
        by edit distance, then by ID."""
        if self._store.db.dialect.name == "duckdb":
            rows = self._fetchall(
                "SELECT id, type FROM entity_index WHERE tenant = ? AND erased_seq IS NULL "
                "ORDER BY levenshtein(id, ?), id LIMIT ?", [self.tenant, text, int(limit)])
        else:  # PostgreSQL's levenshtein is an extension: rank here (an error path's hint)
            rows = sorted(self._fetchall(
                "SELECT id, type FROM entity_index WHERE tenant = ? AND erased_seq IS NULL",
                [self.tenant]), key=lambda r: (edit_distance(r[0], text), r[0]))[:limit]
        return [(str(i), str(t)) for i, t in rows]

    def resolve_as_of(self, as_of: Any) -> int | None:
        """The tenant's audit seq an ``as_of`` (seq or datetime) stands for; None: now."""
        return self._store.timetravel.resolve_as_of(self.tenant, as_of)

    def links(self, ids: Iterable[str], relation: str | None, direction: str,
              seq: int | None) -> list[tuple[str, str, str, str]]:
        """Active links touching ``ids``: (from_id, relation, to_id, 'out'|'in'), sorted."""
        return self._store.relations.links(self.tenant, ids, relation, direction, seq)

    def get_many(self, type_name: str, ids: Sequence[str]) -> dict[str, Entity]:
        """The live (not deleted) entities of one type among ``ids``, by ID."""
        return self._store.rows.get_many(self.tenant, type_name, ids)

    def type_of_id(self, entity_id: str) -> str | None:
        """The type of an entity ID of this tenant (deleted or erased too), or None."""
        row = self._fetchone("SELECT type FROM entity_index WHERE id = ? AND tenant = ?",
                            [entity_id, self.tenant])
        return None if row is None else str(row[0])

    def types_of_ids(self, ids: Sequence[str]) -> dict[str, str]:
        """The type of each of those IDs that this tenant has (deleted or erased too)."""
        found: dict[str, str] = {}
        for i in range(0, len(ids), 1000):
            part = list(ids[i:i + 1000])
            if not part:
                continue
            marks = ",".join("?" * len(part))
            for eid, tname in self._fetchall(
                    f"SELECT id, type FROM entity_index WHERE tenant = ? AND id IN ({marks})",
                    [self.tenant, *part]):
                found[eid] = tname
        return found

    def tenant_report(self) -> AuditReport:
        """This tenant's chain checked, and its entities reachable by ID."""
        return self._store.verify_audit(self.tenant)

    def derived_id(self, etype: EntityType, data: Any, given_id: Any = None) -> str:
        """The ID a create of ``data`` would get (validating it like the create); no writes."""
        return self._store.writes.prepare_create(etype, data, given_id, self.tenant)[0]
