"""Relations: link, unlink and walk the links between entities (audited, per tenant).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..checks import (
    AsOf,
    check_audit,
    check_id,
    check_related,
)
from ..errors import (
    NotFound,
    RelationError,
)
from ..models import Related
from ..schema import EntityType
from .chain import AuditLog
from .rows import RowReader
from .state import WriteHooks
from .timetravel import TimeTravel
from .txn import Connection, Transactions


@dataclass(eq=False)
class Relations:
    """Links between entities of one tenant: link and unlink (audited writes that run the
    write hooks) and walks, now or as of a seq."""

    db: Transactions
    log: AuditLog
    rows: RowReader
    timetravel: TimeTravel
    hooks: WriteHooks

    def link(self, tenant: str, from_id: Any, relation: Any, to_id: Any, *,
             actor: str | None = None, reason: str | None = None,
             trace_id: str | None = None, principal: str | None = None) -> bool:
        """Link two entities; False if already linked (idempotent)."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        with self.db.write(tenant) as con:
            from_type, spec = self._relation_spec(con, tenant, from_id, relation)
            try:
                to_type, _ = self.rows.current(con, to_id, tenant)
            except NotFound as exc:
                raise RelationError(f"cannot link to {to_id}: {exc.message}",
                                    field="to_id") from None
            if spec.target != "*" and to_type.name != spec.target:
                raise RelationError(
                    f"{from_type.name}.{relation} links to {spec.target}, not {to_type.name}",
                    field="to_id")
            active = con.execute(
                "SELECT to_id FROM relations WHERE tenant = ? AND from_id = ? AND relation = ? "
                "AND deleted_seq IS NULL ORDER BY to_id", [tenant, from_id, relation],
            ).fetchall()
            targets = [r[0] for r in active]
            if to_id in targets:
                return False
            if spec.cardinality == "one" and targets:
                raise RelationError(
                    f"{from_type.name}.{relation} is a one-relation and already links "
                    f"{from_id} to {targets[0]}; unlink it first", field="relation",
                    current=targets[0])
            link = {"from": from_id, "relation": relation, "to": to_id}
            seq = self.log.append(
                con, tenant=tenant, op="link", type_name=from_type.name, entity_id=from_id,
                version_before=None, version_after=None, before=None, after=link, actor=actor,
                reason=reason, trace_id=trace_id, meta=link, principal=principal,
            )
            con.execute("INSERT INTO relations VALUES (?, ?, ?, ?, ?, NULL)",
                        [tenant, from_id, relation, to_id, seq])
            self.hooks.after_write(con, tenant, "link", from_type.name, from_id, principal)
            return True

    def _relation_spec(self, con: Connection, tenant: str, from_id: Any,
                       relation: Any, verb: str = "link") -> tuple[EntityType, Any]:
        try:
            from_type, _ = self.rows.current(con, from_id, tenant)
        except NotFound as exc:
            raise RelationError(f"cannot {verb} from {from_id}: {exc.message}",
                                field="from_id") from None
        if not isinstance(relation, str) or relation not in from_type.typedef.relations:
            known = ", ".join(sorted(from_type.typedef.relations)) or "none"
            raise RelationError(f"{from_type.name} has no relation {relation!r} (known: {known})",
                                field="relation")
        return from_type, from_type.typedef.relations[relation]

    def unlink(self, tenant: str, from_id: Any, relation: Any, to_id: Any, *,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None) -> int:
        """Remove a link; returns the event seq; NotFound if the link does not exist."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        check_id(to_id, "to_id")
        with self.db.write(tenant) as con:
            from_type, _ = self._relation_spec(con, tenant, from_id, relation, "unlink")
            row = con.execute(
                "SELECT created_seq FROM relations WHERE tenant = ? AND from_id = ? AND "
                "relation = ? AND to_id = ? AND deleted_seq IS NULL",
                [tenant, from_id, relation, to_id]).fetchone()
            if row is None:
                raise NotFound(f"{from_id} is not linked to {to_id} by {relation}",
                               field="to_id")
            link = {"from": from_id, "relation": relation, "to": to_id}
            seq = self.log.append(
                con, tenant=tenant, op="unlink", type_name=from_type.name, entity_id=from_id,
                version_before=None, version_after=None, before=link, after=None, actor=actor,
                reason=reason, trace_id=trace_id, meta=link, principal=principal,
            )
            con.execute("UPDATE relations SET deleted_seq = ? WHERE tenant = ? AND from_id = ? "
                        "AND relation = ? AND to_id = ? AND deleted_seq IS NULL",
                        [seq, tenant, from_id, relation, to_id])
            self.hooks.after_write(con, tenant, "unlink", from_type.name, from_id, principal)
            return seq

    def links(self, tenant: str, ids: Iterable[str], relation: str | None, direction: str,
              seq: int | None) -> list[tuple[str, str, str, str]]:
        """Active links touching ``ids``: (from_id, relation, to_id, 'out'|'in'), sorted."""
        ids = sorted(set(ids))
        if not ids:
            return []
        out: list[tuple[str, str, str, str]] = []
        at = "deleted_seq IS NULL" if seq is None else \
            "created_seq <= ? AND (deleted_seq IS NULL OR deleted_seq > ?)"
        at_params = [] if seq is None else [seq, seq]
        rel_sql = "" if relation is None else " AND relation = ?"
        rel_params = [] if relation is None else [relation]
        for col, tag in (("from_id", "out"), ("to_id", "in")):
            if direction not in (tag, "both"):
                continue
            for i in range(0, len(ids), 1000):
                part = ids[i:i + 1000]
                marks = ",".join("?" * len(part))
                out.extend(
                    (a, r, b, tag) for a, r, b in self.db.fetchall(
                        f"SELECT from_id, relation, to_id FROM relations WHERE tenant = ? AND "
                        f"{at}{rel_sql} AND {col} IN ({marks})",
                        [tenant, *at_params, *rel_params, *part])
                )
        return sorted(out)

    def related(self, tenant: str, eid: Any, relation: Any = None, direction: Any = "out",
                depth: Any = 1, as_of: AsOf = None) -> list[Related]:
        """Entities reachable from ``eid`` by up to ``depth`` links, nearest first."""
        check_related(relation, direction, depth)
        seq = self.timetravel.resolve_as_of(tenant, as_of)
        self.timetravel.get(tenant, eid, as_of=seq)
        seen = {eid}
        frontier = [eid]
        result: list[Related] = []
        for level in range(1, depth + 1):
            nxt: list[str] = []
            for a, rel, b, tag in self.links(tenant, frontier, relation, direction, seq):
                src, other = (a, b) if tag == "out" else (b, a)
                if other in seen:
                    continue
                try:
                    entity = self.timetravel.get(tenant, other, as_of=seq)
                except NotFound:
                    continue
                seen.add(other)
                nxt.append(other)
                result.append(Related(relation=rel, direction=tag, depth=level, from_id=src,
                                      entity=entity))
            frontier = nxt
            if not frontier:
                break
        return sorted(result, key=lambda r: (r.depth, r.relation, r.direction, r.entity.id))

    def related_ids(self, tenant: str, eid: str, relation: str, direction: str = "out",
                    seq: int | None = None) -> list[str]:
        """IDs one link away (no entity reads): used to restrict searches."""
        links = self.links(tenant, [eid], relation, direction, seq)
        return sorted({b if tag == "out" else a for a, _, b, tag in links})
