"""Creating entities: one or many, validated first, then written in Arrow batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import (
    DEFAULT_ON_CONFLICT,
    check_audit,
    check_on_conflict,
)
from ..clock import to_naive_utc, utcnow
from ..errors import (
    Conflict,
    ValidationError,
)
from ..expiry import expiry_of
from ..models import Entity
from ..schema import EntityType
from .chain import AuditLog
from .expiry import expired
from .group_context import fill_group_context
from .registry import TypeRegistry
from .rows import RowReader
from .sql import (
    bind_field,
    q,
    sql_type,
)
from .state import WriteHooks
from .tables import (
    SYSTEM_COLUMNS,
    SYSTEM_TYPES,
    table_name,
)
from .txn import Connection, Transactions
from .writes import Prepared, Writes


@dataclass(eq=False)
class BulkLoad:
    """Creating entities: validated whole, written in chunks, each row one audited event."""

    db: Transactions
    log: AuditLog
    registry: TypeRegistry
    rows: RowReader
    writes: Writes
    hooks: WriteHooks

    def create(self, tenant: str, type_name: str, data: Any, *, id: Any = None,
               on_conflict: Any = DEFAULT_ON_CONFLICT, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None,
               principal: str | None = None, ttl: Any = None,
               expires_at: Any = None) -> Entity:
        """Create an entity; an existing ID is handled by ``on_conflict`` (see ``checks``);
        ``ttl`` / ``expires_at``: its expiry (:mod:`dmf_hybrid._internal.expiry`)."""
        return self.create_many(tenant, type_name, [data], ids=[id], on_conflict=on_conflict,
                                actor=actor, reason=reason, trace_id=trace_id,
                                principal=principal, ttl=ttl, expires_at=expires_at)[0]

    def create_many(self, tenant: str, type_name: str, rows: Sequence[Any], *,
                    ids: Sequence[Any] | None = None,
                    on_conflict: Any = DEFAULT_ON_CONFLICT, actor: str | None = None,
                    reason: str | None = None, trace_id: str | None = None,
                    principal: str | None = None, chunk: int = 2000,
                    progress: Callable[[int], None] | None = None, ttl: Any = None,
                    expires_at: Any = None) -> list[Entity]:
        """Create many entities of one type: all validated first, then written in chunks.
        ``ttl`` / ``expires_at``: the expiry of every row (none given: the type's ``ttl``);
        ``principal``: who authenticated the write (recorded in its events)."""
        etype = self.registry.type_of(type_name, tenant, principal=principal)
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        check_on_conflict(on_conflict)
        expiry_of(ttl, expires_at, utcnow())  # a bad one changes nothing
        if ids is not None and len(ids) != len(rows):
            raise ValidationError("ids must be as long as rows", field="ids")
        rows = fill_group_context(self.db.reader(), etype, tenant, rows)
        prepared = []
        for i, data in enumerate(rows):
            try:
                prepared.append(self.writes.prepare_create(etype, data, ids[i] if ids else None,
                                                           tenant))
            except ValidationError as exc:
                if len(rows) > 1:
                    exc.details["row"] = i
                    exc.message = f"row {i}: {exc.message}"
                    exc.args = (exc.message,)
                raise
        results: list[Entity] = []
        for start in range(0, len(prepared), chunk):
            part = prepared[start:start + chunk]
            with self.db.write(tenant) as con:
                done = self._insert_batch(con, etype, tenant, part, on_conflict, actor,
                                          reason, trace_id, principal, ttl, expires_at)
                if on_conflict == "update":
                    done = [self._update_existing(tenant, p, e, actor, reason, trace_id,
                                                  principal, ttl, expires_at)
                            for p, e in zip(part, done, strict=True)]
                results.extend(done)
            if progress is not None:
                progress(len(part))
        return results

    def _update_existing(self, tenant: str, prepared: Prepared, entity: Entity,
                         actor: str | None, reason: str | None, trace_id: str | None,
                         principal: str | None, ttl: Any, expires_at: Any) -> Entity:
        """``on_conflict="update"``: the existing entity changed to the given values (and the
        given expiry, if one was)."""
        renew = ttl is not None or expires_at is not None
        if entity.created or not (entity.differs or renew):
            return entity
        values = prepared[2]
        updated = self.writes.update(tenant, entity.id, {f: values[f] for f in entity.differs},
                                     actor=actor, reason=reason, trace_id=trace_id,
                                     principal=principal, ttl=ttl, expires_at=expires_at)
        return updated.model_copy(update={"differs": entity.differs})

    def _insert_batch(self, con: Connection, etype: EntityType, tenant: str,
                      prepared: list[Prepared], on_conflict: str,
                      actor: str | None, reason: str | None, trace_id: str | None,
                      principal: str | None, ttl: Any = None,
                      expires_at: Any = None) -> list[Entity]:
        wanted = sorted({p[0] for p in prepared})
        existing: dict[str, tuple[str, int | None]] = {}
        for i in range(0, len(wanted), 1000):
            part = wanted[i:i + 1000]
            marks = ",".join("?" * len(part))
            # IDs are per tenant: another tenant's entity with the same ID is none of our business
            for eid, etn, etenant, erased in con.execute(
                f"SELECT id, type, tenant, erased_seq FROM entity_index WHERE id IN ({marks})",
                part,
            ).fetchall():
                if etenant == tenant:
                    existing[eid] = (etn, erased)
        now = utcnow()
        expires = expiry_of(ttl, expires_at, now, etype.typedef.ttl).at
        seen: dict[str, Entity] = {}
        results: list[Entity] = []
        new_rows: list[tuple[Any, ...]] = []
        events: list[dict[str, Any]] = []
        outbox: list[tuple[str, str, str, str]] = []  # (tenant, entity ID, type, op)
        for eid, instance, values, text_hash, plain in prepared:
            if eid in seen:
                results.append(self._existing(etype, seen[eid], instance, values,
                                              on_conflict))
                continue
            if eid in existing:
                etn, erased = existing[eid]
                if etn != etype.name:
                    raise Conflict(f"ID {eid} belongs to a {etn}, not a {etype.name}",
                                   entity_id=eid)
                if erased is not None:
                    raise Conflict(f"entity {eid} was erased at seq {erased}; its ID cannot be "
                                   "reused", entity_id=eid)
                _, current = self.rows.current(con, eid, tenant, allow_deleted=True)
                if current.deleted_at is not None:
                    raise Conflict(f"entity {eid} exists but is deleted; restore it instead",
                                   entity_id=eid)
                if expired(current.expires_at, now):
                    assert current.expires_at is not None
                    raise Conflict(f"entity {eid} expired at {current.expires_at.isoformat()}; "
                                   "restore it instead (that clears its expiry)", entity_id=eid)
                seen[eid] = current
                results.append(self._existing(etype, current, instance, values, on_conflict))
                continue
            snap = self.writes.snapshot(etype, eid, tenant, 1, values, now, now, None, text_hash,
                                        plain, expires)
            events.append({
                "tenant": tenant, "op": "create", "type_name": etype.name, "entity_id": eid,
                "version_before": None, "version_after": 1, "before": None, "after": snap,
                "actor": actor, "reason": reason, "trace_id": trace_id,
                "principal": principal})
            new_rows.append(tuple(
                [eid, tenant, 1, to_naive_utc(now), to_naive_utc(now), None, None, text_hash,
                 None if expires is None else to_naive_utc(expires)]
                + [bind_field(s, values[n]) for n, s in etype.fields.items()]
            ))
            if text_hash is not None:
                outbox.append((tenant, eid, etype.name, "upsert"))
            entity = Entity(id=eid, type=etype.name, tenant=tenant, version=1, data=instance,
                            created_at=now, updated_at=now, created=True, expires_at=expires)
            seen[eid] = entity
            results.append(entity)
        if not new_rows:
            return results
        self._bulk_insert(con, etype, new_rows)
        self.log.append_many(con, events, now)
        self.log.enqueue_many(con, outbox)
        for new_row in new_rows:
            self.hooks.after_write(con, tenant, "create", etype.name, new_row[0], principal)
        return results

    @staticmethod
    def _existing(etype: EntityType, current: Entity, instance: Any, values: dict[str, Any],
                  on_conflict: str) -> Entity:
        """The stored entity a create met, with the given fields whose values differ."""
        stored = current.fields()
        differs = sorted(f for f in instance.model_fields_set
                         if f in etype.fields and stored.get(f) != values[f])
        if differs and on_conflict == "raise":
            raise Conflict(f"{current.id} exists with other values of {', '.join(differs)}; "
                           "pass on_conflict=\"update\" to change them or \"return\" to keep "
                           "them", entity_id=current.id, differs=differs)
        return current.model_copy(update={"created": False, "differs": differs})

    def _bulk_insert(self, con: Connection, etype: EntityType,
                     rows: list[tuple[Any, ...]]) -> None:
        index_rows = [(r[0], etype.name, r[1], None) for r in rows]
        # columns by name: a table made before a system column existed has it after its fields
        names = ", ".join([*SYSTEM_COLUMNS, *(q(n) for n in etype.fields)])
        if len(rows) < 8:
            marks = ",".join("?" * len(rows[0]))
            con.executemany(f"INSERT INTO {table_name(etype.key)} ({names}) VALUES ({marks})",
                            rows)
            con.executemany("INSERT INTO entity_index VALUES (?, ?, ?, ?)", index_rows)
            return
        columns = [*SYSTEM_COLUMNS, *etype.fields]
        dialect = self.db.dialect
        casts = ", ".join(
            [f"CAST({q(c)} AS {t})" for c, t in zip(SYSTEM_COLUMNS, SYSTEM_TYPES, strict=True)]
            + [f"CAST({q(n)} AS {sql_type(s, dialect)})" for n, s in etype.fields.items()])
        dialect.insert_columns(con, table_name(etype.key),
                               {c: [r[i] for r in rows] for i, c in enumerate(columns)},
                               select=casts)
        dialect.insert_rows(con, "entity_index", ["id", "type", "tenant", "erased_seq"],
                            index_rows)
