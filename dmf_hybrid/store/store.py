"""The store: entity types, entities, relations and the audit log in one DuckDB database.

Every mutation runs inside one write transaction that also appends its audit event and,
for embedded types, an outbox row; nothing is written before the input has been validated.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel

from ..checks import (
    AsOf,
    check_as_of,
    check_audit,
    check_expected_version,
    check_id,
    check_seq_bounds,
)
from ..clock import to_aware_utc, to_naive_utc, utcnow
from ..errors import (
    Conflict,
    FilterError,
    NotFound,
    RelationError,
    SchemaError,
    ValidationError,
    VersionConflict,
)
from ..ids import DEFAULT_TENANT, ID_HASH_HEX, canonical_json, entity_id, sha256_hex
from ..models import AuditEvent, AuditReport, Entity, Page, Related
from ..schema import EntityType, TypeDef, build_model, check_compatible, parse_filter, parse_order
from . import audit
from .db import Database
from .reads import EVENTS_ALL
from .sql import (
    bind_value,
    compile_filter,
    decode_cursor,
    encode_cursor,
    keyset_sql,
    order_sql,
    q,
    query_fingerprint,
)
from .tables import (
    ENTITY_OPS,
    RECONCILE_PENDING,
    SYSTEM_COLUMNS,
    add_columns,
    create_fixed,
    create_type_table,
    table_name,
)
from .timetravel import as_of_table_sql

#: The shape of the IDs derived from identity fields (``ids.entity_id``).
DERIVED_ID_RE = re.compile(rf"^[A-Za-z][A-Za-z0-9]*_[0-9a-f]{{{ID_HASH_HEX}}}$")
MAX_DEPTH = 5
#: Called inside the write transaction after each entity mutation, link and unlink with
#: (con, tenant, op, type name, entity id); writes a hook makes do not call hooks again.
WriteHook = Callable[[duckdb.DuckDBPyConnection, str, str, str, str], None]
#: Every reader of the audit log reads this view: the hot ``events`` table plus the archived
#: Parquet files listed in ``event_archive`` (see dmf_hybrid.lifecycle.archive).
EVENT_ARCHIVE_DDL = """CREATE TABLE IF NOT EXISTS event_archive (
    file VARCHAR PRIMARY KEY, first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
    last_hash VARCHAR NOT NULL, events BIGINT NOT NULL, sha256 VARCHAR NOT NULL,
    archived_seq BIGINT NOT NULL)"""


#: A validated create: (id, model instance, data dict, text hash, data as JSON values).
Prepared = tuple[str, BaseModel, dict[str, Any], str | None, dict[str, Any]]


def jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    """Data as plain JSON values (UTC ISO datetimes), as snapshots store it."""
    return dict(json.loads(canonical_json(dict(data))))


class Store:
    """DuckDB-backed entities, relations and audit log; the one writer of the database."""

    def __init__(self, path: Path | None) -> None:
        self.db = Database(path)
        self._types: dict[str, EntityType] = {}
        self._user_models: dict[str, type[BaseModel]] = {}
        self.listeners: list[Callable[[list[tuple[int, str, str, str, str]]], None]] = []
        self.write_hooks: list[WriteHook] = []
        self._in_hooks = False
        # types whose rows the open write transaction updated or deleted (see define)
        self._modified: set[str] = set()
        with self.db.write() as con:
            create_fixed(con)
            con.execute(EVENT_ARCHIVE_DDL)
            self.refresh_events_view(con)
        row = self.db.fetchone(f"SELECT seq, hash FROM {EVENTS_ALL} ORDER BY seq DESC LIMIT 1")
        self._seq: int = int(row[0]) if row else 0
        self._last_hash: str = str(row[1]) if row else audit.GENESIS_HASH
        self.db.visible_seq = self._seq
        self.db.seq_source = lambda: self._seq
        self._load_registry()

    # ---------------------------------------------------------------- registry

    def _load_registry(self) -> None:
        rows = self.db.fetchall(
            "SELECT name, version, definition FROM schema_types "
            "QUALIFY row_number() OVER (PARTITION BY name ORDER BY version DESC) = 1 "
            "ORDER BY name"
        )
        for name, version, definition in rows:
            typedef = TypeDef.model_validate_json(definition)
            self._types[name] = EntityType(typedef, version, build_model(typedef))

    def types(self) -> list[EntityType]:
        """Every registered type, by name."""
        return [self._types[n] for n in sorted(self._types)]

    def type_of(self, name: Any) -> EntityType:
        """The registered type of that name, or NotFound listing the known types."""
        if not isinstance(name, str):
            raise ValidationError("type must be a type name string", field="type")
        etype = self._types.get(name)
        if etype is None:
            known = ", ".join(sorted(self._types)) or "none defined"
            raise NotFound(f"unknown entity type {name!r} (known: {known})", field="type")
        return etype

    def define(self, typedef: TypeDef, model: type[BaseModel] | None = None, *,
               tenant: str, actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> EntityType:
        """Register a type or a compatible new version of it (an online migration)."""
        typedef = typedef.check()
        for rel in typedef.relations.values():
            if rel.target != "*" and rel.target != typedef.name and rel.target not in self._types:
                # a forward reference is fine as long as it is defined before a link uses it
                pass
        with self.db.write() as con:
            current = self._types.get(typedef.name)
            clash = [n for n in self._types if n.lower() == typedef.name.lower()
                     and n != typedef.name]
            if clash:
                raise SchemaError(f"type {typedef.name!r} clashes with {clash[0]!r} (names are "
                                  "case-insensitive)", field="name")
            if current is not None and current.typedef == typedef:
                if model is not None:
                    current.model = model
                    self._user_models[typedef.name] = model
                return current
            added: list[str] = []
            if current is not None:
                added = check_compatible(current.typedef, typedef)
            if added and typedef.name in self._modified:
                # DuckDB 1.4 cannot commit ALTER TABLE after UPDATE/DELETE of the same table
                # in one transaction (and its state is unreliable after that failed commit)
                raise SchemaError(
                    f"adding fields to {typedef.name} cannot share a transaction with earlier "
                    f"changes to {typedef.name} entities; migrate in a transaction of its own "
                    "(or first)", field="fields")
            version = 1 if current is None else current.version + 1
            seq = self._next_event(
                con, tenant=tenant, op="define", type_name=typedef.name, entity_id=None,
                version_before=None if current is None else current.version,
                version_after=version,
                before=None if current is None else current.typedef.model_dump(mode="json"),
                after=typedef.model_dump(mode="json"), actor=actor, reason=reason,
                trace_id=trace_id, meta={"added_fields": added} if added else None,
            )
            con.execute(
                "INSERT INTO schema_types VALUES (?, ?, ?, ?, ?)",
                [typedef.name, version, typedef.model_dump_json(), seq,
                 to_naive_utc(utcnow())],
            )
            new = EntityType(typedef, version, model or build_model(typedef))
            if current is None:
                create_type_table(con, new)
            else:
                add_columns(con, typedef, added)
                self._mark_modified(typedef.name)
            previous = current
            self._types[typedef.name] = new

            def undo() -> None:
                if previous is None:
                    self._types.pop(typedef.name, None)
                else:
                    self._types[typedef.name] = previous

            self.db.on_rollback(undo)
            if current is not None and current.typedef.embed != typedef.embed:
                self._requeue_type(con, new, tenant=None)
        return new

    def _mark_modified(self, type_name: str) -> None:
        """Remember that this transaction updated or deleted rows of a type's table."""
        if not self._modified:
            self.db.after_commit(self._modified.clear)
            self.db.on_rollback(self._modified.clear)
        self._modified.add(type_name)

    def _requeue_type(self, con: duckdb.DuckDBPyConnection, etype: EntityType,
                      tenant: str | None) -> None:
        """Recompute text hashes and queue every live entity of a type for reindexing."""
        self._mark_modified(etype.name)
        rows = con.execute(
            f"SELECT id, tenant FROM {table_name(etype.name)} WHERE deleted_at IS NULL "
            + ("AND tenant = ? " if tenant else "") + "ORDER BY id",
            [tenant] if tenant else [],
        ).fetchall()
        for eid, etenant in rows:
            entity = self._read_live(con, etype, eid, etenant)
            text = etype.embed_text(entity.fields()) if entity else None
            match, params = self._row_match(con, table_name(etype.name), eid, etenant)
            con.execute(
                f"UPDATE {table_name(etype.name)} SET text_hash = ? WHERE {match}",
                [None if text is None else sha256_hex(text), *params],
            )
            self._outbox(con, self._seq, etenant, eid, etype.name,
                         "upsert" if text is not None else "delete", unique=False)

    # ---------------------------------------------------------------- events

    def _next_event(self, con: duckdb.DuckDBPyConnection, **fields: Any) -> int:
        """Append one audit event inside the open transaction; returns its seq."""
        seq_before, hash_before = self._seq, self._last_hash
        seq = self._seq + 1
        row = audit.make_event(seq=seq, ts=utcnow(), prev_hash=self._last_hash, **fields)
        audit.insert_events(con, [row])
        self._seq, self._last_hash = seq, row[-2]
        self.db.on_rollback(lambda: self._reset_chain(seq_before, hash_before))
        return seq

    def _reset_chain(self, seq: int, last_hash: str) -> None:
        self._seq, self._last_hash = seq, last_hash

    def append_event(self, con: duckdb.DuckDBPyConnection, **fields: Any) -> int:
        """Append one audit event (make_event's fields) inside the open transaction; its seq."""
        return self._next_event(con, **fields)

    def refresh_events_view(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """(Re)create the events_all view; returns the archive files it could not find."""
        cols = ", ".join(audit.EVENT_COLUMNS)
        files = [r[0] for r in con.execute(
            "SELECT file FROM event_archive ORDER BY first_seq, file").fetchall()]
        present = [f for f in files if Path(f).is_file() and "'" not in f]
        sql = f"SELECT {cols} FROM events"
        if present:
            paths = ", ".join(f"'{f}'" for f in present)
            sql += f" UNION ALL SELECT {cols} FROM read_parquet([{paths}])"
        con.execute(f"CREATE OR REPLACE VIEW {EVENTS_ALL} AS {sql}")
        return [f for f in files if f not in present]

    def _after_write(self, con: duckdb.DuckDBPyConnection, tenant: str, op: str,
                     type_name: str, eid: str) -> None:
        """Run the write hooks (not for writes the hooks themselves make)."""
        if not self.write_hooks or self._in_hooks:
            return
        self._in_hooks = True
        try:
            for hook in list(self.write_hooks):
                hook(con, tenant, op, type_name, eid)
        finally:
            self._in_hooks = False

    @contextmanager
    def hooks_paused(self) -> Iterator[None]:
        """Writes in this block do not run the write hooks (as writes made by a hook)."""
        previous, self._in_hooks = self._in_hooks, True
        try:
            yield
        finally:
            self._in_hooks = previous

    @property
    def last_seq(self) -> int:
        """The seq of the newest committed (or, inside a transaction, written) event."""
        return self._seq

    @property
    def committed_seq(self) -> int:
        """The seq of the newest committed event (this thread's own, in its transaction)."""
        return self._seq if self.db.in_transaction else self.db.visible_seq

    def _outbox(self, con: duckdb.DuckDBPyConnection, seq: int, tenant: str, eid: str,
                type_name: str, op: str, unique: bool = True) -> None:
        if unique:
            con.execute("INSERT INTO outbox (seq, tenant, entity_id, type, op) VALUES (?,?,?,?,?)",
                        [seq, tenant, eid, type_name, op])
        else:
            # schema-wide requeues share the define event's seq: key them past it
            con.execute(
                "INSERT INTO outbox (seq, tenant, entity_id, type, op) "
                "SELECT coalesce(max(seq), 0) + 1, ?, ?, ?, ? FROM outbox",
                [tenant, eid, type_name, op],
            )
        batch = (seq, tenant, eid, type_name, op)
        self.db.after_commit(lambda: self._notify([batch]))

    def _notify(self, batch: list[tuple[int, str, str, str, str]]) -> None:
        for listener in self.listeners:
            listener(batch)

    # ---------------------------------------------------------------- reading rows

    def _select_cols(self, etype: EntityType) -> str:
        return ", ".join(list(SYSTEM_COLUMNS) + [q(n) for n in etype.fields])

    def _row_to_entity(self, etype: EntityType, row: Sequence[Any], created: bool = False
                       ) -> Entity:
        sys_vals = dict(zip(SYSTEM_COLUMNS, row[: len(SYSTEM_COLUMNS)], strict=True))
        data = _aware_datetimes(etype, dict(zip(etype.fields, row[len(SYSTEM_COLUMNS):],
                                                strict=True)))
        return Entity(
            id=sys_vals["id"], type=etype.name, tenant=sys_vals["tenant"],
            version=sys_vals["version"], data=etype.model.model_validate(data),
            created_at=to_aware_utc(sys_vals["created_at"]),
            updated_at=to_aware_utc(sys_vals["updated_at"]),
            deleted_at=to_aware_utc(sys_vals["deleted_at"]), created=created,
        )

    @staticmethod
    def _point_row(con: duckdb.DuckDBPyConnection, table: str, cols: str, eid: str,
                   tenant: str) -> tuple[Any, ...] | None:
        """The columns ``cols`` of this tenant's row of ``eid`` in a table, or None.

        Two tenants may hold the same ID. `id = ?` alone lets DuckDB use the id index (adding
        `AND tenant = ?` makes it scan the table), so the tenant is checked on the rows found.
        """
        for row in con.execute(f"SELECT tenant, {cols} FROM {table} WHERE id = ?",
                               [eid]).fetchall():
            if row[0] == tenant:
                return tuple(row[1:])
        return None

    @staticmethod
    def _row_match(con: duckdb.DuckDBPyConnection, table: str, eid: str, tenant: str
                   ) -> tuple[str, list[Any]]:
        """A WHERE condition (and its parameters) for this tenant's row of ``eid`` in a table.

        `id = ?` alone when no other tenant has a row with that ID (DuckDB answers it from the
        id index); `id = ? AND tenant = ?`, which scans, only when one does.
        """
        tenants = con.execute(f"SELECT tenant FROM {table} WHERE id = ?", [eid]).fetchall()
        if all(t == tenant for (t,) in tenants):
            return "id = ?", [eid]
        return "id = ? AND tenant = ?", [eid, tenant]

    def _read_live(self, con: duckdb.DuckDBPyConnection, etype: EntityType, eid: str,
                   tenant: str) -> Entity | None:
        row = self._point_row(con, table_name(etype.name), self._select_cols(etype), eid,
                              tenant)
        return None if row is None else self._row_to_entity(etype, row)

    def _lookup(self, con: duckdb.DuckDBPyConnection, eid: Any, tenant: str) -> tuple[
            EntityType, int | None]:
        """The type and erasure seq of an ID in this tenant, or NotFound."""
        eid = check_id(eid, "entity_id")
        row = self._point_row(con, "entity_index", "type, erased_seq", eid, tenant)
        if row is None or row[0] not in self._types:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        return self._types[row[0]], row[1]

    def _current(self, con: duckdb.DuckDBPyConnection, eid: Any, tenant: str,
                 allow_deleted: bool = False) -> tuple[EntityType, Entity]:
        etype, erased_seq = self._lookup(con, eid, tenant)
        if erased_seq is not None:
            raise NotFound(f"entity {eid} was erased at seq {erased_seq}", entity_id=eid,
                           erased_seq=erased_seq)
        entity = self._read_live(con, etype, eid, tenant)
        if entity is None:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        if entity.deleted_at is not None and not allow_deleted:
            dseq = self._point_row(con, table_name(etype.name), "deleted_seq", eid, tenant)
            raise NotFound(f"entity {eid} was deleted at seq {dseq[0] if dseq else '?'}",
                           entity_id=eid, deleted_seq=dseq[0] if dseq else None)
        return etype, entity

    # ---------------------------------------------------------------- as_of

    def resolve_as_of(self, as_of: AsOf) -> int | None:
        """The audit seq an ``as_of`` (seq or datetime) stands for; None means now."""
        as_of = check_as_of(as_of)
        if as_of is None:
            return None
        if isinstance(as_of, int):
            return min(as_of, self.committed_seq)
        row = self.db.fetchone(f"SELECT coalesce(max(seq), 0) FROM {EVENTS_ALL} WHERE ts <= ?",
                               [to_naive_utc(as_of)])
        return int(row[0]) if row else 0

    def _snapshot_entity(self, etype: EntityType, snap: dict[str, Any]) -> Entity:
        data = _aware_datetimes(etype, {k: v for k, v in snap["data"].items()
                                        if k in etype.fields})
        return Entity(
            id=snap["id"], type=etype.name, tenant=snap["tenant"], version=snap["version"],
            data=etype.model.model_validate(data),
            created_at=to_aware_utc(dt.datetime.fromisoformat(snap["created_at"])),
            updated_at=to_aware_utc(dt.datetime.fromisoformat(snap["updated_at"])),
            deleted_at=None,
        )

    def _get_as_of(self, eid: Any, tenant: str, seq: int) -> Entity:
        eid = check_id(eid, "entity_id")
        row = self.db.fetchone(
            f"SELECT type, after, redacted, op, seq FROM {EVENTS_ALL} WHERE entity_id = ? "
            "AND tenant = ? "
            f"AND seq <= ? AND op IN {ENTITY_OPS!r} ORDER BY seq DESC LIMIT 1",
            [eid, tenant, seq],
        )
        if row is None or row[0] not in self._types:
            raise NotFound(f"no entity {eid} at seq {seq}", entity_id=eid, as_of=seq)
        type_name, after, redacted, _op, at = row
        if redacted or after is None:
            raise NotFound(f"entity {eid} was erased", entity_id=eid)
        snap = json.loads(after)
        if snap.get("deleted_at") is not None:
            raise NotFound(f"entity {eid} was deleted at seq {at} (as of {seq})",
                           entity_id=eid, deleted_seq=at)
        return self._snapshot_entity(self._types[type_name], snap)

    # ---------------------------------------------------------------- CRUD

    def _snapshot(self, etype: EntityType, eid: str, tenant: str, version: int,
                  data: Mapping[str, Any], created_at: dt.datetime, updated_at: dt.datetime,
                  deleted_at: dt.datetime | None, text_hash: str | None,
                  plain: dict[str, Any] | None = None) -> dict[str, Any]:
        """An entity's audit snapshot (``plain``: ``jsonable(data)`` when already at hand)."""
        return {
            "id": eid, "type": etype.name, "tenant": tenant, "version": version,
            "data": jsonable(data) if plain is None else plain,
            "created_at": to_naive_utc(created_at).isoformat(),
            "updated_at": to_naive_utc(updated_at).isoformat(),
            "deleted_at": None if deleted_at is None else to_naive_utc(deleted_at).isoformat(),
            "text_hash": text_hash,
        }

    def prepare_create(self, etype: EntityType, data: Any, given_id: Any = None,
                       tenant: str = DEFAULT_TENANT) -> Prepared:
        """Validate one create: (id, model instance, data dict, text hash, data as JSON values);
        writes nothing."""
        instance = etype.validate_data(data)
        values = instance.model_dump()
        try:
            plain = jsonable(values)
        except ValueError:
            raise ValidationError("data must not contain NaN or infinite numbers",
                                  field="data") from None
        fields = etype.typedef.identity or tuple(sorted(data))
        eid = entity_id(etype.name, {f: plain[f] for f in fields}, tenant)
        if given_id is not None:
            given = check_id(given_id)
            if DERIVED_ID_RE.match(given) and given != eid and self._point_row(
                    self.db.reader(), "entity_index", "id", given, tenant) is None:
                # anyone can compute another tenant's derived ID from a fact; taking it would
                # answer 409 "not available" and reveal that the other tenant holds the fact
                raise ValidationError(
                    f"IDs of the form Type_<{ID_HASH_HEX} hex digits> are reserved for the IDs "
                    "derived from identity fields; leave id out or choose another", field="id")
            eid = given
        text = etype.embed_text(values)
        return eid, instance, values, None if text is None else sha256_hex(text), plain

    def create(self, tenant: str, type_name: str, data: Any, *, id: Any = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Create an entity, or return the existing one with the same ID (``created=False``)."""
        return self.create_many(tenant, type_name, [data], ids=[id], actor=actor, reason=reason,
                                trace_id=trace_id)[0]

    def create_many(self, tenant: str, type_name: str, rows: Sequence[Any], *,
                    ids: Sequence[Any] | None = None, actor: str | None = None,
                    reason: str | None = None, trace_id: str | None = None,
                    chunk: int = 2000,
                    progress: Callable[[int], None] | None = None) -> list[Entity]:
        """Create many entities of one type: all validated first, then written in chunks."""
        etype = self.type_of(type_name)
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        if ids is not None and len(ids) != len(rows):
            raise ValidationError("ids must be as long as rows", field="ids")
        prepared = []
        for i, data in enumerate(rows):
            try:
                prepared.append(self.prepare_create(etype, data, ids[i] if ids else None,
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
            with self.db.write() as con:
                results.extend(self._insert_batch(con, etype, tenant, part, actor, reason,
                                                  trace_id))
            if progress is not None:
                progress(len(part))
        return results

    def _insert_batch(self, con: duckdb.DuckDBPyConnection, etype: EntityType, tenant: str,
                      prepared: list[Prepared],
                      actor: str | None, reason: str | None, trace_id: str | None
                      ) -> list[Entity]:
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
        seen: dict[str, Entity] = {}
        results: list[Entity] = []
        new_rows: list[tuple[Any, ...]] = []
        events: list[tuple[Any, ...]] = []
        outbox: list[tuple[Any, ...]] = []
        seq, prev = self._seq, self._last_hash
        for eid, instance, values, text_hash, plain in prepared:
            if eid in seen:
                results.append(seen[eid].model_copy(update={"created": False}))
                continue
            if eid in existing:
                etn, erased = existing[eid]
                if etn != etype.name:
                    raise Conflict(f"ID {eid} belongs to a {etn}, not a {etype.name}",
                                   entity_id=eid)
                if erased is not None:
                    raise Conflict(f"entity {eid} was erased at seq {erased}; its ID cannot be "
                                   "reused", entity_id=eid)
                _, current = self._current(con, eid, tenant, allow_deleted=True)
                if current.deleted_at is not None:
                    raise Conflict(f"entity {eid} exists but is deleted; restore it instead",
                                   entity_id=eid)
                seen[eid] = current
                results.append(current)
                continue
            seq += 1
            snap = self._snapshot(etype, eid, tenant, 1, values, now, now, None, text_hash,
                                  plain)
            row = audit.make_event(
                seq=seq, ts=now, prev_hash=prev, tenant=tenant, op="create",
                type_name=etype.name, entity_id=eid, version_before=None, version_after=1,
                before=None, after=snap, actor=actor, reason=reason, trace_id=trace_id,
            )
            prev = row[-2]
            events.append(row)
            new_rows.append(tuple(
                [eid, tenant, 1, to_naive_utc(now), to_naive_utc(now), None, None, text_hash]
                + [bind_value(values[n]) for n in etype.fields]
            ))
            if text_hash is not None:
                outbox.append((seq, tenant, eid, etype.name, "upsert"))
            entity = Entity(id=eid, type=etype.name, tenant=tenant, version=1, data=instance,
                            created_at=now, updated_at=now, created=True)
            seen[eid] = entity
            results.append(entity)
        if not new_rows:
            return results
        self._bulk_insert(con, etype, new_rows)
        audit.insert_events(con, events)
        if outbox:
            con.executemany("INSERT INTO outbox (seq, tenant, entity_id, type, op) "
                            "VALUES (?,?,?,?,?)", outbox) if len(outbox) < 8 else \
                self._arrow_insert(con, "outbox (seq, tenant, entity_id, type, op)",
                                   ["seq", "tenant", "entity_id", "type", "op"], outbox)
            self.db.after_commit(lambda: self._notify(outbox))
        seq_before, hash_before = self._seq, self._last_hash
        self._seq, self._last_hash = seq, prev
        self.db.on_rollback(lambda: self._reset_chain(seq_before, hash_before))
        for new_row in new_rows:
            self._after_write(con, tenant, "create", etype.name, new_row[0])
        return results

    def _arrow_insert(self, con: duckdb.DuckDBPyConnection, target: str, columns: list[str],
                      rows: list[tuple[Any, ...]]) -> None:
        import pyarrow as pa

        table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
        con.register("_batch", table)
        try:
            con.execute(f"INSERT INTO {target} SELECT * FROM _batch")
        finally:
            con.unregister("_batch")

    def _bulk_insert(self, con: duckdb.DuckDBPyConnection, etype: EntityType,
                     rows: list[tuple[Any, ...]]) -> None:
        index_rows = [(r[0], etype.name, r[1], None) for r in rows]
        if len(rows) < 8:
            marks = ",".join("?" * len(rows[0]))
            con.executemany(f"INSERT INTO {table_name(etype.name)} VALUES ({marks})", rows)
            con.executemany("INSERT INTO entity_index VALUES (?, ?, ?, ?)", index_rows)
            return
        import pyarrow as pa

        columns = list(SYSTEM_COLUMNS) + list(etype.fields)
        arrays = {}
        for i, col in enumerate(columns):
            values = [r[i] for r in rows]
            if all(v is None for v in values):
                arrays[col] = pa.nulls(len(values))
            else:
                arrays[col] = pa.array(values)
        con.register("_batch", pa.table(arrays))
        try:
            casts = ", ".join(
                [f"CAST({q(c)} AS {t})" for c, t in zip(
                    SYSTEM_COLUMNS,
                    ["VARCHAR", "VARCHAR", "INTEGER", "TIMESTAMP", "TIMESTAMP", "TIMESTAMP",
                     "BIGINT", "VARCHAR"], strict=True)]
                + [f"CAST({q(n)} AS {_sqlt(s)})" for n, s in etype.fields.items()]
            )
            con.execute(f"INSERT INTO {table_name(etype.name)} SELECT {casts} FROM _batch")
        finally:
            con.unregister("_batch")
        self._arrow_insert(con, "entity_index", ["id", "type", "tenant", "erased_seq"],
                           index_rows)

    def get(self, tenant: str, eid: Any, as_of: AsOf = None) -> Entity:
        """The entity now, or as it was at ``as_of``; NotFound if missing, deleted or erased."""
        seq = self.resolve_as_of(as_of)
        if seq is not None:
            return self._get_as_of(eid, tenant, seq)
        return self._current(self.db.reader(), eid, tenant)[1]

    def get_many(self, tenant: str, type_name: str, ids: Sequence[str]) -> dict[str, Entity]:
        """The live (not deleted) entities of one type among ``ids``, by ID."""
        etype = self.type_of(type_name)
        found: dict[str, Entity] = {}
        con = self.db.reader()
        for i in range(0, len(ids), 1000):
            part = list(ids[i:i + 1000])
            if not part:
                continue
            marks = ",".join("?" * len(part))
            for row in con.execute(
                f"SELECT {self._select_cols(etype)} FROM {table_name(etype.name)} "
                f"WHERE tenant = ? AND deleted_at IS NULL AND id IN ({marks})",
                [tenant, *part],
            ).fetchall():
                entity = self._row_to_entity(etype, row)
                found[entity.id] = entity
        return found

    def _update(self, tenant: str, eid: Any, op: str, expected_version: Any,
                compute: Callable[[EntityType, Entity], dict[str, Any]],
                actor: str | None, reason: str | None, trace_id: str | None) -> Entity:
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        check_expected_version(expected_version)
        with self.db.write() as con:
            etype, current = self._current(con, eid, tenant, allow_deleted=op == "restore")
            if expected_version is not None and expected_version != current.version:
                raise VersionConflict(
                    f"{eid} is at version {current.version}, not {expected_version}",
                    entity_id=eid, current_version=current.version,
                    expected_version=expected_version,
                )
            old_values = current.fields()
            new_values = compute(etype, current)
            deleted_at = current.deleted_at
            if op == "delete":
                deleted_at = utcnow()
            elif op == "restore":
                if current.deleted_at is None:
                    raise Conflict(f"entity {eid} is not deleted", entity_id=eid)
                deleted_at = None
            elif new_values == old_values:
                return current
            now = utcnow()
            text = etype.embed_text(new_values)
            text_hash = None if text is None else sha256_hex(text)
            version = current.version + 1
            before = self._snapshot(etype, eid, tenant, current.version, old_values,
                                    current.created_at, current.updated_at, current.deleted_at,
                                    self._text_hash(con, etype, eid, tenant))
            after = self._snapshot(etype, eid, tenant, version, new_values, current.created_at,
                                   now, deleted_at, text_hash)
            seq = self._next_event(
                con, tenant=tenant, op=op, type_name=etype.name, entity_id=eid,
                version_before=current.version, version_after=version, before=before,
                after=after, actor=actor, reason=reason, trace_id=trace_id,
            )
            self._mark_modified(etype.name)
            sets = ", ".join(f"{q(n)} = ?" for n in etype.fields)
            match, match_params = self._row_match(con, table_name(etype.name), eid, tenant)
            con.execute(
                f"UPDATE {table_name(etype.name)} SET version = ?, updated_at = ?, "
                f"deleted_at = ?, deleted_seq = ?, text_hash = ?, {sets} WHERE {match}",
                [version, to_naive_utc(now), None if deleted_at is None else
                 to_naive_utc(deleted_at), seq if op == "delete" else None, text_hash,
                 *[bind_value(new_values[n]) for n in etype.fields], *match_params],
            )
            if text_hash is not None or before["text_hash"] is not None:
                self._outbox(con, seq, tenant, eid, etype.name,
                             "delete" if op == "delete" or text_hash is None else "upsert")
            self._after_write(con, tenant, op, etype.name, eid)
            return Entity(
                id=eid, type=etype.name, tenant=tenant, version=version,
                data=etype.model.model_validate(new_values), created_at=current.created_at,
                updated_at=now, deleted_at=deleted_at,
            )

    def _text_hash(self, con: duckdb.DuckDBPyConnection, etype: EntityType, eid: str,
                   tenant: str) -> str | None:
        row = self._point_row(con, table_name(etype.name), "text_hash", eid, tenant)
        return None if row is None else row[0]

    def update(self, tenant: str, eid: Any, changes: Any, *, expected_version: Any = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Apply field changes; bumps the version (a no-op change returns the entity as is)."""
        if not isinstance(changes, Mapping) or not changes:
            raise ValidationError("changes must be a non-empty object of fields",
                                  field="changes")

        def compute(etype: EntityType, current: Entity) -> dict[str, Any]:
            merged = {**current.fields(), **changes}
            return etype.validate_data(merged, where="changes").model_dump()

        return self._update(tenant, eid, "update", expected_version, compute, actor, reason,
                            trace_id)

    def append(self, tenant: str, eid: Any, field: Any, values: Any, *,
               expected_version: Any = None, actor: str | None = None,
               reason: str | None = None, trace_id: str | None = None) -> Entity:
        """Append values to a list field atomically."""
        if not isinstance(values, list) or not values:
            raise ValidationError("values must be a non-empty list", field="values")

        def compute(etype: EntityType, current: Entity) -> dict[str, Any]:
            if not isinstance(field, str) or field not in etype.fields:
                raise ValidationError(f"{etype.name} has no field {field!r}", field="field")
            if etype.fields[field].type != "list":
                raise ValidationError(f"{etype.name}.{field} is not a list field", field="field")
            merged = current.fields()
            merged[field] = list(merged.get(field) or []) + list(values)
            return etype.validate_data(merged, where="values").model_dump()

        return self._update(tenant, eid, "append", expected_version, compute, actor, reason,
                            trace_id)

    def delete(self, tenant: str, eid: Any, *, expected_version: Any = None,
               actor: str | None = None, reason: str | None = None,
               trace_id: str | None = None) -> Entity:
        """Soft-delete: hidden from reads, restorable, visible to ``as_of`` before it."""
        return self._update(tenant, eid, "delete", expected_version,
                            lambda _t, cur: cur.fields(), actor, reason, trace_id)

    def restore(self, tenant: str, eid: Any, *, expected_version: Any = None,
                actor: str | None = None, reason: str | None = None,
                trace_id: str | None = None) -> Entity:
        """Undo a soft delete."""
        return self._update(tenant, eid, "restore", expected_version,
                            lambda _t, cur: cur.fields(), actor, reason, trace_id)

    def erase(self, tenant: str, eid: Any, *, actor: str | None = None,
              reason: str | None = None, trace_id: str | None = None) -> int:
        """Remove an entity's content everywhere (row, snapshots, links); returns the event seq."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        with self.db.write() as con:
            etype, erased_seq = self._lookup(con, eid, tenant)
            if erased_seq is not None:
                raise NotFound(f"entity {eid} was erased at seq {erased_seq}", entity_id=eid)
            version = self._point_row(con, table_name(etype.name), "version", eid, tenant)
            hashes = [r[0] for r in con.execute(
                "SELECT DISTINCT json_extract_string(after, '$.text_hash') FROM events_all "
                "WHERE entity_id = ? AND tenant = ? AND after IS NOT NULL", [eid, tenant],
            ).fetchall() if r[0]]
            seq = self._next_event(
                con, tenant=tenant, op="erase", type_name=etype.name, entity_id=eid,
                version_before=version[0] if version else None, version_after=None,
                before=None, after=None, actor=actor, reason=reason, trace_id=trace_id,
            )
            con.execute("UPDATE events SET before = NULL, after = NULL, redacted = TRUE "
                        "WHERE entity_id = ? AND tenant = ? AND seq < ? AND op IN "
                        f"{ENTITY_OPS!r}", [eid, tenant, seq])
            self._mark_modified(etype.name)
            match, params = self._row_match(con, table_name(etype.name), eid, tenant)
            con.execute(f"DELETE FROM {table_name(etype.name)} WHERE {match}", params)
            match, params = self._row_match(con, "entity_index", eid, tenant)
            con.execute(f"UPDATE entity_index SET erased_seq = ? WHERE {match}", [seq, *params])
            con.execute("UPDATE relations SET deleted_seq = ? WHERE tenant = ? AND "
                        "deleted_seq IS NULL AND (from_id = ? OR to_id = ?)",
                        [seq, tenant, eid, eid])
            for text_hash in hashes:
                if not self._hash_in_use(con, text_hash):
                    con.execute("DELETE FROM embeddings WHERE text_hash = ?", [text_hash])
            self._outbox(con, seq, tenant, eid, etype.name, "delete")
            self._after_write(con, tenant, "erase", etype.name, eid)
            return seq

    def _hash_in_use(self, con: duckdb.DuckDBPyConnection, text_hash: str) -> bool:
        for etype in self._types.values():
            if con.execute(f"SELECT 1 FROM {table_name(etype.name)} WHERE text_hash = ? LIMIT 1",
                           [text_hash]).fetchone():
                return True
        return False

    # ---------------------------------------------------------------- query

    def query(self, tenant: str, type_name: str, where: Any = None, order_by: Any = None,
              limit: Any = 50, cursor: Any = None, as_of: AsOf = None,
              max_limit: int = 1000) -> Page:
        """One page of a type's entities matching ``where``, in a deterministic order."""
        etype = self.type_of(type_name)
        node = parse_filter(etype, where)
        order = parse_order(etype, order_by)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
            raise ValidationError(f"limit must be an integer from 1 to {max_limit}",
                                  field="limit")
        if cursor is not None and not isinstance(cursor, str):
            raise FilterError("cursor must be a string", field="cursor")
        seq = self.resolve_as_of(as_of)
        fingerprint = query_fingerprint(etype.name, where, order, seq)
        params: list[Any] = []
        source = self.source_sql(etype, tenant, seq, params)
        clauses = [compile_filter(node, params)]
        if cursor:
            values, last_id = decode_cursor(cursor, fingerprint)
            clauses.append(keyset_sql(etype, order, values, last_id, params))
        sql = (f"SELECT {self._select_cols(etype)} FROM {source} WHERE "
               + " AND ".join(clauses) + f" {order_sql(order)} LIMIT {limit + 1}")
        rows = self.db.fetchall(sql, params)
        items = [self._row_to_entity(etype, r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            sys_values = {"created_at": last.created_at, "updated_at": last.updated_at,
                          "version": last.version}
            fields = last.fields()
            values = [sys_values[n] if n in sys_values else fields[n] for n, _ in order]
            next_cursor = encode_cursor(fingerprint, [bind_value(v) for v in values], last.id)
        return Page(items=items, next_cursor=next_cursor, as_of_seq=seq)

    def source_sql(self, etype: EntityType, tenant: str, seq: int | None,
                   params: list[Any]) -> str:
        """A FROM-clause source of the type's live rows now, or at seq (rebuilt from the log)."""
        if seq is None:
            params.append(tenant)
            return (f"(SELECT * FROM {table_name(etype.name)} WHERE tenant = ? "
                    "AND deleted_at IS NULL) AS t")
        return as_of_table_sql(etype, tenant, seq, params)

    def count(self, tenant: str, type_name: str, where: Any = None,
              as_of: AsOf = None) -> int:
        """How many live entities of a type match ``where``."""
        etype = self.type_of(type_name)
        node = parse_filter(etype, where)
        params: list[Any] = []
        source = self.source_sql(etype, tenant, self.resolve_as_of(as_of), params)
        sql = f"SELECT count(*) FROM {source} WHERE {compile_filter(node, params)}"
        row = self.db.fetchone(sql, params)
        return int(row[0]) if row else 0

    # ---------------------------------------------------------------- relations

    def link(self, tenant: str, from_id: Any, relation: Any, to_id: Any, *,
             actor: str | None = None, reason: str | None = None,
             trace_id: str | None = None) -> bool:
        """Link two entities; False if already linked (idempotent)."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        with self.db.write() as con:
            from_type, spec = self._relation_spec(con, tenant, from_id, relation)
            try:
                to_type, _ = self._current(con, to_id, tenant)
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
            seq = self._next_event(
                con, tenant=tenant, op="link", type_name=from_type.name, entity_id=from_id,
                version_before=None, version_after=None, before=None, after=link, actor=actor,
                reason=reason, trace_id=trace_id, meta=link,
            )
            con.execute("INSERT INTO relations VALUES (?, ?, ?, ?, ?, NULL)",
                        [tenant, from_id, relation, to_id, seq])
            self._after_write(con, tenant, "link", from_type.name, from_id)
            return True

    def _relation_spec(self, con: duckdb.DuckDBPyConnection, tenant: str, from_id: Any,
                       relation: Any, verb: str = "link") -> tuple[EntityType, Any]:
        try:
            from_type, _ = self._current(con, from_id, tenant)
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
               trace_id: str | None = None) -> int:
        """Remove a link; returns the event seq; NotFound if the link does not exist."""
        actor, reason, trace_id = check_audit(actor, reason, trace_id)
        check_id(to_id, "to_id")
        with self.db.write() as con:
            from_type, _ = self._relation_spec(con, tenant, from_id, relation, "unlink")
            row = con.execute(
                "SELECT created_seq FROM relations WHERE tenant = ? AND from_id = ? AND "
                "relation = ? AND to_id = ? AND deleted_seq IS NULL",
                [tenant, from_id, relation, to_id]).fetchone()
            if row is None:
                raise NotFound(f"{from_id} is not linked to {to_id} by {relation}",
                               field="to_id")
            link = {"from": from_id, "relation": relation, "to": to_id}
            seq = self._next_event(
                con, tenant=tenant, op="unlink", type_name=from_type.name, entity_id=from_id,
                version_before=None, version_after=None, before=link, after=None, actor=actor,
                reason=reason, trace_id=trace_id, meta=link,
            )
            con.execute("UPDATE relations SET deleted_seq = ? WHERE tenant = ? AND from_id = ? "
                        "AND relation = ? AND to_id = ? AND deleted_seq IS NULL",
                        [seq, tenant, from_id, relation, to_id])
            self._after_write(con, tenant, "unlink", from_type.name, from_id)
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
        if direction not in ("out", "in", "both"):
            raise ValidationError("direction must be 'out', 'in' or 'both'", field="direction")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ValidationError(f"depth must be an integer from 1 to {MAX_DEPTH}",
                                  field="depth")
        if relation is not None and not isinstance(relation, str):
            raise ValidationError("relation must be a relation name", field="relation")
        seq = self.resolve_as_of(as_of)
        self.get(tenant, eid, as_of=seq)
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
                    entity = self.get(tenant, other, as_of=seq)
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

    # ---------------------------------------------------------------- audit

    def history(self, tenant: str, eid: Any) -> list[AuditEvent]:
        """Every event of an entity (including links), oldest first."""
        eid = check_id(eid, "entity_id")
        rows = self.db.fetchall(
            f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} WHERE tenant = ? AND "
            "(entity_id = ? OR json_extract_string(meta, '$.to') = ?) ORDER BY seq",
            [tenant, eid, eid])
        if not rows:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        return [audit.row_to_event(r) for r in rows]

    def events(self, tenant: str | None, since_seq: int = 0, until_seq: int | None = None,
               limit: int = 1000) -> list[AuditEvent]:
        """Events with since_seq < seq <= until_seq, oldest first (one tenant, or all)."""
        check_seq_bounds(since_seq=since_seq, until_seq=until_seq, limit=limit)
        params: list[Any] = [since_seq]
        sql = f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} WHERE seq > ?"
        if until_seq is not None:
            sql += " AND seq <= ?"
            params.append(until_seq)
        if tenant is not None:
            sql += " AND tenant = ?"
            params.append(tenant)
        sql += f" ORDER BY seq LIMIT {int(limit)}"
        return [audit.row_to_event(r) for r in self.db.fetchall(sql, params)]

    def verify_audit(self) -> AuditReport:
        """Check the whole hash chain; names the first bad seq."""
        with self.db.no_writes():  # the reads below see exactly the chain up to self._seq
            last_written = self._seq
            erased = {(t, e) for t, e in self.db.fetchall(
                f"SELECT tenant, entity_id FROM {EVENTS_ALL} WHERE op = 'erase'")}
            cur = self.db.reader().execute(
                f"SELECT {', '.join(audit.EVENT_COLUMNS)} FROM {EVENTS_ALL} ORDER BY seq")

        def rows() -> Iterable[tuple[Any, ...]]:
            while True:
                batch = cur.fetchmany(5000)
                if not batch:
                    return
                yield from batch

        report = audit.verify_rows(rows(), erased=erased)
        if report.ok and report.last_seq != last_written:
            # a consistent chain that ends too early (or late): events were cut off the end
            return report.model_copy(update={
                "ok": False, "first_bad_seq": min(report.last_seq, last_written) + 1,
                "problem": f"the log ends at seq {report.last_seq} but this store wrote up "
                           f"to seq {last_written} (events were removed or added at the end)"})
        return report

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    @property
    def reconcile_pending(self) -> bool:
        """Whether a store migration changed how vectors are keyed, so that the vector index
        must be reconciled with DuckDB (see :meth:`reconciled`)."""
        return self.db.fetchone("SELECT 1 FROM meta WHERE key = ?",
                                [RECONCILE_PENDING]) is not None

    def reconciled(self) -> None:
        """Record that the vector index was reconciled with DuckDB after a migration."""
        if self.reconcile_pending:
            with self.db.write() as con:
                con.execute("DELETE FROM meta WHERE key = ?", [RECONCILE_PENDING])

    def record_embedding_model(self, model_id: str, dim: int, *, tenant: str,
                               actor: str | None = None) -> str | None:
        """Remember the embedding model in use; the previous model's ID if it changed.

        A change appends one audit event with op "reindex" (before / after name the models),
        so the re-embedding that follows is audited; the first model is recorded silently.
        """
        row = self.db.fetchone("SELECT value FROM meta WHERE key = 'embedding_model'")
        if row is not None and row[0] == model_id:
            return None
        with self.db.write() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
            previous = None if row is None else str(row[0])
            if previous == model_id:
                return None
            con.execute("INSERT INTO meta VALUES ('embedding_model', ?) ON CONFLICT (key) "
                        "DO UPDATE SET value = excluded.value", [model_id])
            if previous is None:
                return None
            self._next_event(
                con, tenant=tenant, op="reindex", type_name=None, entity_id=None,
                version_before=None, version_after=None, before={"model_id": previous},
                after={"model_id": model_id, "dim": dim}, actor=actor,
                reason="embedding model changed", trace_id=None,
                meta={"from": previous, "to": model_id, "dim": dim},
            )
            return previous


def _aware_datetimes(etype: EntityType, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its datetime values (stored as naive UTC) made timezone-aware UTC."""

    def aware(value: Any) -> Any:
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        return to_aware_utc(value)

    for name, spec in etype.fields.items():
        value = data.get(name)
        if value is None:
            continue
        if spec.type == "datetime":
            data[name] = aware(value)
        elif spec.type == "list" and spec.item == "datetime":
            data[name] = [None if v is None else aware(v) for v in value]
    return data


def _sqlt(spec: Any) -> str:
    from .sql import sql_type

    return sql_type(spec)
