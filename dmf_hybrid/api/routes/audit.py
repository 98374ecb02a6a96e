"""The audit log: an entity's history, the event feed, the hash-chain check."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ...checks import MAX_SEQ
from ...errors import LimitExceeded
from ...models import AuditEvent, AuditReport
from ...wire import HeadPublic
from ..deps import ReaderMemory, State

router = APIRouter(tags=["audit"])


@router.get("/entities/{entity_id}/history")
def history(entity_id: str, memory: ReaderMemory) -> list[AuditEvent]:
    """Every audit event of an entity (including its links), oldest first."""
    return memory.history(entity_id)


@router.get("/audit/events")
def events(
    memory: ReaderMemory, state: State,
    since_seq: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Events after this seq.")] = 0,
    until_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ, description="Up to this seq.")
                         ] = None,
    limit: Annotated[int, Query(ge=1, description="At most this many events.")] = 1000,
) -> list[AuditEvent]:
    """The caller's tenant's audit events with since_seq < seq <= until_seq, oldest first."""
    if limit > state.settings.max_page_size:
        raise LimitExceeded(f"limit must be at most {state.settings.max_page_size}",
                            field="limit", limit=state.settings.max_page_size)
    return memory.events(since_seq, until_seq, limit)


@router.get("/audit/verify")
def verify(memory: ReaderMemory) -> AuditReport:
    """Verify the audit log's hash chain; names the first bad seq."""
    return memory.verify_audit()


@router.get("/audit/head")
def head(memory: ReaderMemory) -> HeadPublic:
    """The audit seq of the newest event (use it as ``as_of`` to pin a read)."""
    return HeadPublic(last_seq=memory.last_seq)
