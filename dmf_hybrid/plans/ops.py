"""The operations a plan may use: their arguments, and their results as JSON values."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from ..models import AuditEvent, Entity, Page, Related

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
SEARCH_MODES = ("hybrid", "vector", "keyword")
DIRECTIONS = ("out", "in", "both")
MUTATING_OPS = ("create", "update", "append", "delete", "restore", "link", "unlink")
READ_OPS = ("get", "query", "search", "related", "history")
ENTITY_OPS = ("create", "update", "append", "delete", "restore", "get")
MAX_PROBLEMS = 50
ORDER_SYSTEM = ("created_at", "updated_at", "version")

# op -> {argument: (required, kind)}; kinds are checked statically when the value is literal.
OP_ARGS: dict[str, dict[str, tuple[bool, str]]] = {
    "create": {"type": (True, "type"), "data": (True, "object"), "id": (False, "id")},
    "update": {"id": (True, "id"), "changes": (True, "object"),
               "expected_version": (False, "int")},
    "append": {"id": (True, "id"), "field": (True, "str"), "values": (True, "list"),
               "expected_version": (False, "int")},
    "delete": {"id": (True, "id"), "expected_version": (False, "int")},
    "restore": {"id": (True, "id"), "expected_version": (False, "int")},
    "link": {"from_id": (True, "id"), "relation": (True, "str"), "to_id": (True, "id")},
    "unlink": {"from_id": (True, "id"), "relation": (True, "str"), "to_id": (True, "id")},
    "get": {"id": (True, "id"), "as_of": (False, "int")},
    "query": {"type": (True, "type"), "where": (False, "object"), "order_by": (False, "order"),
              "limit": (False, "int"), "cursor": (False, "str")},
    "search": {"type": (True, "type"), "text": (True, "str"), "where": (False, "object"),
               "k": (False, "int"), "mode": (False, "mode")},
    "related": {"id": (True, "id"), "relation": (False, "str"), "direction": (False, "direction"),
                "depth": (False, "int")},
    "history": {"id": (True, "id")},
}
for _args in OP_ARGS.values():
    _args["reason"] = (False, "str")
OPS = tuple(OP_ARGS)
LITERAL_ONLY = ("op", "type", "relation", "field", "mode", "direction")


def entity_json(entity: Entity, *, created: bool | None = None) -> dict[str, Any]:
    """An entity as the tools return it: id, type, version, data (JSON values)."""
    data = entity.data.model_dump(mode="json") if isinstance(entity.data, BaseModel) \
        else dict(entity.data)
    out: dict[str, Any] = {"id": entity.id, "type": entity.type, "version": entity.version,
                           "data": data}
    if created is not None:
        out["created"] = created
    if entity.deleted_at is not None:
        out["deleted"] = True
    return out


def result_json(op: str, value: Any) -> Any:
    """The JSON-able result of one operation."""
    if isinstance(value, Entity):
        return entity_json(value, created=value.created if op == "create" else None)
    if isinstance(value, Page):
        return {"items": [entity_json(e) for e in value.items], "next_cursor": value.next_cursor}
    if op == "search":
        return {
            "hits": [{"entity": entity_json(h.entity), "score": h.score,
                      "legs": {k: v.model_dump() for k, v in h.legs.items()}}
                     for h in value.hits],
            "receipt": value.receipt.model_dump(mode="json"),
        }
    if isinstance(value, list) and all(isinstance(v, Related) for v in value):
        return [{"relation": r.relation, "direction": r.direction, "depth": r.depth,
                 "from_id": r.from_id, "entity": entity_json(r.entity)} for r in value]
    if isinstance(value, list) and all(isinstance(v, AuditEvent) for v in value):
        return [e.model_dump(mode="json", exclude={"payload_hash", "prev_hash", "hash"})
                for e in value]
    return value
