"""Agent tools: function-calling definitions of the memory operations, and calling one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from ...operations import FORMATS, PROFILES, ToolCall, ToolsQuery
from ...plans import OPERATIONS
from ...tools import tool_operation
from ..auth import Role
from ..deps import Audit, Caller, State, tenant_memory
from .plans import plan_role

router = APIRouter(prefix="/tools", tags=["tools"])

def _query(name: str, options: tuple[str, ...] = ()) -> Any:
    """A query parameter described as :class:`ToolsQuery`'s field."""
    extra = {"enum": list(options)} if options else None
    return Query(description=ToolsQuery.model_fields[name].description, json_schema_extra=extra)


def tool_role(name: str, arguments: Any) -> Role:
    """The role a tool call needs: the role of its operation (a plan: of its steps)."""
    if not isinstance(arguments, dict):
        return Role.READER  # refused by the memory's check whatever the tool
    if name == "execute_plan" and isinstance(arguments.get("ops"), list):
        return plan_role(arguments["ops"])
    op = OPERATIONS.get(tool_operation(name) or "")
    if name == "context" or (op is not None and not op.writes):
        return Role.READER
    return Role.WRITER


@router.get("", response_model=list[dict[str, Any]])
def definitions(
    state: State, caller: Caller,
    format: Annotated[str, _query("format", FORMATS)] = "openai",
    profile: Annotated[str, _query("profile", PROFILES)] = "compact",
    internal: Annotated[bool, _query("internal")] = False,
) -> Response:
    """Function-calling definitions for the memory operations of the defined types."""
    # (the memory checks the query with its model, ToolsQuery)
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
    # Any, so that a body that is no object is refused by the memory's check (ToolCall)
    arguments: Annotated[Any, Body(
        description=ToolCall.model_fields["arguments"].description,
        json_schema_extra={"type": "object"})] = None,
) -> Any:
    """Validate and execute one tool call (422 plan_error with problems if invalid)."""
    return tenant_memory(state, caller, tool_role(name, arguments)).call_tool(
        name, arguments, **audit.kwargs())
