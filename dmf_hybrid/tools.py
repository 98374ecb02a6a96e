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

from .checks import ID_PATTERN, ON_CONFLICT, TOOL_NAME_RE, full_match
from .conversations import CONVERSATION_FIELD, log_available
from .core import MemoryCore
from .errors import PlanError, ValidationError
from .expiry import MAX_TTL_SECONDS, NEVER
from .filters import FILTER_DOC_BRIEF
from .lifecycle.context import call_context_tool, context_tool_definition
from .lifecycle.summaries import SUMMARY_TYPE
from .plans import (
    DIRECTIONS,
    OPERATIONS,
    OPS,
    ORDER_SYSTEM,
    SEARCH_MODES,
    Problems,
    execute_plan,
)
from .schema import EntityType

log = logging.getLogger(__name__)

FORMATS = ("openai", "json_schema")
PROFILES = ("compact", "per_type")
#: Types the memory keeps for itself: hidden from the tools unless asked for.
INTERNAL_TYPES = (SUMMARY_TYPE,)
ID_SCHEMA: dict[str, Any] = {
    "type": "string", "pattern": ID_PATTERN,
    "description": "An entity ID, as returned by create/query/search.",
}
TTL_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_SECONDS},
              {"const": NEVER}],
    "description": 'Expiry: seconds from now, or "never".'}
VERSION_SCHEMA: dict[str, Any] = {
    "type": "integer", "minimum": 1,
    "description": "Fail with a version conflict unless the entity is at this version.",
}
ENTITY_RESULT = "Returns the entity as {id, type, version, data}."
CONVERSATION_ARG: dict[str, Any] = {
    "type": "string", "pattern": ID_PATTERN,
    "description": "Only this conversation's rows (types with a conversation field, e.g. "
                   "Message).",
}
GENERIC_TOOLS = ("get", "update", "append", "delete", "restore", "link", "unlink", "related",
                 "history", "execute_plan", "context")
COMPACT_TOOLS = ("create", "query", "search")
#: ``search``'s reference time, as a tool argument.
REFERENCE_TIME_ARG = {"type": "string", "description": "ISO-8601 date or time the query's "
                      "time phrases ('last week', '上周') are read against; default now."}


def visible_types(mem: MemoryCore, internal: bool = False) -> list[EntityType]:
    """The types the tools describe (internal ones only when asked for)."""
    return [t for t in mem.types() if internal or t.name not in INTERNAL_TYPES]


def tool_definitions(mem: MemoryCore, format: str = "openai", profile: str = "compact",
                     internal: bool = False) -> list[dict[str, Any]]:
    """Function-calling definitions of the memory operations for the defined types."""
    if format not in FORMATS:
        raise ValidationError(f"format must be one of {', '.join(FORMATS)}", field="format")
    if profile not in PROFILES:
        raise ValidationError(f"profile must be one of {', '.join(PROFILES)}", field="profile")
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


def model_schema(etype: EntityType) -> dict[str, Any]:
    """The JSON Schema of a type's data: properties, required, enums, descriptions; no $refs."""
    raw = etype.model.model_json_schema()
    defs = raw.pop("$defs", {})
    schema = _clean(_inline(raw, defs))
    props = schema.get("properties", {})
    for name, spec in etype.fields.items():
        prop = props.get(name)
        if prop is not None and spec.description and "description" not in prop:
            prop["description"] = spec.description
    out: dict[str, Any] = {"type": "object", "properties": props,
                           "additionalProperties": False}
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


def _inline(node: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    if depth > 20:
        return {}
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = copy.deepcopy(defs.get(ref.split("/")[-1], {}))
            merged = {**_inline(target, defs, depth + 1),
                      **{k: v for k, v in node.items() if k != "$ref"}}
            return merged
        return {k: _inline(v, defs, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs, depth + 1) for v in node]
    return node


def _clean(node: Any) -> Any:
    """Drop pydantic's generated titles (noise for a model) everywhere but in properties."""
    if isinstance(node, dict):
        return {k: (_clean(v) if k != "properties" else {n: _clean(p) for n, p in v.items()})
                for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _non_null(prop: Mapping[str, Any]) -> dict[str, Any]:
    """A property schema without its ``null`` alternative (and without default)."""
    options = prop.get("anyOf")
    base = {k: v for k, v in prop.items() if k not in ("anyOf", "default", "description")}
    if isinstance(options, list):
        rest = [o for o in options if o.get("type") != "null"]
        if len(rest) == 1:
            base.update(rest[0])
        else:
            base["anyOf"] = rest
    return base


def where_schema(etype: EntityType) -> dict[str, Any]:
    """The JSON Schema of a ``where`` filter on a type."""
    props = model_schema(etype)["properties"]
    fields: dict[str, Any] = {}
    for name, spec in etype.fields.items():
        value = _non_null(props.get(name, {}))
        nullable = {"anyOf": [value, {"type": "null"}]}
        if spec.type == "list":
            item = value.get("items", {})
            ops: dict[str, Any] = {"$contains": item}
        else:
            ops = {"$eq": nullable, "$ne": nullable, "$in": {"type": "array", "items": value},
                   "$nin": {"type": "array", "items": value}}
            if spec.type != "bool":
                ops.update({"$gt": value, "$gte": value, "$lt": value, "$lte": value})
            if spec.type == "str":
                ops["$contains"] = {"type": "string"}
        fields[name] = {
            "anyOf": [nullable, {"type": "object", "properties": ops,
                                 "additionalProperties": False, "minProperties": 1}],
            "description": f"{name} equals a value, or an operator object like "
                           f"{{\"{next(iter(ops))}\": ...}}",
        }
    sub = {"type": "array", "items": {"type": "object"}, "minItems": 1,
           "description": "A list of filters of this same form."}
    fields["$and"] = sub
    fields["$or"] = sub
    return {"type": "object", "properties": fields, "additionalProperties": False,
            "description": "Filter: {field: value} or {field: {\"$gt\": value}}; operators "
                           "$eq $ne $gt $gte $lt $lte $in $nin $contains; several fields "
                           "must all hold; $and / $or combine lists of filters."}


def order_schema(etype: EntityType) -> dict[str, Any]:
    """The JSON Schema of ``order_by`` on a type."""
    names = [n for n, s in etype.fields.items() if s.type != "list"] + list(ORDER_SYSTEM)
    keys = sorted(names + [f"-{n}" for n in names])
    one = {"type": "string", "enum": keys}
    return {"anyOf": [one, {"type": "array", "items": one, "minItems": 1, "maxItems": 4}],
            "description": "Field(s) to sort by, '-field' for descending; ties by ID."}


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
    tools = [_tool(
        f"create_{td.name}",
        f"Create a {td.name}.{about} Its ID derives from {identity}: creating the same again "
        f"meets on_conflict. {ENTITY_RESULT}",
        {"data": model_schema(etype), **_create_options()}, ["data"])]
    tools.append(_op_tool(
        f"query_{td.name}", "query",
        f"List {td.name} entities matching exact filters, in a stable order, one page at a "
        "time. Returns {items: [entity], next_cursor}.",
        {"where": where_schema(etype), "order_by": order_schema(etype),
         "limit": {"type": "integer", "minimum": 1, "maximum": mem.settings.max_page_size,
                   "description": "Page size."},
         "cursor": {"type": "string", "description": "next_cursor of the previous page."}}))
    if td.embed is not None:
        scope = {"conversation": CONVERSATION_ARG} if CONVERSATION_FIELD in td.fields else {}
        tools.append(_op_tool(
            f"search_{td.name}", "search",
            f"Find {td.name} entities by meaning and keywords (text: {td.embed}), optionally "
            "under exact filters. Returns {hits: [{entity, score}], receipt}.",
            {"text": {"type": "string", "minLength": 1, "description": "What to look for."},
             "where": where_schema(etype),
             "k": {"type": "integer", "minimum": 1, "maximum": mem.settings.max_k,
                   "description": "How many hits."},
             "mode": {"type": "string", "enum": list(SEARCH_MODES),
                      "description": "hybrid (vectors + keywords), vector or keyword."},
             "reference_time": REFERENCE_TIME_ARG, **scope}))
    return tools


def _create_options() -> dict[str, Any]:
    return {
        "id": {"type": "string", "pattern": ID_PATTERN,
               "description": "A chosen ID instead of the one derived from the identity."},
        "on_conflict": {
            "type": "string", "enum": list(ON_CONFLICT), "default": "return",
            "description": "When the identity exists: return it (differs lists the given "
                           "fields that differ), raise a conflict, or update it."},
        "ttl": TTL_SCHEMA}


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
    order = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                             "minItems": 1, "maxItems": 4}],
             "description": "Field(s) or created_at/updated_at/version to sort by, '-field' "
                            "descending; ties by ID."}
    where = {"type": "object", "description": FILTER_DOC_BRIEF}
    scope = {"conversation": CONVERSATION_ARG} if any(
        CONVERSATION_FIELD in t.fields for t in types if t.typedef.embed is not None) else {}
    return [
        _op_tool("create", "create",
                 "Create an entity. Types (field:kind=default; * identity: the ID derives "
                 "from these, creating the same again meets on_conflict; ! required):\n"
                 f"{catalogue}\n{ENTITY_RESULT}",
                 {"type": type_arg, "data": {"type": "object",
                                             "description": "{field: value} of the type."},
                  **_create_options()}),
        _op_tool("query", "query",
                 "List entities of a type matching exact filters, in a stable order, one page "
                 "at a time. Returns {items: [entity], next_cursor}.",
                 {"type": type_arg, "where": where, "order_by": order,
                  "limit": {"type": "integer", "minimum": 1,
                            "maximum": mem.settings.max_page_size},
                  "cursor": {"type": "string", "description": "next_cursor of the last page."}}),
        _op_tool("search", "search",
                 "Find entities by meaning and keywords, optionally under exact filters. "
                 "Returns {hits: [{entity, score}]}.",
                 {"text": {"type": "string", "minLength": 1}, "type": search_type,
                  "where": {**where, "description": "Filter (needs type); see query."},
                  "k": {"type": "integer", "minimum": 1, "maximum": mem.settings.max_k},
                  "mode": {"type": "string", "enum": list(SEARCH_MODES)},
                  "reference_time": REFERENCE_TIME_ARG, **scope}),
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
    id_schema = {"type": "string", "pattern": ID_PATTERN} if compact else ID_SCHEMA
    id_only = {"id": id_schema}
    plan_step = {
        "type": "object", "required": ["op"],
        "properties": {"op": {"type": "string", "enum": list(OPS)}},
        "description": "One operation: {op, ...the arguments of the tool of that name}: "
                       "create {type, data, id?, on_conflict?, ttl?}; update {id, data, "
                       "expected_version?, ttl?}; "
                       "append {id, field, values}; delete/restore {id}; link/unlink "
                       "{from_id, relation, to_id}; get {id}; query {type, where?, order_by?, "
                       "limit?}; search {type, text, where?, k?, mode?, conversation?}; "
                       "related {id, relation?};"
                       " history {id}. A value may be a reference to an earlier step's "
                       "result: \"$0.id\", \"$2.hits[0].entity.id\", \"$1.items[0].data.x\".",
    }
    return [
        _op_tool("get", "get", f"Get one entity by ID (any type: {type_names}). {ENTITY_RESULT}",
                 {**id_only, "as_of": {"type": "integer", "minimum": 0,
                                       "description": "Read it as of this audit seq."}}),
        _op_tool("update", "update", "Change some fields of an entity (the fields of its type, see "
                 "create; identity fields cannot change: create the new entity and delete the "
                 f"old). {ENTITY_RESULT}",
                 {**id_only, "data": {"type": "object",
                                      "description": "{field: new value} ({} with a ttl: "
                                                     "only a new expiry)"},
                  "expected_version": VERSION_SCHEMA, "ttl": TTL_SCHEMA}),
        _op_tool("append", "append",
                 f"Append values to a list field of an entity. {ENTITY_RESULT}",
                 {**id_only, "field": {"type": "string", "description": "A list field."},
                  "values": {"type": "array", "minItems": 1},
                  "expected_version": VERSION_SCHEMA}),
        _op_tool("delete", "delete", f"Soft-delete an entity (restorable). {ENTITY_RESULT}",
                 {**id_only, "expected_version": VERSION_SCHEMA}),
        _op_tool("restore", "restore", f"Undo the soft delete of an entity. {ENTITY_RESULT}",
                 {**id_only, "expected_version": VERSION_SCHEMA}),
        _op_tool("link", "link", "Link two entities by a relation of the first one's type. "
                 "Returns {linked: false} when the link already existed.",
                 {"from_id": id_schema, "relation": relation, "to_id": id_schema}),
        _op_tool("unlink", "unlink", "Remove a link between two entities.",
                 {"from_id": id_schema, "relation": relation, "to_id": id_schema}),
        _op_tool("related", "related", "Entities linked to an entity, nearest first. Returns "
                 "[{relation, direction, depth, from_id, entity}].",
                 {**id_only, "relation": relation,
                  "direction": {"type": "string", "enum": list(DIRECTIONS)},
                  "depth": {"type": "integer", "minimum": 1, "maximum": 5}}),
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
    message = {"type": "object", "additionalProperties": False,
               "properties": {"role": {"type": "string"}, "content": {"type": "string"},
                              "turn": {"type": "integer", "minimum": 0},
                              "session": {"type": "integer"},
                              "time": {"type": "string", "format": "date-time"}},
               "required": ["role", "content"]}
    return _op_tool("add_messages", "add_messages",
                    "Append chat messages to a conversation's log, oldest first (a stored turn "
                    "comes back as it is). Returns [entity].",
                    {"conversation": {"type": "string", "pattern": ID_PATTERN,
                                      "description": "Conversation ID."},
                     "messages": {"type": "array", "minItems": 1, "items": message}})


# ---------------------------------------------------------------- calls


def call_tool(mem: MemoryCore, name: Any, arguments: Any = None, *, actor: str | None = None,
              reason: str | None = None, trace_id: str | None = None) -> Any:
    """Validate and execute one tool call; returns its JSON-able result."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        problems = Problems()
        problems.add(0, "arguments", "arguments must be a JSON object")
        raise problems.error()
    args = dict(arguments)
    if name == "context":  # a read that is no plan step: see dmf_hybrid.lifecycle.context
        return call_context_tool(mem, args)
    if name == "execute_plan":
        unknown = sorted(set(args) - {"ops", "dry_run"})
        dry_run = args.get("dry_run", False)
        if unknown or "ops" not in args or not isinstance(dry_run, bool):
            problems = Problems()
            problems.add(None, unknown[0] if unknown else "ops" if "ops" not in args
                         else "dry_run", "execute_plan takes ops (a list) and dry_run (a bool)")
            raise problems.error()
        return execute_plan(mem, args["ops"], dry_run=dry_run, actor=actor, reason=reason,
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
