"""Changing entities: update, append, delete, restore and erase, each one audited write.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..checks import (
    Limits,
    check_audit,
    check_changes,
    check_expected_version,
    check_id,
    check_value_sizes,
    check_values,
    full_match,
)
from ..clock import to_naive_utc, utcnow
from ..errors import (
    Conflict,
    NotFound,
    ValidationError,
    VersionConflict,
)
from ..expiry import EXPIRY_ACTOR, check_expiry_args, expiry_of
from ..ids import DEFAULT_TENANT, ID_HASH_HEX, entity_id, sha256_hex
from ..models import Entity
from ..schema import EntityType
from .chain import AuditLog
from .expiry import expired
from .grounding import with_grounded_dates
from .registry import TypeRegistry
from .rows import RowReader, jsonable
from .sql import (
    bind_field,
    q,
)
from .state import WriteHooks
from .tables import (
    ENTITY_OPS,
    EXPIRES_COLUMN,
    table_name,
)
from .txn import Connection, Transactions

#: The shape of the IDs derived from identity fields (``ids.entity_id``).
DERIVED_ID_RE = re.compile(rf"^[A-Za-z][A-Za-z0-9]*_[0-9a-f]{{{ID_HASH_HEX}}}$")
#: A validated create: (id, model instance, data dict, text hash, data as JSON values).
Prepared = tuple[str, BaseModel, dict[str, Any], str | None, dict[str, Any]]


def check_identity_kept(etype: EntityType, eid: str, tenant: str, old: Mapping[str, Any],
                        new: Mapping[str, Any], op: str) -> None:
    """Refuse a change to a declared identity field of an entity whose ID derives from it: a
    changed identity would leave the ID naming a fact the entity no longer holds (a
    caller-chosen ID names no fact, so its entity may change any field)."""
    identity = etype.typedef.identity or ()
    changed = [name for name in identity if old.get(name) != new.get(name)]
    if not changed:
        return
    plain = jsonable({name: old.get(name) for name in identity})
    if entity_id(etype.name, plain, tenant) != eid:
        return
    where = "values" if op == "append" else "changes"
    name = changed[0]
    raise ValidationError(
        f"{etype.name}.{name} is part of the identity of {etype.name} (its ID {eid} derives "
        f"from {', '.join(identity)}) and cannot change; to rename, create the new entity and "
        "delete this one", field=f"{where}.{name}")


@dataclass(eq=False)
class Writes:
    """Changing entities, each change one audited write that runs the write hooks."""

    db: Transactions
    log: AuditLog
    registry: TypeRegistry
    rows: RowReader
    hooks: WriteHooks
    limits: Limits

    def snapshot(self, etype: EntityType, eid: str, tenant: str, version: int,
                 data: Mapping[str, Any], created_at: dt.datetime, updated_at: dt.datetime,
                 deleted_at: dt.datetime | None, text_hash: str | None,
                 plain: dict[str, Any] | None = None,
                 expires_at: dt.datetime | None = None) -> dict[str, Any]:
        """An entity's audit snapshot (``plain``: ``jsonable(data)`` when already at hand);
        ``expires_at`` is there only when the entity has an expiry."""
        snap = {
            "id": eid, "type": etype.name, "tenant": tenant, "version": version,
            "data": jsonable(data) if plain is None else plain,
            "created_at": to_naive_utc(created_at).isoformat(),
            "updated_at": to_naive_utc(updated_at).isoformat(),
            "deleted_at": None if deleted_at is None else to_naive_utc(deleted_at).isoformat(),
            "text_hash": text_hash,
        }
        if expires_at is not None:
            snap["expires_at"] = to_naive_utc(expires_at).isoformat()
        return snap

    def prepare_create(self, etype: EntityType, data: Any, given_id: Any = None,
                       tenant: str = DEFAULT_TENANT) -> Prepared:
        """Validate one create: (id, model instance, data dict, text hash, data as JSON values);
        writes nothing."""
        instance = etype.validate_data(data)
        values = instance.model_dump()
        if etype.typedef.dates is not None:  # derived from the text and time just validated
            values = with_grounded_dates(etype, values)
            instance = etype.model.model_validate(values)
        check_value_sizes(values, self.limits)
        try:
            plain = jsonable(values)
        except ValueError:
            raise ValidationError("data must not contain NaN or infinite numbers",
                                  field="data") from None
        fields = etype.typedef.identity or tuple(sorted(data))
        eid = entity_id(etype.name, {f: plain[f] for f in fields}, tenant)
        if given_id is not None:
            given = check_id(given_id)
            if full_match(DERIVED_ID_RE, given) and given != eid and self.rows.point_row(
                    self.db.reader(), "entity_index", "id", given, tenant) is None:
                # anyone can compute another tenant's derived ID from a fact; taking it would
                # answer 409 "not available" and reveal that the other tenant holds the fact
                raise ValidationError(
                    f"IDs of the form Type_<{ID_HASH_HEX} hex digits> are reserved for the IDs "
                    "derived from identity fields; leave id out or choose another", field="id")
            eid = given
        text = etype.embed_text(values)
        return eid, instance, values, None if text is None else sha256_hex(text), plain

    def _update(self, tenant: str, eid: Any, op: str, expected_version: Any,
                compute: Callable[[EntityType, Entity], dict[str, Any]],
                actor: str | None, reason: str | None, trace_id: str | None,
                principal: str | None, ttl: Any = None, expires_at: Any = None,
                sweep: bool = False) -> Entity:
        """One audited change of an entity. ``ttl`` / ``expires_at``: its new expiry (both
        None: kept); ``sweep``: the expiry sweep deleting an entity whose expiry has come."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        check_expected_version(expected_version)
        check_expiry_args(ttl, expires_at)
        with self.db.write(tenant) as con:
            etype, current = self.rows.current(con, eid, tenant, allow_deleted=op == "restore",
                                               allow_expired=sweep)
            now = utcnow()
            if sweep and not expired(current.expires_at, now):
                return current  # renewed since the sweep listed it
            expiry = expiry_of(ttl, expires_at, now)
            expires = current.expires_at if expiry.keep else expiry.at
            if op == "restore" and expired(expires, now):
                expires = None  # restored to be read: an expiry that has come is cleared
            if expected_version is not None and expected_version != current.version:
                raise VersionConflict(
                    f"{eid} is at version {current.version}, not {expected_version}",
                    entity_id=eid, current_version=current.version,
                    expected_version=expected_version,
                )
            old_values = current.fields()
            new_values = with_grounded_dates(etype, compute(etype, current))
            check_identity_kept(etype, eid, tenant, old_values, new_values, op)
            deleted_at = current.deleted_at
            if op == "delete":
                deleted_at = utcnow()
            elif op == "restore":
                if current.deleted_at is None and not expired(current.expires_at, now):
                    raise Conflict(f"entity {eid} is not deleted", entity_id=eid)
                deleted_at = None
            elif new_values == old_values and expires == current.expires_at:
                return current
            text = etype.embed_text(new_values)
            text_hash = None if text is None else sha256_hex(text)
            version = current.version + 1
            before = self.snapshot(etype, eid, tenant, current.version, old_values,
                                   current.created_at, current.updated_at, current.deleted_at,
                                   self._text_hash(con, etype, eid, tenant),
                                   expires_at=current.expires_at)
            after = self.snapshot(etype, eid, tenant, version, new_values, current.created_at, now,
                                  deleted_at, text_hash, expires_at=expires)
            seq = self.log.append(
                con, tenant=tenant, op=op, type_name=etype.name, entity_id=eid,
                version_before=current.version, version_after=version, before=before,
                after=after, actor=actor, reason=reason, trace_id=trace_id, principal=principal,
            )
            self.registry.mark_modified(etype)
            sets = ", ".join(f"{q(n)} = ?" for n in etype.fields)
            match, match_params = self.rows.row_match(con, table_name(etype.key), eid, tenant)
            con.execute(
                f"UPDATE {table_name(etype.key)} SET version = ?, updated_at = ?, "
                f"deleted_at = ?, deleted_seq = ?, text_hash = ?, {EXPIRES_COLUMN} = ?, "
                f"{sets} WHERE {match}",
                [version, to_naive_utc(now), None if deleted_at is None else
                 to_naive_utc(deleted_at), seq if op == "delete" else None, text_hash,
                 None if expires is None else to_naive_utc(expires),
                 *[bind_field(s, new_values[n]) for n, s in etype.fields.items()],
                 *match_params],
            )
            if text_hash is not None or before["text_hash"] is not None:
                self.log.enqueue(con, tenant, eid, etype.name,
                                 "delete" if op == "delete" or text_hash is None else "upsert")
            self.hooks.after_write(con, tenant, op, etype.name, eid, principal)
            return Entity(
                id=eid, type=etype.name, tenant=tenant, version=version,
                data=etype.model.model_validate(new_values), created_at=current.created_at,
                updated_at=now, deleted_at=deleted_at, expires_at=expires,
            )

    def _text_hash(self, con: Connection, etype: EntityType, eid: str,
                   tenant: str) -> str | None:
        row = self.rows.point_row(con, table_name(etype.key), "text_hash", eid, tenant)
        return None if row is None else row[0]

    def update(self, tenant: str, eid: Any, changes: Any, *, expected_version: Any = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None, ttl: Any = None,
               expires_at: Any = None) -> Entity:
        """Apply field changes (and a new expiry, :mod:`dmf_hybrid._internal.expiry`); bumps the
        version (a no-op change returns the entity as is)."""
        check_changes(changes, ttl is not None or expires_at is not None)

        def compute(etype: EntityType, current: Entity) -> dict[str, Any]:
            merged = {**current.fields(), **changes}
            result = etype.validate_data(merged, where="changes").model_dump()
            check_value_sizes({k: result[k] for k in changes if k in result}, self.limits,
                              "changes")
            return result

        return self._update(tenant, eid, "update", expected_version, compute, actor, reason,
                            trace_id, principal, ttl, expires_at)

    def append(self, tenant: str, eid: Any, field: Any, values: Any, *,
               expected_version: Any = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None,
               principal: str | None = None) -> Entity:
        """Append values to a list field atomically."""
        check_values(values)

        def compute(etype: EntityType, current: Entity) -> dict[str, Any]:
            if not isinstance(field, str) or field not in etype.fields:
                raise ValidationError(f"{etype.name} has no field {field!r}", field="field")
            if etype.fields[field].type != "list":
                raise ValidationError(f"{etype.name}.{field} is not a list field", field="field")
            merged = current.fields()
            merged[field] = list(merged.get(field) or []) + list(values)
            result = etype.validate_data(merged, where="values").model_dump()
            check_value_sizes({field: result[field]}, self.limits, "values")
            return result

        return self._update(tenant, eid, "append", expected_version, compute, actor, reason,
                            trace_id, principal)

    def delete(self, tenant: str, eid: Any, *, expected_version: Any = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None, principal: str | None = None) -> Entity:
        """Soft-delete: hidden from reads, restorable, visible to ``as_of`` before it."""
        return self._update(tenant, eid, "delete", expected_version,
                            lambda _t, cur: cur.fields(), actor, reason, trace_id, principal)

    def sweep_one(self, tenant: str, eid: str, reason: str, principal: str | None) -> Entity:
        """Soft-delete an entity whose expiry has come, as the sweep (:data:`EXPIRY_ACTOR`)."""
        return self._update(tenant, eid, "delete", None, lambda _t, cur: cur.fields(),
                            EXPIRY_ACTOR, reason, None, principal, sweep=True)

    def restore(self, tenant: str, eid: Any, *, expected_version: Any = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None, principal: str | None = None) -> Entity:
        """Undo a soft delete (an expiry that has come is cleared with it)."""
        return self._update(tenant, eid, "restore", expected_version,
                            lambda _t, cur: cur.fields(), actor, reason, trace_id, principal)

    def erase(self, tenant: str, eid: Any, *, actor: str | None = None,
              reason: str | None = None, trace_id: str | None = None,
              principal: str | None = None) -> int:
        """Remove an entity's content everywhere (row, snapshots, links); returns the event seq."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        with self.db.write(tenant) as con:
            etype, erased_seq = self.rows.lookup(con, eid, tenant)
            if erased_seq is not None:
                raise NotFound(f"entity {eid} was erased at seq {erased_seq}", entity_id=eid)
            version = self.rows.point_row(con, table_name(etype.key), "version", eid, tenant)
            hashes = [r[0] for r in con.execute(
                f"SELECT DISTINCT {self.db.dialect.json_text('after', 'text_hash')} "
                "FROM events_all "
                "WHERE entity_id = ? AND tenant = ? AND after IS NOT NULL", [eid, tenant],
            ).fetchall() if r[0]]
            seq = self.log.append(
                con, tenant=tenant, op="erase", type_name=etype.name, entity_id=eid,
                version_before=version[0] if version else None, version_after=None,
                before=None, after=None, actor=actor, reason=reason, trace_id=trace_id,
                principal=principal,
            )
            con.execute("UPDATE events SET before = NULL, after = NULL, redacted = TRUE "
                        "WHERE entity_id = ? AND tenant = ? AND seq < ? AND op IN "
                        f"{ENTITY_OPS!r}", [eid, tenant, seq])
            self.registry.mark_modified(etype)
            match, params = self.rows.row_match(con, table_name(etype.key), eid, tenant)
            con.execute(f"DELETE FROM {table_name(etype.key)} WHERE {match}", params)
            match, params = self.rows.row_match(con, "entity_index", eid, tenant)
            con.execute(f"UPDATE entity_index SET erased_seq = ? WHERE {match}", [seq, *params])
            con.execute("UPDATE relations SET deleted_seq = ? WHERE tenant = ? AND "
                        "deleted_seq IS NULL AND (from_id = ? OR to_id = ?)",
                        [seq, tenant, eid, eid])
            for text_hash in hashes:
                if not self._hash_in_use(con, text_hash):
                    con.execute("DELETE FROM embeddings WHERE text_hash = ?", [text_hash])
            self.log.enqueue(con, tenant, eid, etype.name, "delete")
            self.hooks.after_write(con, tenant, "erase", etype.name, eid, principal)
            return seq

    def _hash_in_use(self, con: Connection, text_hash: str) -> bool:
        for etype in self.registry.types():
            if con.execute(f"SELECT 1 FROM {table_name(etype.key)} WHERE text_hash = ? LIMIT 1",
                           [text_hash]).fetchone():
                return True
        return False

    def requeue_type(self, con: Connection, etype: EntityType) -> None:
        """Recompute text hashes and queue every live entity of a type for reindexing (its
        embedded text changed)."""
        self.registry.mark_modified(etype)
        rows = con.execute(f"SELECT id, tenant FROM {table_name(etype.key)} "
                           "WHERE deleted_at IS NULL ORDER BY id").fetchall()
        for eid, etenant in rows:
            entity = self.rows.read_live(con, etype, eid, etenant)
            text = etype.embed_text(entity.fields()) if entity else None
            match, params = self.rows.row_match(con, table_name(etype.key), eid, etenant)
            con.execute(
                f"UPDATE {table_name(etype.key)} SET text_hash = ? WHERE {match}",
                [None if text is None else sha256_hex(text), *params],
            )
            self.log.enqueue(con, etenant, eid, etype.name,
                             "upsert" if text is not None else "delete")
