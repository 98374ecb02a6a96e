"""Memory lifecycle: prompt context, summaries, the open-constraint work queue, rules, archive."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response, status
from pydantic import Field

from ...errors import ValidationError
from ...lifecycle.archive import ArchiveResult
from ...lifecycle.context import MAX_BUDGET, MAX_FOCUS, MAX_QUERY_CHARS, MIN_BUDGET, MemoryContext
from ...lifecycle.summaries import SummaryResult
from ..deps import AdminMemory, Audit, ReaderMemory, State, WriterMemory, parse_as_of
from ..schemas import AS_OF_DOC, MAX_SEQ, AsOfBody, EntityPublic, PagePublic, Request
from .admin import SNAPSHOT_NAME_RE

router = APIRouter(tags=["lifecycle"])

#: Where ``POST /admin/archive`` writes: ``<data_dir>/archives/<dest>/events-*.parquet``.
ARCHIVES_DIR = "archives"

RULE_EXAMPLE = {
    "name": "trip_over_budget",
    "description": "The estimated cost of a trip's points of interest exceeds its budget.",
    "condition": "sum(PointOfInterest.estimated_cost via includes) > budget",
    "trigger": {"type": "Trip", "where": {"budget": {"$gt": 0}}},
    "action": {"kind": "budget", "link": "has",
               "message": "estimated cost {value} exceeds the budget {threshold}"},
}


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


class ConstraintQuery(Request):
    """A filter over the open constraints, a page size, a cursor and time travel."""

    where: dict[str, Any] | None = Field(
        None, description='Filter on Constraint fields, e.g. {"kind": "budget"}; '
                          'status is always "open".')
    limit: int = Field(50, description="Page size.")
    cursor: str | None = Field(None, description="next_cursor of the previous page.")
    as_of: AsOfBody = Field(None, description=AS_OF_DOC)


class ArchiveRequest(Request):
    """Move the audit events before a seq to Parquet under ``<data_dir>/archives/<dest>``."""

    before_seq: int = Field(ge=1, le=MAX_SEQ, description="Archive the events with seq < this.")
    dest: str = Field(description="A directory name: letters, digits, '.', '_' and '-'; "
                                  "no path separators.")


def archive_dir(base: Path, name: str) -> Path:
    """``base/archives/name``; ValidationError for a name that could leave that directory."""
    if not SNAPSHOT_NAME_RE.match(name) or ".." in name:
        raise ValidationError(
            "archive dest must be a name of 1-64 letters, digits, '.', '_' or '-', start with "
            "a letter or digit and contain no '..' (the server keeps archives under its data "
            "directory)", field="dest")
    root = (base / ARCHIVES_DIR).resolve()
    dest = (root / name).resolve()
    if dest.parent != root:
        raise ValidationError("archive dest must stay inside the archives directory",
                              field="dest")
    return dest


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
                                             actor=audit.actor, reason=audit.reason)
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


@router.post("/constraints/query")
def query_constraints(body: ConstraintQuery, memory: ReaderMemory) -> PagePublic:
    """The open constraints matching any filter (the work queue), oldest first."""
    page = memory.open_constraints(body.where, limit=body.limit, cursor=body.cursor,
                                   as_of=body.as_of)
    return PagePublic(items=[EntityPublic.of(e) for e in page.items],
                      next_cursor=page.next_cursor, as_of_seq=page.as_of_seq)


@router.get("/rules")
def list_rules(memory: ReaderMemory) -> list[dict[str, Any]]:
    """Every active rule: definition, version and the relations it depends on."""
    return memory.rules()


@router.post("/rules", status_code=status.HTTP_201_CREATED, responses={
    200: {"description": "The same definition was already registered"}})
def define_rule(
    rule: Annotated[dict[str, Any], Body(description="A rule (the TOML [rules.<name>] table "
                                                     "as JSON, with its name).",
                                         examples=[RULE_EXAMPLE])],
    memory: AdminMemory, audit: Audit, response: Response,
) -> dict[str, Any]:
    """Define a rule or a new version of it (201 new version, 200 unchanged)."""
    before = {r["name"]: r["version"] for r in memory.rules()}
    defined = memory.define_rule(rule, actor=audit.actor, reason=audit.reason)
    if before.get(defined["name"]) == defined["version"]:
        response.status_code = status.HTTP_200_OK
    return defined


@router.post("/admin/archive")
def archive_events(body: ArchiveRequest, memory: AdminMemory, audit: Audit,
                   state: State) -> ArchiveResult:
    """Move audit events with seq < before_seq to Parquet under data_dir/archives/<dest>."""
    dest = archive_dir(Path(state.settings.data_dir), body.dest)
    result: ArchiveResult = memory.archive_events(body.before_seq, dest, actor=audit.actor,
                                                  reason=audit.reason)
    if result.file is None:
        return result
    # the server's own layout stays private: the file is named relative to its data directory
    relative = f"{ARCHIVES_DIR}/{body.dest}/{Path(result.file.file).name}"
    return result.model_copy(update={"file": result.file.model_copy(update={"file": relative})})
