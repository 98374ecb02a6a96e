"""The operations a plan may use (one table: method, arguments, defaults, role) and their
results as JSON values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..checks import DEFAULT_ON_CONFLICT
from ..models import AuditEvent, Entity, Page, Related

MAX_PROBLEMS = 50
ORDER_SYSTEM = ("created_at", "updated_at", "version")
READER, WRITER = "reader", "writer"


@dataclass(frozen=True)
class Arg:
    """One argument of an operation: its name in a plan step, the MemoryAPI parameter it
    fills, whether it is required, its kind (checked statically when the value is literal) and
    its default (the method's own; a test checks they agree)."""

    name: str
    kind: str
    required: bool = False
    param: str | None = None
    default: Any = None

    @property
    def parameter(self) -> str:
        """The name of the MemoryAPI parameter this argument fills."""
        return self.param or self.name


@dataclass(frozen=True)
class Operation:
    """A plan operation: the MemoryAPI method it calls, its arguments and the role it needs."""

    name: str
    method: str
    args: tuple[Arg, ...]
    role: str

    @property
    def names(self) -> tuple[str, ...]:
        """The names of its arguments in a plan step."""
        return tuple(a.name for a in self.args)

    @property
    def writes(self) -> bool:
        """Whether the operation changes the memory (and takes the audit context)."""
        return self.role == WRITER


_ID = Arg("id", "id", True, "entity_id")
_VERSION = Arg("expected_version", "int")
_TTL = Arg("ttl", "ttl")
#: Every plan operation, read by the executor, the tool definitions and the HTTP routes.
OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("create", "create", (Arg("type", "type", True, "type_name"),
                                   Arg("data", "object", True), Arg("id", "id"),
                                   Arg("on_conflict", "on_conflict",
                                       default=DEFAULT_ON_CONFLICT), _TTL), WRITER),
    Operation("update", "update", (_ID, Arg("data", "object", True, "changes"), _VERSION,
                                   _TTL), WRITER),
    Operation("append", "append", (_ID, Arg("field", "str", True), Arg("values", "list", True),
                                   _VERSION), WRITER),
    Operation("delete", "delete", (_ID, _VERSION), WRITER),
    Operation("restore", "restore", (_ID, _VERSION), WRITER),
    Operation("link", "link", (Arg("from_id", "id", True), Arg("relation", "str", True),
                               Arg("to_id", "id", True)), WRITER),
    Operation("unlink", "unlink", (Arg("from_id", "id", True), Arg("relation", "str", True),
                                   Arg("to_id", "id", True)), WRITER),
    Operation("get", "get", (_ID, Arg("as_of", "int")), READER),
    Operation("query", "query", (Arg("type", "type", True, "type_name"), Arg("where", "object"),
                                 Arg("order_by", "order"), Arg("limit", "int", default=50),
                                 Arg("cursor", "str")), READER),
    Operation("search", "search", (Arg("type", "type", True, "type_name"),
                                   Arg("text", "str", True), Arg("where", "object"),
                                   Arg("k", "int", default=10),
                                   Arg("mode", "mode", default="hybrid"),
                                   Arg("conversation", "id"),
                                   Arg("reference_time", "str")), READER),
    Operation("related", "related", (_ID, Arg("relation", "str"),
                                     Arg("direction", "direction", default="out"),
                                     Arg("depth", "int", default=1)), READER),
    Operation("history", "history", (_ID,), READER),
    Operation("add_messages", "add_messages", (Arg("conversation", "id", True),
                                               Arg("messages", "list", True)), WRITER),
)}
MUTATING_OPS = tuple(n for n, op in OPERATIONS.items() if op.writes)
READ_OPS = tuple(n for n, op in OPERATIONS.items() if not op.writes)
ENTITY_OPS = ("create", "update", "append", "delete", "restore", "get")

# op -> {argument: (required, kind)}, with the audit ``reason`` every step may carry
OP_ARGS: dict[str, dict[str, tuple[bool, str]]] = {
    name: {**{a.name: (a.required, a.kind) for a in op.args}, "reason": (False, "str")}
    for name, op in OPERATIONS.items()}
OPS = tuple(OP_ARGS)
LITERAL_ONLY = ("op", "type", "relation", "field", "mode", "direction", "on_conflict")


def entity_json(entity: Entity, *, created: bool | None = None) -> dict[str, Any]:
    """An entity as the tools return it: id, type, version, data (JSON values)."""
    data = entity.data.model_dump(mode="json") if isinstance(entity.data, BaseModel) \
        else dict(entity.data)
    out: dict[str, Any] = {"id": entity.id, "type": entity.type, "version": entity.version,
                           "data": data}
    if created is not None:
        out["created"] = created
        if entity.differs:
            out["differs"] = list(entity.differs)
    if entity.deleted_at is not None:
        out["deleted"] = True
    if entity.expires_at is not None:
        out["expires_at"] = entity.expires_at.isoformat()
    return out


def result_json(op: str, value: Any) -> Any:
    """The JSON-able result of one operation."""
    if isinstance(value, Entity):
        return entity_json(value, created=value.created if op == "create" else None)
    if op == "add_messages":
        return [entity_json(e, created=e.created) for e in value]
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
