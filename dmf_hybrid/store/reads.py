"""Reads: the read-only view of the store that lifecycle, plans and tools use (one tenant).

The code above ``Memory`` (prompt context, summaries, plan validation, tool hints) reads the
store through this small interface, never through the store's internals. Every method is
confined to the view's tenant except :meth:`fetchall` / :meth:`fetchone`, which run read-only
SQL over the store's tables and views (``events_all``, ``entity_index``, ``ent_<Type>``) with
bound parameters; the caller filters by :attr:`tenant`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..models import AuditReport, Entity
from ..schema import EntityType
from .integrity import unreachable_by_id, unreachable_count, unreachable_problem
from .store import Store
from .tables import EVENTS_ALL

__all__ = ["EVENTS_ALL", "Reads"]


class Reads:
    """Read-only access to one tenant's part of the store."""

    def __init__(self, store: Store, tenant: str) -> None:
        self._store = store
        self.tenant = tenant

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only statement (committed state, or the caller's transaction)."""
        return self._store.db.fetchall(sql, list(params))

    def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of a read-only statement, or None."""
        return self._store.db.fetchone(sql, list(params))

    def resolve_as_of(self, as_of: Any) -> int | None:
        """The audit seq an ``as_of`` (seq or datetime) stands for; None means now."""
        return self._store.resolve_as_of(as_of)

    def links(self, ids: Iterable[str], relation: str | None, direction: str,
              seq: int | None) -> list[tuple[str, str, str, str]]:
        """Active links touching ``ids``: (from_id, relation, to_id, 'out'|'in'), sorted."""
        return self._store.links(self.tenant, ids, relation, direction, seq)

    def get_many(self, type_name: str, ids: Sequence[str]) -> dict[str, Entity]:
        """The live (not deleted) entities of one type among ``ids``, by ID."""
        return self._store.get_many(self.tenant, type_name, ids)

    def type_of_id(self, entity_id: str) -> str | None:
        """The type of an entity ID of this tenant (deleted or erased too), or None."""
        row = self.fetchone("SELECT type FROM entity_index WHERE id = ? AND tenant = ?",
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
            for eid, tname in self.fetchall(
                    f"SELECT id, type FROM entity_index WHERE tenant = ? AND id IN ({marks})",
                    [self.tenant, *part]):
                found[eid] = tname
        return found

    def tenant_head(self) -> int:
        """The seq of this tenant's newest committed event (0 before its first); reading
        ``as_of`` it gives the tenant's current state, as the store-wide head would."""
        row = self.fetchone(f"SELECT max(seq) FROM {EVENTS_ALL} WHERE tenant = ? AND seq <= ?",
                            [self.tenant, self._store.committed_seq])
        return int(row[0]) if row and row[0] is not None else 0

    def tenant_report(self, report: AuditReport) -> AuditReport:
        """A store-wide chain check as this tenant may see it: whether the chain holds, and
        counts, seqs and hashes of its own events only."""
        row = self.fetchone(f"SELECT count(*), max(seq) FROM {EVENTS_ALL} WHERE tenant = ? "
                            "AND seq <= ?", [self.tenant, report.last_seq])
        count, last = (int(row[0]), row[1]) if row else (0, None)
        last_hash = None
        if last is not None:
            found = self.fetchone(f"SELECT hash FROM {EVENTS_ALL} WHERE seq = ?", [last])
            last_hash = None if found is None else str(found[0])
        first_bad, problem = None, None
        unreachable = 0
        if report.unreachable_by_id:
            unreachable = unreachable_count(unreachable_by_id(self._store.db, self.tenant))
        if report.first_bad_seq is None:  # the chain holds; only this tenant's entities count
            if unreachable:
                problem = unreachable_problem(unreachable)
        else:
            owner = self.fetchone(f"SELECT tenant FROM {EVENTS_ALL} WHERE seq = ?",
                                  [report.first_bad_seq])
            if owner is not None and owner[0] == self.tenant:
                first_bad, problem = report.first_bad_seq, report.problem
            else:
                problem = "the audit chain does not verify outside this tenant's events"
        return AuditReport(ok=report.first_bad_seq is None and not unreachable,
                           events_checked=count, first_bad_seq=first_bad, problem=problem,
                           last_seq=0 if last is None else int(last), last_hash=last_hash,
                           scope="tenant", unreachable_by_id=unreachable)

    def derived_id(self, etype: EntityType, data: Any, given_id: Any = None) -> str:
        """The ID a create of ``data`` would get (validating it like the create); no writes."""
        return self._store.prepare_create(etype, data, given_id, self.tenant)[0]
