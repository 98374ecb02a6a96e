"""Relations: link, unlink and walk."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from ...models import Related
from ...requests import AS_OF_DOC, LinkRequest
from ...wire import LinkPublic, SeqPublic
from ..deps import Audit, ReaderMemory, WriterMemory, parse_as_of

router = APIRouter(tags=["relations"])


@router.post("/relations", status_code=status.HTTP_201_CREATED, responses={
    200: {"model": LinkPublic, "description": "The link already existed (linked=false)"}})
def link(body: LinkRequest, memory: WriterMemory, audit: Audit,
         response: Response) -> LinkPublic:
    """Link two entities (201; 200 with linked=false when the link already existed)."""
    linked = memory.link(body.from_id, body.relation, body.to_id, **audit.kwargs())
    if not linked:
        response.status_code = status.HTTP_200_OK
    return LinkPublic(linked=linked)


@router.delete("/relations")
def unlink(body: LinkRequest, memory: WriterMemory, audit: Audit) -> SeqPublic:
    """Remove a link (404 if it does not exist); returns the event seq."""
    return SeqPublic(seq=memory.unlink(body.from_id, body.relation, body.to_id,
                                       **audit.kwargs()))


@router.get("/entities/{entity_id}/related")
def related(
    entity_id: str, memory: ReaderMemory,
    relation: Annotated[str | None, Query(description="Only this relation.")] = None,
    direction: Annotated[str, Query(description='"out", "in" or "both".')] = "out",
    depth: Annotated[int, Query(description="How many links away.")] = 1,
    as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
) -> list[Related]:
    """Entities linked to an entity (nearest first, then relation, then ID)."""
    return memory.related(entity_id, relation, direction, depth, parse_as_of(as_of))
