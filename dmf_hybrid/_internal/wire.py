"""The HTTP answers that are not public result types, and the bodies only HTTP has.

The server encodes its answers with the models here and with the public result types of
:mod:`dmf_hybrid._internal.models` (``Entity``, ``Page``, ``SearchResult``, ...); ``MemoryClient``
decodes the same classes. The operations' own requests are :mod:`dmf_hybrid._internal.requests`; the
bodies here name what only a server has (a snapshot's or an export's directory under its
data directory). Imports neither FastAPI nor DuckDB.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .requests import Request
from .schema import EntityType, TypeDef

#: Every answer's header: the newest audit seq its process had seen committed
#: (``api.seqs``).
SEQ_HEADER = "X-DMF-Seq"
#: A request's header: answer from a state at or past this audit seq (``api.seqs``).
MIN_SEQ_HEADER = "X-DMF-Min-Seq"


class ErrorBody(BaseModel):
    """Every error response: a stable code, a message and details (``field`` names the input)."""

    error: str = Field(examples=["validation_error"])
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class TypePublic(BaseModel):
    """A registered entity type: its name, registry version and definition."""

    name: str
    version: int
    definition: TypeDef

    @classmethod
    def of(cls, etype: EntityType) -> TypePublic:
        """The public form of an EntityType."""
        return cls(name=etype.name, version=etype.version, definition=etype.typedef)


class CountPublic(BaseModel):
    """How many entities matched."""

    count: int


class SeqPublic(BaseModel):
    """The audit seq of the event an operation wrote."""

    seq: int


class LinkPublic(BaseModel):
    """Whether the link is new (false: it already existed)."""

    linked: bool


class HeadPublic(BaseModel):
    """The audit seq of the caller's tenant's newest event (each tenant has its own seqs)."""

    last_seq: int
    scope: Literal["tenant"] = "tenant"


class SnapshotRequest(Request):
    """Export the database to ``<data_dir>/snapshots/<name>``."""

    name: str = Field(description="Letters, digits, '.', '_' and '-'; no path separators.")


class ExportRequest(Request):
    """Write the whole store to the bundle ``<data_dir>/exports/<name>``."""

    name: str = Field(description="Letters, digits, '.', '_' and '-'; no path separators "
                                  "(a name ending in .gz is gzip-compressed).")
    tenant: str | None = Field(None, description="Only this tenant's part of the store.")


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


class PlanProblem(BaseModel):
    """One problem of an invalid plan: which step and argument, what is wrong, what exists."""

    step: int | None
    field: str | None
    problem: str
    hint: str | None = None


class PlanValidation(BaseModel):
    """Whether a plan validates statically, and every problem found."""

    valid: bool
    problems: list[PlanProblem]


class WhoAmIPublic(BaseModel):
    """The caller's tenant, role and key label; ``open`` when the service has no keys."""

    tenant: str
    role: str = Field(description='"reader", "writer" or "admin".')
    key_label: str | None = Field(None, description="The principal audit events of this key's "
                                  "writes record (and their actor label unless X-Actor is sent).")
    open: bool = Field(description="True when the service runs without API keys.")
    scope: Literal["store", "tenant"] = Field(
        "tenant", description='"store" for admin keys: admin routes (reconcile, reindex, '
        "snapshot, archive, rules, types) and the audit head/verify act on the whole store; "
        "the key's tenant only holds its own entity writes.")
