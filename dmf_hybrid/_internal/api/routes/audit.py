"""The audit log: an entity's history, the event feed, the hash-chain check."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ...checks import MAX_SEQ
from ...errors import LimitExceeded
from ...models import AuditEvent, AuditReport
from ...wire import HeadPublic
from ..auth import Role
from ..deps import Caller, ReaderMemory, State

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
def verify(memory: ReaderMemory, caller: Caller) -> AuditReport:
    """Verify every tenant's hash chain (admin keys) or the caller's tenant's (other keys)."""
    return memory.verify_audit() if caller.role >= Role.ADMIN else memory.reads.tenant_report()


@router.get("/audit/head")
def head(memory: ReaderMemory) -> HeadPublic:
    """The seq of the caller's tenant's newest event (what to pin reads with as_of)."""
    return HeadPublic(last_seq=memory.last_seq(), scope="tenant")
