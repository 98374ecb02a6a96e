"""The operations a plan may use (one table: method, arguments, defaults, role) and their
results as JSON values.

An operation with a request model (:data:`dmf_hybrid._internal.operations.REQUESTS`) takes that
model's fields, with its defaults, and a literal value of one is checked by the model's own check of
the field (:meth:`~dmf_hybrid._internal.requests.Request.check_field`), so a plan step, a tool call
and a direct call refuse a bad argument with the same error. Before them come the arguments the
route's path carries (the type, the entity), after them the version ``If-Match`` carries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..errors import DMFError
from ..models import AuditEvent, Entity, Page, Related
from ..operations import REQUESTS
from ..requests import Request

ORDER_SYSTEM = ("created_at", "updated_at", "version")
READER, WRITER = "reader", "writer"
#: The kind of an argument that a request model states: checked by the model's own check.
MODEL = "model"


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
    model: type[Request] | None = None

    @property
    def parameter(self) -> str:
        """The name of the MemoryAPI parameter this argument fills."""
        return self.param or self.name

    def check(self, value: Any) -> Any:
        """A literal value checked as the operation's request model checks it (a
        :class:`~dmf_hybrid._internal.errors.DMFError` naming the argument when it is bad)."""
        assert self.model is not None, f"{self.name} is not an argument of a request model"
        try:
            return self.model.check_field(self.name, value)
        except DMFError as exc:  # named as the plan names it (update's data, not changes)
            if self.param and exc.details.get("field") == self.param:
                exc.message = exc.message.replace(self.param, self.name, 1)
                exc.args = (exc.message,)
                exc.details["field"] = self.name
            raise


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

    def arg(self, name: str) -> Arg:
        """Its argument of that name."""
        return next(a for a in self.args if a.name == name)

    @property
    def writes(self) -> bool:
        """Whether the operation changes the memory (and takes the audit context)."""
        return self.role == WRITER


def _modelled(op: str, *, before: tuple[Arg, ...] = (), after: tuple[Arg, ...] = (),
              params: dict[str, str] | None = None, required: tuple[str, ...] = ()
              ) -> tuple[Arg, ...]:
    """The arguments of an operation with a request model: ``before`` (what the route's path
    carries), the model's fields with their defaults (``params``: a field's MemoryAPI
    parameter where the names differ; ``required``: what a plan needs though the method does
    not), then ``after``."""
    model = REQUESTS[op]
    fields = [Arg(name, MODEL, field.is_required() or name in required,
                  (params or {}).get(name), None if field.is_required() else field.default, model)
              for name, field in model.model_fields.items()]
    fields.sort(key=lambda arg: not arg.required)  # required first, then in the model's order
    return before + tuple(fields) + after


_ID = Arg("id", "id", True, "entity_id")
_TYPE = Arg("type", "type", True, "type_name")
_VERSION = Arg("expected_version", "int")
#: Every plan operation, read by the executor, the tool definitions and the HTTP routes.
OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("create", "create", _modelled("create", before=(_TYPE,)), WRITER),
    Operation("update", "update", _modelled("update", before=(_ID,), after=(_VERSION,),
                                            params={"data": "changes"}), WRITER),
    Operation("append", "append", _modelled("append", before=(_ID,), after=(_VERSION,)),
              WRITER),
    Operation("delete", "delete", (_ID, _VERSION), WRITER),
    Operation("restore", "restore", (_ID, _VERSION), WRITER),
    Operation("link", "link", _modelled("link"), WRITER),
    Operation("unlink", "unlink", _modelled("unlink"), WRITER),
    Operation("get", "get", _modelled("get", before=(_ID,)), READER),
    Operation("query", "query", _modelled("query", before=(_TYPE,)), READER),
    Operation("search", "search", _modelled("search", params={"type": "type_name"},
                                            required=("text",)), READER),
    Operation("related", "related", _modelled("related", before=(_ID,)), READER),
    Operation("history", "history", (_ID,), READER),
    Operation("add_messages", "add_messages",
              _modelled("add_messages", before=(Arg("conversation", "id", True),)), WRITER),
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
