"""Entity types: list, read and define (the TypeDef as JSON)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Response, status

from ...wire import TypePublic
from ..deps import AdminMemory, Audit, ReaderMemory

router = APIRouter(tags=["types"])

TYPEDEF_EXAMPLE = {
    "name": "Note",
    "fields": {"title": {"type": "str", "required": True, "nullable": False},
               "body": {"type": "str"}},
    "identity": ["title"],
    "embed": "{title}: {body}",
}


@router.get("/types")
def list_types(memory: ReaderMemory) -> list[TypePublic]:
    """Every registered entity type, by name."""
    return [TypePublic.of(t) for t in memory.types()]


@router.get("/types/{name}")
def get_type(name: str, memory: ReaderMemory) -> TypePublic:
    """One registered entity type and its definition."""
    return TypePublic.of(memory.get_type(name))


@router.post("/types", status_code=status.HTTP_201_CREATED, responses={
    200: {"model": TypePublic, "description": "The same definition was already registered"}})
def define_type(
    typedef: Annotated[dict[str, Any], Body(description="A TypeDef (the TOML form as JSON).",
                                            examples=[TYPEDEF_EXAMPLE])],
    memory: AdminMemory, audit: Audit, response: Response,
) -> TypePublic:
    """Define a type or a compatible new version of it (201 new version, 200 unchanged)."""
    name = typedef.get("name")
    # not get_type: a bundled type's name would define the bundled type before this one
    before = next((t.version for t in memory.types() if t.name == name), None)
    etype = memory.define_type(typedef, actor=audit.actor, reason=audit.reason)
    if before == etype.version:
        response.status_code = status.HTTP_200_OK
    return TypePublic.of(etype)
