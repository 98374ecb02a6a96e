"""The public result types both front doors return, and the JSON value types.

``Entity``, ``Page``, ``Related``, ``AuditEvent``, ``AuditReport``, the search results (``Hit``,
``LegScore``, ``Receipt``, ``SearchResult``), the lifecycle results (``MemoryContext``,
``SummaryResult``, ``ArchiveResult``) and the typed dicts of the JSON-shaped answers
(``RuleInfo``, ``PlanOutcome``, ...). They are also the wire format of the HTTP API: the server
encodes them with ``model_dump(mode="json")`` and the client decodes them with
``model_validate(payload, context=decoding(decoder))``, where the decoder turns each entity's
JSON ``data`` back into its type's model (see :class:`EntityDecoder`). Imports only pydantic.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_serializer,
    field_validator,
)

#: A JSON value (what a tool call or a plan step returns).
JSONValue = dict[str, "JSONValue"] | list["JSONValue"] | str | int | float | bool | None
JSONObject = dict[str, JSONValue]

#: The validation-context key under which a decoder travels (see :func:`decoding`).
DECODER = "dmf_entity_decoder"


class EntityDecoder(Protocol):
    """Turns the JSON form of an entity's data back into Python values (the HTTP client)."""

    def data(self, type_name: str, data: dict[str, Any]) -> Any:
        """The entity data as its type's model instance (or the dict, if it does not fit)."""

    def fields(self, type_name: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Some of a type's fields as Python values (dates, datetimes, ...)."""


def decoding(decoder: EntityDecoder) -> dict[str, Any]:
    """The ``context`` of a ``model_validate`` call that decodes entities with ``decoder``."""
    return {DECODER: decoder}


def _decoder(info: ValidationInfo) -> EntityDecoder | None:
    context = info.context
    return context.get(DECODER) if isinstance(context, dict) else None


class Entity(BaseModel):
    """One entity as stored: identity, version, timestamps and its validated data."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str
    type: str
    tenant: str
    version: int
    data: Annotated[Any, WithJsonSchema({"type": "object"})] = Field(
        description="The validated model instance of the entity's type (JSON: an object).")
    created_at: dt.datetime
    updated_at: dt.datetime
    deleted_at: dt.datetime | None = None
    expires_at: dt.datetime | None = Field(
        None, description="When the entity expires (UTC; null: never): from then on it reads "
                          "as deleted, and the sweep soft-deletes it.")
    created: bool = Field(False, description="True when this call created the entity.")
    differs: list[str] = Field(
        default_factory=list,
        description="create of an existing identity: the given fields whose stored values "
                    "differ (on_conflict=\"update\": the fields it changed).")

    @field_validator("data")
    @classmethod
    def _decode_data(cls, data: Any, info: ValidationInfo) -> Any:
        decoder = _decoder(info)
        if decoder is None or not isinstance(data, dict) or "type" not in info.data:
            return data
        return decoder.data(info.data["type"], data)

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
    actor: str | None = Field(None, description="The caller's own label for who made the change "
                              "(X-Actor; by default the key's label). Not authenticated.")
    principal: str | None = Field(None, description="The API key that authenticated the write "
                                  "(key:<hash prefix>); None for in-process writes.")
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
    """What verify_audit found: ok, how many events it checked, the first bad seq and why.

    Each tenant has its own chain. A tenant's report (``scope="tenant"``) checks that chain:
    ``last_seq`` and ``last_hash`` are its head. A store-wide report checks every chain and
    names the tenant of the first bad event; its ``last_seq`` is the number of events in the
    store and ``last_hash`` the newest event's hash."""

    ok: bool
    events_checked: int
    first_bad_seq: int | None = None
    problem: str | None = None
    last_seq: int = 0
    last_hash: str | None = None
    scope: Literal["store", "tenant"] = Field(
        "store", description='"tenant": the caller\'s tenant\'s chain (keys below admin); '
        '"store": every tenant\'s chain.')
    tenant: str | None = Field(None, description="The tenant whose chain holds the first bad "
                               "event (a store-wide check that failed).")
    chains: int = Field(0, description="How many tenants' chains were checked.")
    unreachable_by_id: int = Field(
        0, description="Entities a scan (a filter) finds but a lookup by ID does not (an "
        "index lost them); any makes ok false, and reconcile rebuilds the indexes.")


class Related(BaseModel):
    """An entity reached from another by a relation, with the path step that reached it."""

    relation: str
    direction: str
    depth: int
    from_id: str
    entity: Entity


# ---------------------------------------------------------------- search


class LegScore(BaseModel):
    """Where one leg ranked a hit (1-based) and the score it gave."""

    rank: int
    score: float


class Hit(BaseModel):
    """One search hit: the entity as resolved from DuckDB, its fused score and leg scores."""

    entity: Entity
    score: float
    legs: dict[str, LegScore] = Field(default_factory=dict)


class Receipt(BaseModel):
    """How an answer was produced; replay it with ``as_of=resolved_at_seq``."""

    resolved_at_seq: int
    mode: str
    plan: str = Field(description='"exact" (all candidates scored) or "ann" (vector index).')
    candidates: int = Field(description="Entities that passed the filters in DuckDB.")
    model_id: str
    k: int
    rrf_k: int | None = None
    fusion: str | None = Field(None, description="How a hybrid search fused its legs.")
    dropped: int = Field(0, description="Proposed hits that failed resolution (fail closed).")
    index_unavailable: bool = Field(
        False, description="The vector index (Chroma) could not be reached: every candidate "
        "was scored exactly from the process's mirror instead; the answer is still complete.")
    direct: bool = Field(
        False, description="The type's mirrors would not fit the memory budget "
        "(mirror_budget_mb): the legs read the candidates (or the vector index's proposals) "
        "from the store and scored them from the embedding cache; BM25 statistics are those "
        "of the rows ranked.")
    reference_time: dt.datetime | None = Field(
        None, description="The time the query's time phrases were read against (the given "
        "one; now when none was given and the query has time phrases; else null).")
    time_windows: list[dict[str, str]] = Field(
        default_factory=list, description='The query\'s time phrases read as date windows: '
        '{"phrase", "start", "end"} (ISO dates, inclusive).')
    asks_when: bool = Field(False, description="Whether the query asks when something "
                            "happened (rows with grounded dates then rank higher).")
    timings_ms: dict[str, float] = Field(default_factory=dict)


class SearchResult(BaseModel):
    """Hits in a deterministic order (score desc, entity ID asc) and the receipt."""

    hits: list[Hit]
    receipt: Receipt


# ---------------------------------------------------------------- prompt context


class ContextEntity(BaseModel):
    """An entity as the context shows it."""

    id: str
    type: str
    version: int
    label: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)

    @field_validator("fields")
    @classmethod
    def _decode_fields(cls, fields: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        decoder = _decoder(info)
        if decoder is None or "type" not in info.data:
            return fields
        return decoder.fields(info.data["type"], fields)


class ContextLink(BaseModel):
    """A direct link of a focus entity."""

    from_id: str
    relation: str
    to_id: str
    other_type: str
    other_label: str | None = None


class ContextHit(BaseModel):
    """A search hit for the context's query."""

    id: str
    type: str
    score: float
    label: str | None = None


class ContextChange(BaseModel):
    """A recent audit event, described without its time."""

    seq: int
    op: str
    type: str | None = None
    entity_id: str | None = None
    text: str


class ContextTurn(BaseModel):
    """One of a conversation's last turns (a ``Message``), as the context shows it."""

    id: str
    turn: int
    role: str
    text: str
    time: dt.datetime | None = None
    dates: list[dict[str, str]] = Field(
        default_factory=list, description="Its time expressions resolved against its time: "
        '{"phrase", "start", "end"} (ISO dates; the type\'s grounded dates).')


class MemoryContext(BaseModel):
    """Prompt context: ``text`` and the structured data it shows (only what fitted)."""

    text: str
    tokens: int
    budget_tokens: int
    token_counter: str
    as_of_seq: int
    truncated: bool = False
    omitted: int = Field(0, description="Items left out for the token budget.")
    focus: list[ContextEntity] = Field(default_factory=list)
    turns: list[ContextTurn] = Field(default_factory=list,
                                     description="The conversation's last turns, oldest first.")
    constraints: list[ContextEntity] = Field(default_factory=list)
    relations: list[ContextLink] = Field(default_factory=list)
    hits: list[ContextHit] = Field(default_factory=list)
    changes: list[ContextChange] = Field(default_factory=list)
    types: dict[str, int] = Field(default_factory=dict)
    ids: list[str] = Field(default_factory=list, description="Every entity ID in the text.")


# ---------------------------------------------------------------- summaries & archive


class SummaryResult(BaseModel):
    """A summary: the ``MemorySummary`` entity (None when the window is empty) and its parts."""

    empty: bool
    scope: str
    since_seq: int
    until_seq: int
    event_count: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    events_hash: str | None = None
    text: str = ""
    entity_ids: list[str] = Field(default_factory=list)
    summary: Entity | None = None


class ArchiveFile(BaseModel):
    """One archive file and its checkpoint: the tenant, its seq range and last chain hash,
    count, file hash."""

    file: str
    tenant: str
    first_seq: int
    last_seq: int
    last_hash: str
    events: int
    sha256: str
    archived_seq: int


class ArchiveResult(BaseModel):
    """What ``archive_events`` moved (``moved == 0``: nothing to archive, nothing written)."""

    moved: int
    file: ArchiveFile | None = None
    seq: int | None = None


# ---------------------------------------------------------------- JSON-shaped answers


class RuleInfo(BaseModel):
    """A rule: its definition (``RuleDef`` fields), version and dependencies."""

    name: str
    description: str | None = None
    trigger: dict[str, Any]
    condition: str
    action: dict[str, Any]
    version: int
    dependencies: list[list[str]] = Field(
        default_factory=list, description="The (type, relation) pairs whose changes re-check it.")


class PlanOutcome(BaseModel):
    """What ``execute_plan`` did: per-step results, the diff, commit flag and seq range."""

    results: list[Any]
    diff: list[dict[str, Any]]
    committed: bool
    seq_range: list[int] | None = None


class SnapshotManifest(BaseModel):
    """A snapshot's manifest (the HTTP API adds the snapshot's ``name`` and ``path``):
    ``last_seq`` is the audit log's last position over all tenants, ``last_hash`` the newest
    event's hash; from format 2, the bundle file it holds, its record counts and the audit
    archive files it carries."""

    format: int
    last_seq: int
    last_hash: str | None = None
    bundle: str | None = Field(None, description="The bundle file in the snapshot directory "
                               "(format 2; format 1 holds DuckDB's own files).")
    counts: dict[str, int] = Field(default_factory=dict)
    archives: list[ArchiveFile] = Field(default_factory=list)
    embeddings: dict[str, str] = Field(default_factory=dict, description="The embedding "
                                       "cache's files (one per model) and their SHA-256.")
    name: str | None = None
    path: str | None = None


class BundleManifest(BaseModel):
    """A bundle's header (``Memory.export``): its format, the audit log's last position (the
    number of events: each tenant's chain numbers its own seqs) and newest hash, how many
    records of each kind it holds, and the store settings it carries."""

    format: int
    store_format: int
    last_seq: int
    last_hash: str
    counts: dict[str, int]
    meta: dict[str, str] = Field(default_factory=dict)
    tenant: str | None = Field(None, description="The one tenant the bundle holds (its types, "
                               "entities, relations and chain; last_seq and last_hash are its "
                               "chain's head); None: the whole store.")
    #: over HTTP: the name asked for and the path under the server's data directory
    name: str | None = None
    path: str | None = None


class ReconcileCounts(BaseModel):
    """What ``reconcile`` found and repaired."""

    checked: int = 0
    missing: int = 0
    stale: int = 0
    orphan: int = 0
    unreachable_by_id: int = Field(
        0, description="Entities a filter finds but a lookup by ID did not (their ID indexes "
                       "were rebuilt).")


class ReindexCounts(BaseModel):
    """What ``reindex`` rebuilt."""

    types: int = 0
    entities: int = 0
