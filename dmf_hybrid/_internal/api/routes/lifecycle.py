"""Memory lifecycle: prompt context, summaries, the open-constraint work queue, rules, archive."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response, status

from ...checks import SNAPSHOT_NAME_RE, full_match
from ...errors import ValidationError
from ...models import ArchiveResult, MemoryContext, Page, RuleInfo, SummaryResult
from ...operations import ArchiveRequest
from ...requests import AS_OF_DOC, ConstraintQuery, ContextRequest, SummaryRequest
from ..deps import AdminMemory, Audit, ReaderMemory, State, WriterMemory, parse_as_of

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


def archive_dir(base: Path, name: str) -> Path:
    """``base/archives/name``; ValidationError for a name that could leave that directory."""
    if not full_match(SNAPSHOT_NAME_RE, name) or ".." in name:
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
                                           body.as_of, k=body.k,
                                           conversation=body.conversation, turns=body.turns)
    return result


@router.post("/summaries", status_code=201)
def summarize(body: SummaryRequest, memory: WriterMemory, audit: Audit) -> SummaryResult:
    """Summarise a scope's audit events into a MemorySummary entity (empty: no entity)."""
    return memory.summarize(body.scope, body.since_seq, body.until_seq, actor=audit.actor,
                            reason=audit.reason)


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
) -> Page:
    """The open constraints (the work queue), oldest first."""
    where = {k: v for k, v in (("subject", subject), ("kind", kind), ("rule", rule))
             if v is not None}
    return memory.open_constraints(where, limit=limit, cursor=cursor, as_of=parse_as_of(as_of))


@router.post("/constraints/query")
def query_constraints(body: ConstraintQuery, memory: ReaderMemory) -> Page:
    """The open constraints matching any filter (the work queue), oldest first."""
    return memory.open_constraints(body.where, limit=body.limit, cursor=body.cursor,
                                   as_of=body.as_of)


@router.get("/rules")
def list_rules(memory: ReaderMemory) -> list[RuleInfo]:
    """Every active rule: definition, version and the relations it depends on."""
    return memory.rules()


@router.post("/rules", status_code=status.HTTP_201_CREATED, responses={
    200: {"description": "The same definition was already registered"}})
def define_rule(
    rule: Annotated[dict[str, Any], Body(description="A rule (the TOML [rules.<name>] table "
                                                     "as JSON, with its name).",
                                         examples=[RULE_EXAMPLE])],
    memory: AdminMemory, audit: Audit, response: Response,
) -> RuleInfo:
    """Define a rule or a new version of it (201 new version, 200 unchanged)."""
    before = {r.name: r.version for r in memory.rules()}
    defined = memory.define_rule(rule, actor=audit.actor, reason=audit.reason)
    if before.get(defined.name) == defined.version:
        response.status_code = status.HTTP_200_OK
    return defined


@router.post("/admin/archive")
def archive_events(body: ArchiveRequest, memory: AdminMemory, audit: Audit,
                   state: State) -> ArchiveResult:
    """Move audit events with seq < before_seq to Parquet under data_dir/archives/<dest>."""
    name = str(body.dest)  # over HTTP a name: the server keeps archives under its directory
    dest = archive_dir(Path(state.settings.data_dir), name)
    result: ArchiveResult = memory.archive_events(body.before_seq, dest, actor=audit.actor,
                                                  reason=audit.reason)
    if result.file is None:
        return result
    # the server's own layout stays private: the file is named relative to its data directory
    relative = f"{ARCHIVES_DIR}/{name}/{Path(result.file.file).name}"
    return result.model_copy(update={"file": result.file.model_copy(update={"file": relative})})
