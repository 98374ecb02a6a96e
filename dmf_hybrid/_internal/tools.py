"""Agent tools: function-calling definitions of the memory operations, and one-call execution.

Two profiles. ``compact`` (the default): generic ``create``, ``query`` and ``search`` tools
taking ``type``, the types and their fields described once (in ``create``), plus the
type-independent tools below; its size does not grow with the number of fields. ``per_type``:
for every type ``T``, ``create_T``, ``query_T`` and (when ``T`` is embedded) ``search_T`` with
JSON-Schema parameters generated from the type's pydantic model. Both add ``get``, ``update``,
``append``, ``delete``, ``restore``, ``link``, ``unlink``, ``related``, ``history``,
``execute_plan`` and ``context``; create and update take the fields as ``data`` everywhere.
Internal types (``MemorySummary``) are left out unless ``internal=True``.
``call_tool(mem, name, arguments)`` accepts the tools of either profile: it turns a call into
a plan and runs it, so a bad call raises the same :class:`PlanError` (with
``details["problems"]``) as a bad plan. ``search`` without ``type`` searches every embedded
type (with ``conversation``: every one with a ``conversation`` field) and merges the hits by
score.
"""

from __future__ import annotations

import copy
import difflib
import logging
from collections.abc import Mapping
from typing import Any

from .checks import ID_SCHEMA, TOOL_NAME_RE, full_match
from .conversations import CONVERSATION_FIELD, MESSAGE_SCHEMA, log_available
from .core import MemoryCore
from .errors import DMFError, PlanError
from .filters import FILTER_DOC_BRIEF
from .lifecycle.context import call_context_tool, context_tool_definition
from .lifecycle.summaries import SUMMARY_TYPE
from .operations import PlanRequest, Problems
from .plans import (
    OPERATIONS,
    OPS,
    execute_plan,
)
from .schema import EntityType
from .tool_schemas import model_args, model_schema, order_schema, where_schema

log = logging.getLogger(__name__)

#: Types the memory keeps for itself: hidden from the tools unless asked for.
INTERNAL_TYPES = (SUMMARY_TYPE,)
ID_ARG: dict[str, Any] = {**ID_SCHEMA,
                          "description": "An entity ID, as returned by create/query/search."}
TTL_DOC = 'Expiry: seconds from now, or "never".'
VERSION_SCHEMA: dict[str, Any] = {
    "type": "integer", "minimum": 1,
    "description": "Fail with a version conflict unless the entity is at this version.",
}
ENTITY_RESULT = "Returns the entity as {id, type, version, data}."
CONVERSATION_DOC = ("Only this conversation's rows (types with a conversation field, e.g. "
                    "Message).")
GENERIC_TOOLS = ("get", "update", "append", "delete", "restore", "link", "unlink", "related",
                 "history", "execute_plan", "context")
COMPACT_TOOLS = ("create", "query", "search")
#: ``search``'s reference time, as a tool argument.
REFERENCE_TIME_DOC = ("ISO-8601 date or time the query's time phrases ('last week', '上周') "
                      "are read against; default now.")


def visible_types(mem: MemoryCore, internal: bool = False) -> list[EntityType]:
    """The types the tools describe (internal ones only when asked for)."""
    return [t for t in mem.types() if internal or t.name not in INTERNAL_TYPES]


def tool_definitions(mem: MemoryCore, format: str = "openai", profile: str = "compact",
                     internal: bool = False) -> list[dict[str, Any]]:
    """Function-calling definitions of the memory operations for the defined types (the
    arguments checked by :class:`~dmf_hybrid._internal.operations.ToolsQuery`)."""
    tools: list[dict[str, Any]] = []
    types = visible_types(mem, internal)
    if profile == "compact":
        tools.extend(_compact_tools(mem, types))
    else:
        for etype in types:
            tools.extend(_type_tools(mem, etype))
    tools.extend(_generic_tools(types, compact=profile == "compact"))
    log_kept = log_available(mem.types())
    tools.append(context_tool_definition(conversations=log_kept))
    if log_kept:
        tools.append(_messages_tool())
    tools = [t for t in tools if _valid_name(t["name"])]
    if format == "openai":
        return [{"type": "function", "function": t} for t in tools]
    return tools


def _valid_name(name: str) -> bool:
    if full_match(TOOL_NAME_RE, name):
        return True
    log.warning("tool %s is left out: its name is not a valid function name", name)
    return False


# ---------------------------------------------------------------- schemas


def _tool(name: str, description: str, properties: dict[str, Any],
          required: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": properties,
                              "additionalProperties": False}
    if required:
        params["required"] = required
    return {"name": name, "description": description, "parameters": params}


def _op_tool(name: str, op_name: str, description: str, properties: dict[str, Any]
             ) -> dict[str, Any]:
    """A tool for an operation: required arguments and defaults from the operation table."""
    op = OPERATIONS[op_name]
    for arg in op.args:
        if arg.default is not None and arg.name in properties:
            properties[arg.name] = {**properties[arg.name], "default": arg.default}
    required = [a.name for a in op.args if a.required and a.name in properties]
    return _tool(name, description, properties, required)


def tool_operation(name: str) -> str | None:
    """The plan operation a tool call runs (None: ``execute_plan``, ``context``, unknown)."""
    for prefix in ("create_", "query_", "search_"):
        if name.startswith(prefix):
            return prefix[:-1]
    return name if name in OPERATIONS else None


def _type_tools(mem: MemoryCore, etype: EntityType) -> list[dict[str, Any]]:
    td = etype.typedef
    about = f" {td.description}" if td.description else ""
    identity = ", ".join(td.identity) if td.identity else "all given fields"
    tools = [_op_tool(
        f"create_{td.name}", "create",
        f"Create a {td.name}.{about} Its ID derives from {identity}: creating the same again "
        f"meets on_conflict. {ENTITY_RESULT}",
        {"data": model_schema(etype), **_create_options()})]
    tools.append(_op_tool(
        f"query_{td.name}", "query",
        f"List {td.name} entities matching exact filters, in a stable order, one page at a "
        "time. Returns {items: [entity], next_cursor}.",
        model_args("query", "where", "order_by", "limit", "cursor",
                   where=where_schema(etype), order_by=order_schema(etype),
                   limit={"maximum": mem.settings.max_page_size})))
    if td.embed is not None:
        scope = ("conversation",) if CONVERSATION_FIELD in td.fields else ()
        tools.append(_op_tool(
            f"search_{td.name}", "search",
            f"Find {td.name} entities by meaning and keywords (text: {td.embed}), optionally "
            "under exact filters. Returns {hits: [{entity, score}], receipt}.",
            model_args("search", "text", "where", "k", "mode", "reference_time", *scope,
                       text={"description": "What to look for."}, where=where_schema(etype),
                       k={"maximum": mem.settings.max_k},
                       mode={"description": "hybrid (vectors + keywords), vector or keyword."},
                       reference_time={"description": REFERENCE_TIME_DOC},
                       conversation={"description": CONVERSATION_DOC})))
    return tools


def _create_options() -> dict[str, Any]:
    return model_args(
        "create", "id", "on_conflict", "ttl",
        id={"description": "A chosen ID instead of the one derived from the identity."},
        on_conflict={"description": "When the identity exists: return it (differs lists the "
                                    "given fields that differ), raise a conflict, or update "
                                    "it."},
        ttl={"description": TTL_DOC})


def field_line(name: str, spec: Any, identity: tuple[str, ...]) -> str:
    """One field of a type in the compact tool text: ``name*:kind=default (description)``."""
    kind = spec.type
    if kind == "enum":
        kind = "|".join(spec.values or ())
    elif kind == "list":
        kind = f"[{spec.item or 'str'}]"
    text = f"{name}{'*' if name in identity else ''}{'!' if spec.required else ''}:{kind}"
    if spec.default not in (None, [], ""):
        text += f"={spec.default}"
    if spec.description:
        text += f" ({spec.description.rstrip('.')})"
    return text


def type_summary(etype: EntityType) -> str:
    """A type in one line: its fields, identity, relations and whether it is searchable."""
    td = etype.typedef
    identity = tuple(td.identity or ())
    fields = ", ".join(field_line(n, s, identity) for n, s in td.fields.items())
    line = f"{td.name}"
    if td.description:
        line += f" - {td.description.rstrip('.')}"
    line += f": {fields}"
    if td.relations:
        line += "; links " + ", ".join(f"{r}->{s.target}" for r, s in td.relations.items())
    if td.embed is None:
        line += "; not searchable"
    return line


def _compact_tools(mem: MemoryCore, types: list[EntityType]) -> list[dict[str, Any]]:
    names = [t.name for t in types]
    searchable = [t.name for t in types if t.typedef.embed is not None]
    type_arg: dict[str, Any] = {"type": "string", "description": "The entity type."}
    if names:
        type_arg["enum"] = names
    catalogue = "\n".join(type_summary(t) for t in types) or "(no types defined)"
    search_type = {**type_arg, "description": "Limit to one type (omit: every searchable "
                   "type)."}
    if searchable:
        search_type["enum"] = searchable
    order = {"description": "Field(s) or created_at/updated_at/version to sort by, '-field' "
                            "descending; ties by ID."}
    scope = ("conversation",) if any(
        CONVERSATION_FIELD in t.fields for t in types if t.typedef.embed is not None) else ()
    return [
        _op_tool("create", "create",
                 "Create an entity. Types (field:kind=default; * identity: the ID derives "
                 "from these, creating the same again meets on_conflict; ! required):\n"
                 f"{catalogue}\n{ENTITY_RESULT}",
                 {"type": type_arg,
                  **model_args("create", "data",
                               data={"description": "{field: value} of the type."}),
                  **_create_options()}),
        _op_tool("query", "query",
                 "List entities of a type matching exact filters, in a stable order, one page "
                 "at a time. Returns {items: [entity], next_cursor}.",
                 {"type": type_arg,
                  **model_args("query", "where", "order_by", "limit", "cursor", described=False,
                               where={"description": FILTER_DOC_BRIEF}, order_by=order,
                               limit={"maximum": mem.settings.max_page_size},
                               cursor={"description": "next_cursor of the last page."})}),
        _op_tool("search", "search",
                 "Find entities by meaning and keywords, optionally under exact filters. "
                 "Returns {hits: [{entity, score}]}.",
                 model_args("search", "text", "type", "where", "k", "mode", "reference_time",
                            *scope, described=False, type=search_type,
                            where={"description": "Filter (needs type); see query."},
                            k={"maximum": mem.settings.max_k},
                            reference_time={"description": REFERENCE_TIME_DOC},
                            conversation={"description": CONVERSATION_DOC})),
    ]


def _generic_tools(types: list[EntityType], compact: bool = False) -> list[dict[str, Any]]:
    """The type-independent tools (``compact``: relations and IDs are described in create's
    type list, not again in every tool)."""
    relations = sorted({r for t in types for r in t.typedef.relations})
    rel_doc = "; ".join(f"{t.name}.{r} -> {s.target}" for t in types
                        for r, s in sorted(t.typedef.relations.items()))
    relation: dict[str, Any] = {"type": "string",
                                "description": "Relation name (see create's types)." if compact
                                else f"Relation name ({rel_doc or 'none'})."}
    if relations:
        relation["enum"] = relations
    type_names = ", ".join(t.name for t in types) or "none"
    id_only = {"id": ID_SCHEMA if compact else ID_ARG}
    link_args = model_args("link", "from_id", "relation", "to_id", described=not compact,
                           relation=relation)
    steps = "; ".join(f"{name} {{{', '.join(a.name for a in op.args if a.required)}}}"
                      for name, op in OPERATIONS.items())
    plan_step = {
        "type": "object", "required": ["op"],
        "properties": {"op": {"type": "string", "enum": list(OPS)}},
        "description": "One operation: {op, ...the arguments of the tool of that name}; "
                       f"required: {steps}. A value may be a reference to an earlier step's "
                       "result: \"$0.id\", \"$2.hits[0].entity.id\", \"$1.items[0].data.x\".",
    }
    return [
        _op_tool("get", "get", f"Get one entity by ID (any type: {type_names}). {ENTITY_RESULT}",
                 {**id_only, **model_args("get", "as_of", as_of={
                     "description": "As of this audit seq or ISO time."})}),
        _op_tool("update", "update", "Change some fields of an entity (the fields of its type, see "
                 "create; identity fields cannot change: create the new entity and delete the "
                 f"old). {ENTITY_RESULT}",
                 {**id_only, **model_args("update", "data", data={
                     "description": "{field: new value} ({} with a ttl: only a new expiry)"}),
                  "expected_version": VERSION_SCHEMA,
                  **model_args("update", "ttl", ttl={"description": TTL_DOC})}),
        _op_tool("append", "append",
                 f"Append values to a list field of an entity. {ENTITY_RESULT}",
                 {**id_only, **model_args("append", "field", "values", described=not compact,
                                          field={"description": "A list field."}),
                  "expected_version": VERSION_SCHEMA}),
        _op_tool("delete", "delete", f"Soft-delete an entity (restorable). {ENTITY_RESULT}",
                 {**id_only, "expected_version": VERSION_SCHEMA}),
        _op_tool("restore", "restore", f"Undo the soft delete of an entity. {ENTITY_RESULT}",
                 {**id_only, "expected_version": VERSION_SCHEMA}),
        _op_tool("link", "link", "Link two entities by a relation of the first one's type. "
                 "Returns {linked: false} when the link already existed.", link_args),
        _op_tool("unlink", "unlink", "Remove a link between two entities.",
                 copy.deepcopy(link_args)),
        _op_tool("related", "related", "Entities linked to an entity, nearest first. Returns "
                 "[{relation, direction, depth, from_id, entity}].",
                 {**id_only, **model_args("related", "relation", "direction", "depth",
                                          described=not compact, relation=relation)}),
        _op_tool("history", "history", "Every audit event of an entity, oldest first.",
                 id_only),
        _tool("execute_plan", "Run several operations as one atomic plan: all of it is "
              "validated first (an invalid plan returns every problem and changes nothing), "
              "then committed in one transaction. dry_run=true shows the diff only. Returns "
              "{results, diff, committed, seq_range}.",
              {"ops": {"type": "array", "minItems": 1, "items": plan_step},
               "dry_run": {"type": "boolean", "default": False}}, ["ops"]),
    ]


def _messages_tool() -> dict[str, Any]:
    one = {**MESSAGE_SCHEMA, "required": ["role", "content"], "properties": {
        k: v for k, v in MESSAGE_SCHEMA["properties"].items() if k not in ("speaker", "text")}}
    return _op_tool("add_messages", "add_messages",
                    "Append chat messages to a conversation's log, oldest first (a stored turn "
                    "comes back as it is). Returns [entity].",
                    {"conversation": {**ID_SCHEMA, "description": "Conversation ID."},
                     **model_args("add_messages", "messages", messages={"items": one})})


# ---------------------------------------------------------------- calls


def call_tool(mem: MemoryCore, name: str, arguments: Mapping[str, Any], *,
              actor: str | None = None, reason: str | None = None,
              trace_id: str | None = None) -> Any:
    """Execute one tool call (its name and arguments checked by
    :class:`~dmf_hybrid._internal.operations.ToolCall`); returns its JSON-able result."""
    args = dict(arguments)
    if name == "context":  # a read that is no plan step: see dmf_hybrid._internal.lifecycle.context
        return call_context_tool(mem, args)
    if name == "execute_plan":
        try:
            plan = PlanRequest.of(**args)
        except PlanError:
            raise
        except DMFError as exc:
            problems = Problems()
            problems.add(None, exc.details.get("field"), exc.message)
            raise problems.error("execute_plan call is invalid and changed nothing",
                                 steps=False) from None
        return execute_plan(mem, plan.ops, dry_run=plan.dry_run, actor=actor, reason=reason,
                            trace_id=trace_id).model_dump(mode="json")
    op = _as_step(mem, name, args)
    if op["op"] == "search" and "type" not in op:
        return _search_all(mem, op, actor, reason, trace_id)
    try:
        outcome = execute_plan(mem, [op], actor=actor, reason=reason, trace_id=trace_id)
    except PlanError as exc:
        problems = Problems([dict(p) for p in exc.details.get("problems", [])])
        raise problems.error(f"{name} call is invalid and changed nothing", steps=False
                             ) from None
    return outcome.results[0]


def _search_all(mem: MemoryCore, step: dict[str, Any], actor: str | None,
                reason: str | None, trace_id: str | None) -> dict[str, Any]:
    """``search`` without a type: every searchable type in one read-only plan, hits merged."""
    if step.get("where") is not None:
        problems = Problems()
        problems.add(0, "where", "a filter needs a type", "add type, or leave out where")
        raise problems.error()
    names = [t.name for t in visible_types(mem) if t.typedef.embed is not None and (
        step.get("conversation") is None or CONVERSATION_FIELD in t.fields)]
    if not names and step.get("conversation") is not None and not log_available(mem.types()):
        problems = Problems()
        problems.add(0, "conversation", "no searchable type has a conversation field",
                     "leave out conversation")
        raise problems.error()
    if not names:
        return {"hits": [], "types": []}
    k = step.get("k", next(a.default for a in OPERATIONS["search"].args if a.name == "k"))
    ops = [{**step, "type": n} for n in names]
    try:
        outcome = execute_plan(mem, ops, actor=actor, reason=reason, trace_id=trace_id)
    except PlanError as exc:
        problems = Problems([{**p, "step": 0} for p in exc.details.get("problems", [])][:1])
        raise problems.error("search call is invalid and changed nothing", steps=False
                             ) from None
    results: list[Any] = list(outcome.results)
    hits: list[dict[str, Any]] = [h for result in results for h in result["hits"]]
    hits.sort(key=lambda h: (-h["score"], h["entity"]["id"]))
    return {"hits": hits[:k] if isinstance(k, int) else hits, "types": names}


def tool_names(mem: MemoryCore) -> list[str]:
    """The names of every tool ``call_tool`` accepts, of either profile (no schemas built)."""
    names = list(COMPACT_TOOLS)
    for etype in mem.types():
        names += [f"create_{etype.name}", f"query_{etype.name}"]
        if etype.typedef.embed is not None:
            names.append(f"search_{etype.name}")
    extra = ["add_messages"] if log_available(mem.types()) else []
    return [n for n in names if full_match(TOOL_NAME_RE, n)] + list(GENERIC_TOOLS) + extra


def _as_step(mem: MemoryCore, name: Any, args: dict[str, Any]) -> dict[str, Any]:
    known = tool_names(mem)
    if not isinstance(name, str) or name not in known:
        problems = Problems()
        near = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        problems.add(0, "name", f"unknown tool {name!r}",
                     (f"did you mean {', '.join(near)}? " if near else "")
                     + f"tools: {', '.join(known)}")
        raise problems.error()
    if "op" in args:
        problems = Problems()
        problems.add(0, "op", f"{name} takes no argument 'op'")
        raise problems.error()
    op = tool_operation(name)
    if op in COMPACT_TOOLS and name != op:
        if "type" in args:
            problems = Problems()
            problems.add(0, "type", f"{name} takes no argument 'type'", f"use {op} for that")
            raise problems.error()
        if op == "create" and "data" not in args and set(args) - set(OPERATIONS["create"].names):
            problems = Problems()
            problems.add(0, "data", f"{name} takes the fields in data",
                         f"call it as {{\"data\": {{{', '.join(map(repr, sorted(args)))}: ...}}}}")
            raise problems.error(f"{name} call is invalid and changed nothing", steps=False)
        return {"op": op, "type": name[len(op) + 1:], **args}
    return {"op": name, **args}
