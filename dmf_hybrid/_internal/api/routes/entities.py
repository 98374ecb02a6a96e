"""Entities: create, read (with time travel), query, update (If-Match), append, delete, erase."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Response, status

from ...models import Entity, Page
from ...requests import (
    AS_OF_DOC,
    EntityAppend,
    EntityBatchCreate,
    EntityCount,
    EntityCreate,
    EntityQuery,
    EntityUpdate,
)
from ...wire import CountPublic, ErrorBody, SeqPublic
from ..deps import (
    Audit,
    IfMatch,
    ReaderMemory,
    WriterMemory,
    etag,
    parse_as_of,
    parse_if_match,
)

router = APIRouter(tags=["entities"])


def _reply(entity: Entity, response: Response) -> Entity:
    response.headers["ETag"] = etag(entity.version)
    return entity


@router.post("/entities/{type_name}", status_code=status.HTTP_201_CREATED, responses={
    200: {"model": Entity, "description": "An entity with this ID already existed"},
    409: {"model": ErrorBody, "description": "on_conflict=raise and a given field differs"}})
def create_entity(type_name: str, body: EntityCreate, memory: WriterMemory, audit: Audit,
                  response: Response) -> Entity:
    """Create an entity (201); the same identity again meets ``on_conflict`` (200)."""
    entity = memory.create(type_name, body.data, id=body.id, on_conflict=body.on_conflict,
                           ttl=body.ttl, expires_at=body.expires_at, **audit.kwargs())
    if not entity.created:
        response.status_code = status.HTTP_200_OK
    # built from the stored (validated) ID, quoted: a header must never fail after the commit
    response.headers["Location"] = f"/entities/{quote(entity.id, safe='')}"
    return _reply(entity, response)


@router.post("/entities/{type_name}/batch", status_code=status.HTTP_201_CREATED)
def create_entities(type_name: str, body: EntityBatchCreate, memory: WriterMemory,
                    audit: Audit) -> list[Entity]:
    """Create many entities of one type (validated first, then written together)."""
    return memory.create_many(type_name, body.rows, on_conflict=body.on_conflict,
                              ttl=body.ttl, expires_at=body.expires_at, **audit.kwargs())


@router.get("/entities/{entity_id}")
def get_entity(entity_id: str, memory: ReaderMemory, response: Response,
               as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None
               ) -> Entity:
    """The entity now or as of an audit seq / time; its ETag is its version."""
    return _reply(memory.get(entity_id, as_of=parse_as_of(as_of)), response)


@router.post("/entities/{type_name}/query")
def query_entities(type_name: str, body: EntityQuery, memory: ReaderMemory) -> Page:
    """One page of a type's entities matching a filter, in a deterministic order."""
    return memory.query(type_name, body.where, body.order_by, body.limit, body.cursor,
                        body.as_of)


@router.post("/entities/{type_name}/count")
def count_entities(type_name: str, body: EntityCount, memory: ReaderMemory) -> CountPublic:
    """How many entities of a type match a filter."""
    return CountPublic(count=memory.count(type_name, body.where, body.as_of))


@router.patch("/entities/{entity_id}")
def update_entity(entity_id: str, body: EntityUpdate, memory: WriterMemory, audit: Audit,
                  response: Response, if_match: IfMatch = None) -> Entity:
    """Change fields; with If-Match a stale version fails with 412."""
    entity = memory.update(entity_id, body.data, expected_version=parse_if_match(if_match),
                           ttl=body.ttl, expires_at=body.expires_at, **audit.kwargs())
    return _reply(entity, response)


@router.post("/entities/{entity_id}/append")
def append_to_entity(entity_id: str, body: EntityAppend, memory: WriterMemory, audit: Audit,
                     response: Response, if_match: IfMatch = None) -> Entity:
    """Append values to a list field atomically."""
    entity = memory.append(entity_id, body.field, body.values,
                           expected_version=parse_if_match(if_match), **audit.kwargs())
    return _reply(entity, response)


@router.delete("/entities/{entity_id}")
def delete_entity(entity_id: str, memory: WriterMemory, audit: Audit, response: Response,
                  if_match: IfMatch = None) -> Entity:
    """Soft-delete an entity (restorable); returns it as deleted."""
    entity = memory.delete(entity_id, expected_version=parse_if_match(if_match),
                           **audit.kwargs())
    return _reply(entity, response)


@router.post("/entities/{entity_id}/restore")
def restore_entity(entity_id: str, memory: WriterMemory, audit: Audit, response: Response,
                   if_match: IfMatch = None) -> Entity:
    """Undo a soft delete."""
    entity = memory.restore(entity_id, expected_version=parse_if_match(if_match),
                            **audit.kwargs())
    return _reply(entity, response)


@router.post("/entities/{entity_id}/erase")
def erase_entity(entity_id: str, memory: WriterMemory, audit: Audit) -> SeqPublic:
    """Erase an entity's content everywhere (irreversible); returns the event seq."""
    return SeqPublic(seq=memory.erase(entity_id, **audit.kwargs()))
