"""The request models of the operations that run plans and tools and archive the audit log,
and :data:`REQUESTS`: the one request model of each operation that has arguments to check.

Like the models of :mod:`dmf_hybrid._internal.requests`, each is used by ``Memory`` to check its
arguments, by ``MemoryClient`` to build the body or the query, and by the route to parse it.
What needs the settings (``max_plan_ops``) or the schema (a step's type, a tool's name among
the defined types) is the memory's to check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from .checks import MAX_SEQ, check_before_seq, check_choice
from .errors import PlanError, ValidationError
from .requests import (
    ConstraintQuery,
    ContextRequest,
    EntityAppend,
    EntityBatchCreate,
    EntityCount,
    EntityCreate,
    EntityGet,
    EntityQuery,
    EntityUpdate,
    EventsQuery,
    LinkRequest,
    MessagesAppend,
    RelatedQuery,
    Request,
    SearchRequest,
    SummaryRequest,
)

#: At most this many problems are listed for one plan.
MAX_PROBLEMS = 50
#: The formats of ``tools()`` and its profiles.
ToolFormat = Literal["openai", "json_schema"]
ToolProfile = Literal["compact", "per_type"]
FORMATS: tuple[str, ...] = ToolFormat.__args__  # type: ignore[attr-defined]
PROFILES: tuple[str, ...] = ToolProfile.__args__  # type: ignore[attr-defined]
OPS_DOC = ('Steps like {"op": "create", "type": "Trip", "data": {...}}; a later step may use '
           'an earlier result through "$0.id" or "$2.hits[0].entity.id".')
PLAN_EXAMPLES: dict[str, Any] = {"examples": [{"ops": [
    {"op": "create", "type": "Trip", "data": {"user": "ana", "destination": "Shanghai",
                                              "budget": 5000}},
    {"op": "create", "type": "PointOfInterest", "on_conflict": "return",
     "data": {"name": "Shanghai Museum", "city": "Shanghai", "category": "museum"}},
    {"op": "link", "from_id": "$0.id", "relation": "includes", "to_id": "$1.id"},
    {"op": "update", "id": "$0.id", "data": {"notes": "museum day"}},
]}]}


@dataclass
class Problems:
    """The problems found in a plan, each naming its step, field, what is wrong and a hint."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, step: int | None, field_: str | None, problem: str,
            hint: str | None = None) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append({"step": step, "field": field_, "problem": problem,
                               "hint": hint})

    def __bool__(self) -> bool:
        return bool(self.items)

    def error(self, prefix: str = "the plan is invalid and changed nothing",
              steps: bool = True) -> PlanError:
        """The PlanError listing every problem (its message summarises the first ones)."""
        parts = []
        for p in self.items[:5]:
            step = f"step {p['step']}" if steps and p["step"] is not None else ""
            where = " ".join(x for x in (step, p["field"] or "") if x) or "plan"
            parts.append(f"{where}: {p['problem']}" + (f" ({p['hint']})" if p["hint"] else ""))
        more = f"; and {len(self.items) - 5} more" if len(self.items) > 5 else ""
        return PlanError(f"{prefix}: {'; '.join(parts)}{more}",
                         problems=list(self.items))


def _problem(field_: str, problem: str, hint: str | None = None, **error: Any) -> PlanError:
    problems = Problems()
    problems.add(None, field_, problem, hint)
    return problems.error(**error)


def check_ops(ops: Any) -> list[Any]:
    """A plan's steps: a list (an empty one, and each step, are the plan validator's to
    judge: it lists every problem at once); PlanError otherwise."""
    if isinstance(ops, (str, bytes, Mapping)) or not isinstance(ops, Sequence):
        raise _problem("ops", "a plan must be a list of steps",
                       '[{"op": "create", "type": "...", "data": {...}}, ...]')
    return list(ops)


def check_flag(name: str) -> BeforeValidator:
    """A bool argument: True or False, nothing that merely looks like one."""
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValidationError(f"{name} must be true or false", field=name)
        return value
    return BeforeValidator(check)


def _choice(name: str, options: tuple[str, ...]) -> BeforeValidator:
    return BeforeValidator(lambda value: check_choice(value, name, options))


def check_tool_name(name: Any) -> str:
    """A tool's name: a non-empty string that can be a path segment (which tools exist is
    the memory's answer)."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValidationError("name must be a tool name", field="name")
    return name


def check_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments: a JSON object (None: none); PlanError otherwise."""
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise _problem("arguments", "arguments must be a JSON object",
                       prefix="the tool call is invalid and changed nothing", steps=False)
    return dict(arguments)


def _dest(value: Any) -> str | Path:
    if not isinstance(value, (str, Path)) or not str(value):
        raise ValidationError("dest must be a directory name", field="dest")
    return value


class PlanRequest(Request):
    """A plan: its steps, and whether to only show the diff it would make."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=PLAN_EXAMPLES)

    ops: Annotated[list[Any], BeforeValidator(check_ops), WithJsonSchema(
        {"type": "array", "items": {"type": "object"}})] = Field(description=OPS_DOC)
    dry_run: Annotated[bool, check_flag("dry_run")] = Field(
        False, description="Roll back after running; return the diff.")


class PlanSteps(Request):
    """A plan to validate or dry-run."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=PLAN_EXAMPLES)

    ops: Annotated[list[Any], BeforeValidator(check_ops), WithJsonSchema(
        {"type": "array", "items": {"type": "object"}})] = Field(description=OPS_DOC)


class ToolsQuery(Request):
    """Which function-calling definitions to list."""

    format: Annotated[ToolFormat, _choice("format", FORMATS)] = Field(
        "openai", description='"openai" ({type: function, function: {...}}) or "json_schema".')
    profile: Annotated[ToolProfile, _choice("profile", PROFILES)] = Field(
        "compact", description='"compact": generic create/query/search taking type, the types '
                               'described once; "per_type": create_<Type>, query_<Type>, '
                               'search_<Type>.')
    internal: Annotated[bool, check_flag("internal")] = Field(
        False, description="Include internal types (MemorySummary).")


class ToolCall(Request):
    """One tool call: the tool's name (the route's path) and its arguments (the body)."""

    name: Annotated[str, BeforeValidator(check_tool_name)] = Field(
        description="The tool's name, as tools() lists it.")
    arguments: Annotated[dict[str, Any], BeforeValidator(check_arguments)] = Field(
        None, validate_default=True,  # type: ignore[arg-type]
        description="The call's arguments, as the tool's parameters schema describes.")


class ArchiveRequest(Request):
    """Move the audit events before a seq to Parquet files in ``dest`` (over HTTP a directory
    name: the server keeps archives under ``<data_dir>/archives/``)."""

    before_seq: Annotated[int, BeforeValidator(check_before_seq), WithJsonSchema(
        {"type": "integer", "minimum": 1, "maximum": MAX_SEQ})] = Field(
        description="Archive the events with seq < this.")
    dest: Annotated[str | Path, BeforeValidator(_dest), PlainSerializer(str),
                    WithJsonSchema({"type": "string"})] = Field(
        description="A directory name: letters, digits, '.', '_' and '-'; no path separators.")


#: The request model of each ``MemoryAPI`` operation that has one (``tests/test_requests.py`` walks
#: it: each door checks the operation's arguments with this model, the route parses it). The
#: operations left out take nothing but an entity ID (``history``, ``delete``, ``restore``,
#: ``erase``: :func:`~dmf_hybrid._internal.checks.check_id`, the version in ``If-Match``) or a
#: definition that is a model of its own (``define_type``: ``TypeDef``, ``define_rule``:
#: ``RuleDef``); every write's ``actor``, ``reason`` and ``trace_id`` are its audit headers
#: (:func:`~dmf_hybrid._internal.checks.check_audit`).
REQUESTS: dict[str, type[Request]] = {
    "query": EntityQuery,
    "count": EntityCount,
    "search": SearchRequest,
    "context": ContextRequest,
    "open_constraints": ConstraintQuery,
    "create": EntityCreate,
    "create_many": EntityBatchCreate,
    "update": EntityUpdate,
    "append": EntityAppend,
    "add_messages": MessagesAppend,
    "summarize": SummaryRequest,
    "link": LinkRequest,
    "unlink": LinkRequest,
    "get": EntityGet,
    "related": RelatedQuery,
    "events": EventsQuery,
    "execute_plan": PlanRequest,
    "tools": ToolsQuery,
    "call_tool": ToolCall,
    "archive_events": ArchiveRequest,
}
