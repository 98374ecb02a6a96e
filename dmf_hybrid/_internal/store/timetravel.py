"""Time travel: state at an audit seq, rebuilt from the event log (``as_of``).

``as_of_table_sql`` is a type's rows as they were at a seq; :class:`TimeTravel` resolves
``as_of`` and reads one entity as it was.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from ..checks import (
    AsOf,
    check_as_of,
    check_id,
)
from ..clock import to_aware_utc, to_naive_utc, utcnow
from ..errors import (
    NotFound,
    ValidationError,
)
from ..models import Entity
from ..schema import EntityType
from .chain import AuditLog
from .dialect import DUCKDB, Dialect
from .expiry import expired, live_sql
from .registry import TypeRegistry
from .rows import RowReader, aware_datetimes, expired_error
from .sql import (
    bind_field,
    q,
    sql_type,
)
from .tables import (
    ENTITY_OPS,
    EVENTS_ALL,
    EXPIRES_COLUMN,
)
from .txn import Transactions

ENTITY_OPS_SQL = "('create', 'update', 'append', 'delete', 'restore', 'erase')"


def _field_expr(name: str, spec: Any, params: list[Any], dialect: Dialect) -> str:
    typ = sql_type(spec, dialect)
    if spec.type in ("list", "json", "bool"):
        expr = dialect.json_cast(dialect.json_value("after", "data", name), spec.type, spec.item)
    else:
        expr = f"CAST({dialect.json_text('after', 'data', name)} AS {typ})"
    if spec.default is None:
        return f"{expr} AS {q(name)}"
    # a field added by a later migration is missing from older snapshots: read its default
    params.append(bind_field(spec, spec.default))
    return (f"CASE WHEN {dialect.json_has('after', 'data', name)} THEN {expr} "
            f"ELSE CAST(? AS {typ}) END AS {q(name)}")


def as_of_table_sql(etype: EntityType, tenant: str, seq: int, params: list[Any],
                    dialect: Dialect = DUCKDB) -> str:
    """A FROM-clause source with the same columns as the type's table: its live rows at
    ``seq`` (an entity whose expiry had come by the time of that event is not live)."""
    fields = ", ".join(_field_expr(n, s, params, dialect) for n, s in etype.fields.items())
    params.extend([tenant, etype.name, seq])

    def text(key: str, typ: str | None = None) -> str:
        value = dialect.json_text("after", key)
        return value if typ is None else f"CAST({value} AS {typ})"

    latest = dialect.latest_per(
        "entity_id", "after, redacted", "events_all",
        f"tenant = ? AND type = ? AND seq <= ? AND op IN {ENTITY_OPS_SQL}")
    rows = f"""(SELECT
        {text('id')} AS id,
        {text('tenant')} AS tenant,
        {text('version', 'INTEGER')} AS version,
        {text('created_at', 'TIMESTAMP')} AS created_at,
        {text('updated_at', 'TIMESTAMP')} AS updated_at,
        {text('deleted_at', 'TIMESTAMP')} AS deleted_at,
        CAST(NULL AS BIGINT) AS deleted_seq,
        {text('text_hash')} AS text_hash,
        {text('expires_at', 'TIMESTAMP')} AS {EXPIRES_COLUMN},
        {fields}
      FROM ({latest}) AS latest
      WHERE NOT redacted AND after IS NOT NULL) AS r"""
    return f"(SELECT * FROM {rows} WHERE {live_sql(params, (tenant, seq))}) AS t"


@dataclass(eq=False)
class TimeTravel:
    """Reading the state as of an audit seq or a time (and now: ``get``)."""

    db: Transactions
    log: AuditLog
    registry: TypeRegistry
    rows: RowReader

    def resolve_as_of(self, tenant: str, as_of: AsOf) -> int | None:
        """The tenant's audit seq an ``as_of`` (seq or datetime) stands for; None means now.

        A seq past the tenant's newest committed event, or a time still to come, is refused:
        a read pinned there could change later.
        """
        as_of = check_as_of(as_of)
        if as_of is None:
            return None
        if isinstance(as_of, int):
            head = self.log.committed_head(tenant)
            if as_of > head and not self.db.in_transaction:
                self.db.sync()  # another process may have committed it
                head = self.log.committed_head(tenant)
            if as_of > head:
                raise ValidationError(f"as_of {as_of} is past the newest event (seq {head}); "
                                      "pin a read to a seq that exists, or leave as_of out "
                                      "to read now", field="as_of")
            return as_of
        when = to_naive_utc(as_of)
        if when > to_naive_utc(utcnow()) and not self._stamped_since(when):
            raise ValidationError(f"as_of {as_of.isoformat()} is in the future; pin a read to a "
                                  "time that has passed, or leave as_of out to read now",
                                  field="as_of")
        row = self.db.fetchone(f"SELECT coalesce(max(seq), 0) FROM {EVENTS_ALL} "
                               "WHERE tenant = ? AND ts <= ?", [tenant, to_naive_utc(as_of)])
        return int(row[0]) if row else 0

    def _stamped_since(self, when: dt.datetime) -> bool:
        """Whether an event is stamped at ``when`` or later (a clock that ran ahead)."""
        row = self.db.fetchone(f"SELECT max(ts) FROM {EVENTS_ALL}")
        return bool(row and row[0] is not None and row[0] >= when)

    def _snapshot_entity(self, etype: EntityType, snap: dict[str, Any]) -> Entity:
        data = aware_datetimes(etype, {k: v for k, v in snap["data"].items()
                                        if k in etype.fields})
        expires = snap.get("expires_at")
        return Entity(
            id=snap["id"], type=etype.name, tenant=snap["tenant"], version=snap["version"],
            data=etype.model.model_validate(data),
            created_at=to_aware_utc(dt.datetime.fromisoformat(snap["created_at"])),
            updated_at=to_aware_utc(dt.datetime.fromisoformat(snap["updated_at"])),
            deleted_at=None,
            expires_at=None if expires is None else to_aware_utc(
                dt.datetime.fromisoformat(expires)),
        )

    def _get_as_of(self, eid: Any, tenant: str, seq: int) -> Entity:
        eid = check_id(eid, "entity_id")
        row = self.db.fetchone(
            f"SELECT type, after, redacted, op, seq FROM {EVENTS_ALL} WHERE entity_id = ? "
            "AND tenant = ? "
            f"AND seq <= ? AND op IN {ENTITY_OPS!r} ORDER BY seq DESC LIMIT 1",
            [eid, tenant, seq],
        )
        if row is None or self.registry.get(row[0], tenant) is None:
            raise NotFound(f"no entity {eid} at seq {seq}", entity_id=eid, as_of=seq)
        type_name, after, redacted, _op, at = row
        if redacted or after is None:
            raise NotFound(f"entity {eid} was erased", entity_id=eid)
        snap = json.loads(after)
        if snap.get("deleted_at") is not None:
            raise NotFound(f"entity {eid} was deleted at seq {at} (as of {seq})",
                           entity_id=eid, deleted_seq=at)
        entity = self._snapshot_entity(self.registry.type_of(type_name, tenant), snap)
        if entity.expires_at is not None:
            when = self.db.fetchone(f"SELECT ts FROM {EVENTS_ALL} WHERE tenant = ? AND seq = ?",
                                    [tenant, seq])
            if when is None or expired(entity.expires_at, when[0]):
                raise expired_error(entity)
        return entity

    def get(self, tenant: str, eid: Any, as_of: AsOf = None) -> Entity:
        """The entity now, or as it was at ``as_of``; NotFound if missing, deleted or erased."""
        seq = self.resolve_as_of(tenant, as_of)
        if seq is not None:
            return self._get_as_of(eid, tenant, seq)
        return self.rows.current(self.db.reader(), eid, tenant)[1]
