"""Memory lifecycle: prompt context, summaries and the open-constraint work queue."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from ...lifecycle.context import MAX_BUDGET, MAX_FOCUS, MAX_QUERY_CHARS, MIN_BUDGET, MemoryContext
from ...lifecycle.summaries import SummaryResult
from ..deps import Audit, ReaderMemory, WriterMemory, parse_as_of
from ..schemas import AS_OF_DOC, AsOfBody, EntityPublic, PagePublic, Request

router = APIRouter(tags=["lifecycle"])


class ContextRequest(Request):
    """What the prompt context is about and how many tokens it may take."""

    focus_ids: list[str] | None = Field(None, max_length=MAX_FOCUS,
                                        description="IDs of the entities the task is about.")
    query: str | None = Field(None, max_length=MAX_QUERY_CHARS,
                              description="Adds the top search hits for this text.")
    budget_tokens: int = Field(800, ge=MIN_BUDGET, le=MAX_BUDGET)
    k: int = Field(5, ge=1, le=50, description="How many search hits.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class SummaryRequest(Request):
    """The scope and audit-seq window of a summary."""

    scope: str | None = Field(None, description='"*" (default), a type name or an entity ID.')
    since_seq: int | None = Field(None, ge=0, description="Events after this seq.")
    until_seq: int | None = Field(None, ge=0, description="Events up to this seq.")


@router.post("/context")
def context(body: ContextRequest, memory: ReaderMemory) -> MemoryContext:
    """A compact, deterministic prompt context (text and data) within a token budget."""
    result: MemoryContext = memory.context(body.focus_ids, body.query, body.budget_tokens,
                                           body.as_of, k=body.k)
    return result


@router.post("/summaries", status_code=201)
def summarize(body: SummaryRequest, memory: WriterMemory, audit: Audit) -> dict[str, Any]:
    """Summarise a scope's audit events into a MemorySummary entity (empty: no entity)."""
    result: SummaryResult = memory.summarize(body.scope, body.since_seq, body.until_seq,
                                             actor=audit.kwargs()["actor"],
                                             reason=audit.kwargs()["reason"])
    return result.model_dump(mode="json")


@router.get("/constraints")
def constraints(
    memory: ReaderMemory,
    subject: Annotated[str | None, Query(description="Only constraints on this entity ID.")
                       ] = None,
    kind: Annotated[str | None, Query(description="Only this kind.")] = None,
    rule: Annotated[str | None, Query(description="Only those raised by this rule.")] = None,
    limit: Annotated[int, Query(ge=1, description="Page size.")] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")
                      ] = None,
    as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
) -> PagePublic:
    """The open constraints (the work queue), oldest first."""
    where = {k: v for k, v in (("subject", subject), ("kind", kind), ("rule", rule))
             if v is not None}
    page = memory.open_constraints(where, limit=limit, cursor=cursor, as_of=parse_as_of(as_of))
    return PagePublic(items=[EntityPublic.of(e) for e in page.items],
                      next_cursor=page.next_cursor, as_of_seq=page.as_of_seq)
