"""The public result types: Entity, Page, AuditEvent, AuditReport, Related."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer


class Entity(BaseModel):
    """One entity as stored: identity, version, timestamps and its validated data."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str
    type: str
    tenant: str
    version: int
    data: Any = Field(description="The validated model instance of the entity's type.")
    created_at: dt.datetime
    updated_at: dt.datetime
    deleted_at: dt.datetime | None = None
    created: bool = Field(False, description="True when this call created the entity.")

    @field_serializer("data")
    def _dump_data(self, data: Any) -> Any:
        return data.model_dump(mode="json") if isinstance(data, BaseModel) else data

    def fields(self) -> dict[str, Any]:
        """The entity's data as a plain dict (Python values)."""
        if isinstance(self.data, BaseModel):
            return self.data.model_dump()
        return dict(self.data)


class Page(BaseModel):
    """One page of a query: entities in a deterministic order and the cursor to the next page."""

    items: list[Entity]
    next_cursor: str | None = None
    as_of_seq: int | None = Field(None, description="Audit seq the page was read at.")


class AuditEvent(BaseModel):
    """One immutable audit log entry, hash-chained to the previous one."""

    seq: int
    ts: dt.datetime
    tenant: str
    actor: str | None = None
    reason: str | None = None
    trace_id: str | None = None
    op: str
    type: str | None = None
    entity_id: str | None = None
    version_before: int | None = None
    version_after: int | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    payload_hash: str
    prev_hash: str
    hash: str
    redacted: bool = False


class AuditReport(BaseModel):
    """What verify_audit found: ok, how many events it checked, the first bad seq and why."""

    ok: bool
    events_checked: int
    first_bad_seq: int | None = None
    problem: str | None = None
    last_seq: int = 0
    last_hash: str | None = None


class Related(BaseModel):
    """An entity reached from another by a relation, with the path step that reached it."""

    relation: str
    direction: str
    depth: int
    from_id: str
    entity: Entity
