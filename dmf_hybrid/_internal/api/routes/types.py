"""Entity types: list, read and define (the TypeDef as JSON)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Response, status

from ...errors import ValidationError
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


#: Types one ``POST /types/batch`` may define.
MAX_BATCH_TYPES = 200


@router.post("/types/batch", status_code=status.HTTP_201_CREATED)
def define_types(
    typedefs: Annotated[list[dict[str, Any]], Body(
        description="TypeDefs defined in one transaction: their relations may target each "
                    "other (a file's types, as `dmf define FILE.toml` sends them).")],
    memory: AdminMemory, audit: Audit,
) -> list[TypePublic]:
    """Define several types (or new versions) at once; all or none."""
    if not 1 <= len(typedefs) <= MAX_BATCH_TYPES:
        raise ValidationError(f"a batch defines 1 to {MAX_BATCH_TYPES} types", field="body")
    with memory.transaction():
        types = [memory.define_type(t, actor=audit.actor, reason=audit.reason)
                 for t in typedefs]
    return [TypePublic.of(t) for t in types]


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
