"""Agent tools: function-calling definitions of the memory operations, and one-call execution.

``tool_definitions(mem)`` lists, for every defined type ``T``, ``create_T``, ``query_T`` and
(when ``T`` is embedded) ``search_T`` with JSON-Schema parameters generated from the type's
pydantic model, plus the type-independent ``get``, ``update``, ``append``, ``delete``,
``restore``, ``link``, ``unlink``, ``related``, ``history`` and ``execute_plan``.
``call_tool(mem, name, arguments)`` turns a call into a one-step plan and runs it, so a bad
call raises the same :class:`PlanError` (with ``details["problems"]``) as a bad plan.
"""

from __future__ import annotations

import copy
import difflib
import logging
from collections.abc import Mapping
from typing import Any

from .checks import ID_PATTERN, TOOL_NAME_RE, full_match
from .embedded import EmbeddedMemory
from .errors import PlanError, ValidationError
from .lifecycle.context import call_context_tool, context_tool_definition
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
ID_SCHEMA: dict[str, Any] = {
    "type": "string", "pattern": ID_PATTERN,
    "description": "An entity ID, as returned by create/query/search.",
}
VERSION_SCHEMA: dict[str, Any] = {
    "type": "integer", "minimum": 1,
    "description": "Fail with a version conflict unless the entity is at this version.",
}
ENTITY_RESULT = "Returns the entity as {id, type, version, data}."
GENERIC_TOOLS = ("get", "update", "append", "delete", "restore", "link", "unlink", "related",
                 "history", "execute_plan", "context")


def tool_definitions(mem: EmbeddedMemory, format: str = "openai") -> list[dict[str, Any]]:
    """Function-calling definitions of the memory operations for the defined types."""
    if format not in FORMATS:
        raise ValidationError(f"format must be one of {', '.join(FORMATS)}", field="format")
    tools: list[dict[str, Any]] = []
    types = mem.types()
    for etype in types:
        tools.extend(_type_tools(mem, etype))
    tools.extend(_generic_tools(types))
    tools.append(context_tool_definition())
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


def _type_tools(mem: EmbeddedMemory, etype: EntityType) -> list[dict[str, Any]]:
    td = etype.typedef
    about = f" {td.description}" if td.description else ""
    identity = ", ".join(td.identity) if td.identity else "all given fields"
    data = model_schema(etype)
    tools = [{
        "name": f"create_{td.name}",
        "description": f"Create a {td.name}.{about} Its ID derives from {identity}: creating "
                       f"the same again returns the existing one (created=false). "
                       f"{ENTITY_RESULT}",
        "parameters": data,
    }]
    tools.append(_op_tool(
        f"query_{td.name}", "query",
        f"List {td.name} entities matching exact filters, in a stable order, one page at a "
        "time. Returns {items: [entity], next_cursor}.",
        {"where": where_schema(etype), "order_by": order_schema(etype),
         "limit": {"type": "integer", "minimum": 1, "maximum": mem.settings.max_page_size,
                   "description": "Page size."},
         "cursor": {"type": "string", "description": "next_cursor of the previous page."}}))
    if td.embed is not None:
        tools.append(_op_tool(
            f"search_{td.name}", "search",
            f"Find {td.name} entities by meaning and keywords (text: {td.embed}), optionally "
            "under exact filters. Returns {hits: [{entity, score}], receipt}.",
            {"text": {"type": "string", "minLength": 1, "description": "What to look for."},
             "where": where_schema(etype),
             "k": {"type": "integer", "minimum": 1, "maximum": mem.settings.max_k,
                   "description": "How many hits."},
             "mode": {"type": "string", "enum": list(SEARCH_MODES),
                      "description": "hybrid (vectors + keywords), vector or keyword."}}))
    return tools


def _generic_tools(types: list[EntityType]) -> list[dict[str, Any]]:
    relations = sorted({r for t in types for r in t.typedef.relations})
    rel_doc = "; ".join(f"{t.name}.{r} -> {s.target}" for t in types
                        for r, s in sorted(t.typedef.relations.items()))
    relation: dict[str, Any] = {"type": "string",
                                "description": f"Relation name ({rel_doc or 'none'})."}
    if relations:
        relation["enum"] = relations
    type_names = ", ".join(t.name for t in types) or "none"
    id_only = {"id": ID_SCHEMA}
    plan_step = {
        "type": "object", "required": ["op"],
        "properties": {"op": {"type": "string", "enum": list(OPS)}},
        "description": "One operation: {op, ...the arguments of the tool of that name}: "
                       "create {type, data, id?}; update {id, changes, expected_version?}; "
                       "append {id, field, values}; delete/restore {id}; link/unlink "
                       "{from_id, relation, to_id}; get {id}; query {type, where?, order_by?, "
                       "limit?}; search {type, text, where?, k?, mode?}; related {id, relation?};"
                       " history {id}. A value may be a reference to an earlier step's "
                       "result: \"$0.id\", \"$2.hits[0].entity.id\", \"$1.items[0].data.x\".",
    }
    return [
        _op_tool("get", "get", f"Get one entity by ID (any type: {type_names}). {ENTITY_RESULT}",
                 {**id_only, "as_of": {"type": "integer", "minimum": 0,
                                       "description": "Read it as of this audit seq."}}),
        _op_tool("update", "update", "Change some fields of an entity (the fields of its type, see "
              f"create_<Type>); bumps its version. {ENTITY_RESULT}",
                 {**id_only, "changes": {"type": "object", "minProperties": 1,
                                         "description": "{field: new value}"},
                  "expected_version": VERSION_SCHEMA}),
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
                 {"from_id": ID_SCHEMA, "relation": relation, "to_id": ID_SCHEMA}),
        _op_tool("unlink", "unlink", "Remove a link between two entities.",
                 {"from_id": ID_SCHEMA, "relation": relation, "to_id": ID_SCHEMA}),
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


# ---------------------------------------------------------------- calls


def call_tool(mem: EmbeddedMemory, name: Any, arguments: Any = None, *, actor: str | None = None,
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
                            trace_id=trace_id)
    op = _as_step(mem, name, args)
    try:
        outcome = execute_plan(mem, [op], actor=actor, reason=reason, trace_id=trace_id)
    except PlanError as exc:
        problems = Problems([dict(p) for p in exc.details.get("problems", [])])
        for problem in problems.items:
            fld = problem.get("field")
            if op["op"] == "create" and isinstance(fld, str) and fld.startswith("data."):
                problem["field"] = fld[len("data."):]
        raise problems.error(f"{name} call is invalid and changed nothing", steps=False
                             ) from None
    return outcome["results"][0]


def tool_names(mem: EmbeddedMemory) -> list[str]:
    """The names of the tools ``tool_definitions`` lists (cheap: no schemas are built)."""
    names = []
    for etype in mem.types():
        names += [f"create_{etype.name}", f"query_{etype.name}"]
        if etype.typedef.embed is not None:
            names.append(f"search_{etype.name}")
    return [n for n in names if full_match(TOOL_NAME_RE, n)] + list(GENERIC_TOOLS)


def _as_step(mem: EmbeddedMemory, name: Any, args: dict[str, Any]) -> dict[str, Any]:
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
    if op in ("create", "query", "search") and name != op:
        type_name = name[len(op) + 1:]
        if op == "create":
            return {"op": "create", "type": type_name, "data": args}
        return {"op": op, "type": type_name, **args}
    return {"op": name, **args}
