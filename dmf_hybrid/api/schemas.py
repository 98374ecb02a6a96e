"""Request and response bodies of the HTTP API (separate Create / Update / Public models)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..models import Entity, Related
from ..schema import EntityType, TypeDef
from ..search.results import LegScore, Receipt, SearchResult

MAX_SEQ = 2**63 - 1
AsOfBody = Annotated[int, Field(ge=0, le=MAX_SEQ)] | dt.datetime | None
AS_OF_DOC = "Read as of an audit seq (integer) or an ISO-8601 UTC time; omitted = now."


class Request(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- errors


class ErrorBody(BaseModel):
    """Every error response: a stable code, a message and details (``field`` names the input)."""

    error: str = Field(examples=["validation_error"])
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------- types


class TypePublic(BaseModel):
    """A registered entity type: its name, registry version and definition."""

    name: str
    version: int
    definition: TypeDef

    @classmethod
    def of(cls, etype: EntityType) -> TypePublic:
        """The public form of an EntityType."""
        return cls(name=etype.name, version=etype.version, definition=etype.typedef)


# ---------------------------------------------------------------- entities


class EntityCreate(Request):
    """Create an entity of the path's type; ``id`` is optional (default: from identity)."""

    data: dict[str, Any] = Field(description="The entity's fields as a JSON object.")
    id: str | None = Field(None, description="A caller-chosen ID instead of the derived one.")


class EntityBatchCreate(Request):
    """Create many entities of the path's type in one request."""

    rows: list[dict[str, Any]]


class EntityUpdate(Request):
    """Change some fields of an entity (send ``If-Match: "<version>"`` to guard the write)."""

    data: dict[str, Any] = Field(description="Fields to change, as a JSON object.")


class EntityAppend(Request):
    """Append values to a list field atomically."""

    field: str
    values: list[Any]


class EntityQuery(Request):
    """A structured query: filter, order, page size, cursor and time travel."""

    where: dict[str, Any] | None = Field(None, description='Filter, e.g. {"city": "Shanghai"}.')
    order_by: str | list[str] | None = Field(None, description='"field" or "-field" (desc).')
    limit: int = Field(50, description="Page size.")
    cursor: str | None = Field(None, description="next_cursor of the previous page.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class EntityCount(Request):
    """Count the entities of a type matching a filter."""

    where: dict[str, Any] | None = None
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class EntityPublic(BaseModel):
    """An entity as stored: identity, version (also its ETag), timestamps and its data."""

    id: str
    type: str
    tenant: str
    version: int
    data: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    deleted_at: dt.datetime | None = None
    created: bool = False

    @classmethod
    def of(cls, entity: Entity) -> EntityPublic:
        """The public form of an Entity (data as JSON values)."""
        dumped = entity.model_dump(mode="json")
        return cls.model_validate(dumped)


class PagePublic(BaseModel):
    """One page of entities and the cursor of the next page (null: last page)."""

    items: list[EntityPublic]
    next_cursor: str | None = None
    as_of_seq: int | None = None


class CountPublic(BaseModel):
    """How many entities matched."""

    count: int


class SeqPublic(BaseModel):
    """The audit seq of the event an operation wrote."""

    seq: int


# ---------------------------------------------------------------- relations


class LinkRequest(Request):
    """A link ``from_id --relation--> to_id``."""

    from_id: str
    relation: str
    to_id: str


class LinkPublic(BaseModel):
    """Whether the link is new (false: it already existed)."""

    linked: bool


class RelatedPublic(BaseModel):
    """An entity reached by a relation, with the step that reached it."""

    relation: str
    direction: str
    depth: int
    from_id: str
    entity: EntityPublic

    @classmethod
    def of(cls, item: Related) -> RelatedPublic:
        """The public form of a Related."""
        return cls(relation=item.relation, direction=item.direction, depth=item.depth,
                   from_id=item.from_id, entity=EntityPublic.of(item.entity))


# ---------------------------------------------------------------- search


class SearchRequest(Request):
    """A similarity search over one type, with the options of ``Memory.search``."""

    type: str = Field(description="Entity type to search.")
    text: str | None = Field(None, description="Query text.")
    where: dict[str, Any] | None = Field(None, description="Structured filter (exact, in DuckDB).")
    k: int = Field(10, description="How many hits.")
    mode: str = Field("hybrid", description='"hybrid", "vector" or "keyword".')
    related_to: dict[str, Any] | None = Field(
        None, description='Only entities linked: {"relation": r, "from": id, "direction": "out"}.')
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class HitPublic(BaseModel):
    """One hit: the entity resolved from DuckDB, its fused score and per-leg rank and score."""

    entity: EntityPublic
    score: float
    legs: dict[str, LegScore] = Field(default_factory=dict)


class SearchPublic(BaseModel):
    """Hits in a deterministic order and the retrieval receipt."""

    hits: list[HitPublic]
    receipt: Receipt

    @classmethod
    def of(cls, result: SearchResult) -> SearchPublic:
        """The public form of a SearchResult."""
        return cls(hits=[HitPublic(entity=EntityPublic.of(h.entity), score=h.score, legs=h.legs)
                         for h in result.hits], receipt=result.receipt)


# ---------------------------------------------------------------- audit & admin


class HeadPublic(BaseModel):
    """The audit seq of the newest event."""

    last_seq: int


class SnapshotRequest(Request):
    """Export the database to ``<data_dir>/snapshots/<name>``."""

    name: str = Field(description="Letters, digits, '.', '_' and '-'; no path separators.")


class CountsPublic(BaseModel):
    """What a maintenance operation did, as named counts."""

    model_config = ConfigDict(extra="allow")


class HealthPublic(BaseModel):
    """Liveness: the process answers."""

    status: Literal["ok"] = "ok"


class ReadyPublic(BaseModel):
    """Readiness: the model is loaded and the outbox is drained."""

    ready: bool
    model_loaded: bool
    outbox_pending: int
    warming_up: bool
    problems: list[str] = Field(default_factory=list)
