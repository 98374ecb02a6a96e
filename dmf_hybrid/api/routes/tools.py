"""Agent tools: function-calling definitions of the memory operations, and calling one."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Response

from ...plans import OPERATIONS
from ...tools import tool_operation
from ..auth import Role
from ..deps import Audit, Caller, State, tenant_memory
from .plans import plan_role

router = APIRouter(prefix="/tools", tags=["tools"])

def tool_role(name: str, arguments: dict[str, Any]) -> Role:
    """The role a tool call needs: the role of its operation (a plan: of its steps)."""
    if name == "execute_plan" and isinstance(arguments.get("ops"), list):
        return plan_role(arguments["ops"])
    op = OPERATIONS.get(tool_operation(name) or "")
    if name == "context" or (op is not None and not op.writes):
        return Role.READER
    return Role.WRITER


@router.get("", response_model=list[dict[str, Any]])
def definitions(
    state: State, caller: Caller,
    format: Annotated[Literal["openai", "json_schema"], Query(
        description='"openai" ({type: function, function: {...}}) or "json_schema".')
    ] = "openai",
    profile: Annotated[Literal["compact", "per_type"], Query(
        description='"compact": generic create/query/search taking type, the types described '
                    'once; "per_type": create_<Type>, query_<Type>, search_<Type>.')
    ] = "compact",
    internal: Annotated[bool, Query(description="Include internal types (MemorySummary).")
                        ] = False,
) -> Response:
    """Function-calling definitions for the memory operations of the defined types."""
    memory = tenant_memory(state, caller, Role.READER)
    types = memory.types()
    key = (memory.tenant, format, profile, internal, tuple(id(t) for t in types))
    body = state.tool_answers.get(
        key, types, lambda: memory.tools(format, profile=profile, internal=internal),
        state.settings.max_tools_bytes)
    return Response(body, media_type="application/json")


@router.post("/{name}")
def call(
    name: str, state: State, caller: Caller, audit: Audit,
    arguments: Annotated[dict[str, Any] | None, Body(
        description="The call's arguments, as the tool's parameters schema describes.")
    ] = None,
) -> Any:
    """Validate and execute one tool call (422 plan_error with problems if invalid)."""
    args = arguments or {}
    return tenant_memory(state, caller, tool_role(name, args)).call_tool(name, args,
                                                                       **audit.kwargs())
