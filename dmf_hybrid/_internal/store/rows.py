"""Reading entity rows: point lookups by (tenant, ID), rows as Entities, the current state.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ..checks import (
    check_id,
)
from ..clock import to_aware_utc, utcnow
from ..errors import (
    NotFound,
)
from ..ids import canonical_json
from ..models import Entity
from ..schema import EntityType
from .expiry import expired, live_sql
from .registry import TypeRegistry
from .sql import (
    field_values,
    q,
)
from .tables import (
    SYSTEM_COLUMNS,
    table_name,
)
from .txn import Connection, Transactions

#: Where a row of :data:`SYSTEM_COLUMNS` then the fields keeps each system column.
_ID_AT, _TENANT_AT, _VERSION_AT, _CREATED_AT, _UPDATED_AT, _DELETED_AT, _EXPIRES_AT = (
    SYSTEM_COLUMNS.index(c)
    for c in ("id", "tenant", "version", "created_at", "updated_at", "deleted_at",
              "_expires_at"))
_FIELDS_AT = len(SYSTEM_COLUMNS)


#: Entities validated a list at a time (:meth:`RowReader.rows_to_entities`).
_ENTITIES: TypeAdapter[list[Entity]] = TypeAdapter(list[Entity])


@functools.lru_cache(maxsize=256)
def _data_list(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    """A validator of a list of one type's data (made once per model class)."""
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def _row_data(etype: EntityType, row: Sequence[Any]) -> dict[str, Any]:
    """The fields of an entity row as its type's model takes them."""
    return aware_datetimes(etype, field_values(etype, row[_FIELDS_AT:]))


def _entity_fields(etype: EntityType, row: Sequence[Any], data: Any, created: bool = False
                   ) -> dict[str, Any]:
    """What an Entity is made of: a row's system columns and its validated ``data``."""
    return {"id": row[_ID_AT], "type": etype.name, "tenant": row[_TENANT_AT],
            "version": row[_VERSION_AT], "data": data,
            "created_at": to_aware_utc(row[_CREATED_AT]),
            "updated_at": to_aware_utc(row[_UPDATED_AT]),
            "deleted_at": to_aware_utc(row[_DELETED_AT]),
            "expires_at": to_aware_utc(row[_EXPIRES_AT]), "created": created}


def jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    """Data as plain JSON values (UTC ISO datetimes), as snapshots store it."""
    return dict(json.loads(canonical_json(dict(data))))


def aware_datetimes(etype: EntityType, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its datetime values (stored as naive UTC) made timezone-aware UTC."""

    def aware(value: Any) -> Any:
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        return to_aware_utc(value)

    for name, many in etype.datetime_fields:
        value = data.get(name)
        if value is None:
            continue
        data[name] = [None if v is None else aware(v) for v in value] if many else aware(value)
    return data


@dataclass(eq=False)
class RowReader:
    """Reading entity rows: point lookups by (tenant, ID), rows as Entities."""

    db: Transactions
    registry: TypeRegistry

    def select_cols(self, etype: EntityType) -> str:
        return ", ".join(list(SYSTEM_COLUMNS) + [q(n) for n in etype.fields])

    def row_to_entity(self, etype: EntityType, row: Sequence[Any], created: bool = False
                       ) -> Entity:
        data = etype.model.model_validate(_row_data(etype, row))
        return Entity(**_entity_fields(etype, row, data, created))

    def rows_to_entities(self, etype: EntityType, rows: Sequence[Sequence[Any]]
                         ) -> list[Entity]:
        """:meth:`row_to_entity` of each of ``rows``: the same entities, validated in two calls
        (the rows' data, then the entities) rather than two a row."""
        datas = _data_list(etype.model).validate_python([_row_data(etype, r) for r in rows])
        return _ENTITIES.validate_python([_entity_fields(etype, row, data)
                                          for row, data in zip(rows, datas, strict=True)])

    @staticmethod
    def point_row(con: Connection, table: str, cols: str, eid: str,
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
    def row_match(con: Connection, table: str, eid: str, tenant: str
                  ) -> tuple[str, list[Any]]:
        """A WHERE condition (and its parameters) for this tenant's row of ``eid`` in a table.

        `id = ?` alone when no other tenant has a row with that ID (DuckDB answers it from the
        id index); `id = ? AND tenant = ?`, which scans, only when one does.
        """
        tenants = con.execute(f"SELECT tenant FROM {table} WHERE id = ?", [eid]).fetchall()
        if all(t == tenant for (t,) in tenants):
            return "id = ?", [eid]
        return "id = ? AND tenant = ?", [eid, tenant]

    def read_live(self, con: Connection, etype: EntityType, eid: str,
                  tenant: str) -> Entity | None:
        row = self.point_row(con, table_name(etype.key), self.select_cols(etype), eid, tenant)
        return None if row is None else self.row_to_entity(etype, row)

    def lookup(self, con: Connection, eid: Any, tenant: str) -> tuple[
            EntityType, int | None]:
        """The type and erasure seq of an ID in this tenant, or NotFound."""
        eid = check_id(eid, "entity_id")
        row = self.point_row(con, "entity_index", "type, erased_seq", eid, tenant)
        if row is not None:  # a shared engine: another process may have defined or migrated
            self.db.sync()  # its type since this one last followed the log
        etype = None if row is None else self.registry.get(row[0], tenant)
        if row is None or etype is None:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        return etype, row[1]

    def current(self, con: Connection, eid: Any, tenant: str,
                allow_deleted: bool = False, allow_expired: bool = False
                ) -> tuple[EntityType, Entity]:
        """The type and current row of an ID; NotFound if it is missing, erased, or (unless
        ``allow_deleted``) deleted, or (unless either flag) expired."""
        etype, erased_seq = self.lookup(con, eid, tenant)
        if erased_seq is not None:
            raise NotFound(f"entity {eid} was erased at seq {erased_seq}", entity_id=eid,
                           erased_seq=erased_seq)
        entity = self.read_live(con, etype, eid, tenant)
        if entity is None:
            raise NotFound(f"no entity {eid}", entity_id=eid)
        if entity.deleted_at is not None and not allow_deleted:
            dseq = self.point_row(con, table_name(etype.key), "deleted_seq", eid, tenant)
            raise NotFound(f"entity {eid} was deleted at seq {dseq[0] if dseq else '?'}",
                           entity_id=eid, deleted_seq=dseq[0] if dseq else None)
        if not (allow_deleted or allow_expired) and expired(entity.expires_at, utcnow()):
            raise expired_error(entity)
        return etype, entity

    def get_many(self, tenant: str, type_name: str, ids: Sequence[str]) -> dict[str, Entity]:
        """The live (not deleted, not expired) entities of one type among ``ids``, by ID."""
        etype = self.registry.type_of(type_name, tenant, define_bundled=False)
        found: dict[str, Entity] = {}
        con = self.db.reader()
        now = utcnow()
        for i in range(0, len(ids), 1000):
            part = list(ids[i:i + 1000])
            if not part:
                continue
            marks = ",".join("?" * len(part))
            params: list[Any] = [tenant]
            live = live_sql(params, now)
            for row in con.execute(
                f"SELECT {self.select_cols(etype)} FROM {table_name(etype.key)} "
                f"WHERE tenant = ? AND {live} AND id IN ({marks})",
                [*params, *part],
            ).fetchall():
                entity = self.row_to_entity(etype, row)
                found[entity.id] = entity
        return found


def expired_error(entity: Entity) -> NotFound:
    """The NotFound of an entity read after its expiry."""
    assert entity.expires_at is not None
    at = entity.expires_at.isoformat()
    return NotFound(f"entity {entity.id} expired at {at}", entity_id=entity.id, expired_at=at)
