"""The JSON Schemas of the agent tools' arguments: an operation's arguments as its request
model states them (:func:`model_args`), and what only a type can say: its data
(:func:`model_schema`), its filters (:func:`where_schema`) and orders (:func:`order_schema`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

from .checks import MAX_ORDER_FIELDS
from .operations import REQUESTS
from .plans import ORDER_SYSTEM
from .schema import EntityType


def model_args(op: str, *names: str, described: bool = True, **more: Mapping[str, Any]
               ) -> dict[str, Any]:
    """The tool parameters ``names`` of an operation, as its request model states them
    (without the null alternative: a tool leaves an argument out instead; the default is the
    operation table's to add), each with what the tool says more merged over it
    (``more[name]``: a type's names, the settings' limits, a shorter description).
    ``described=False`` (the compact profile, whose size counts): only the descriptions the
    tool gives in ``more``."""
    props = _model_properties(op)
    out = {}
    for name in names:
        schema = copy.deepcopy(props[name])
        if not described:
            schema.pop("description", None)
        out[name] = {**schema, **more.get(name, {})}
    return out


@functools.cache
def _model_properties(op: str) -> dict[str, dict[str, Any]]:
    raw = REQUESTS[op].model_json_schema()
    defs = raw.pop("$defs", {})
    props = _clean(_inline(raw, defs)).get("properties", {})
    out = {}
    for name, prop in props.items():
        schema = _non_null(prop)
        if schema.get("additionalProperties") is True:  # JSON Schema's default: noise
            del schema["additionalProperties"]
        if "description" in prop:
            schema["description"] = prop["description"]
        out[name] = schema
    return out


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
    return {"anyOf": [one, {"type": "array", "items": one, "minItems": 1,
                                              "maxItems": MAX_ORDER_FIELDS}],
            "description": "Field(s) to sort by, '-field' for descending; ties by ID."}
