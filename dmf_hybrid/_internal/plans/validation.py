"""Static validation of a whole plan: every problem, with the step, field and a hint.

Nothing here writes. The validator follows the plan step by step, tracking what it knows
about each ID (its type, version, whether it is deleted) so that later steps can be checked
against the state earlier steps will leave.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import TypeAdapter

from ..bundled import lookup_type
from ..checks import ID_RE, full_match
from ..conversations import MESSAGE_TYPE, check_log_type, message_rows, scope_to_conversation
from ..core import MemoryCore
from ..errors import DMFError, NotFound, first_problem
from ..filters import parse_filter, parse_order
from ..operations import Problems
from ..schema import EntityType
from .ops import (
    LITERAL_ONLY,
    MODEL,
    OP_ARGS,
    OPERATIONS,
    OPS,
    ORDER_SYSTEM,
)
from .problems import close_matches, field_hint, shape_hint, similar_ids
from .refs import (
    MAX_NESTING,
    Ref,
    Shape,
    find_refs,
    known_type,
    nesting,
    parse_ref,
    resolve,
    result_shape,
    walk_shape,
)

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- static validation


@dataclass
class Known:
    """What the validator knows about an ID: its type, version and whether it is deleted."""

    type: str | None
    version: int | None
    deleted: bool


class Validator:
    """Checks a whole plan against the schema and the current state; writes nothing."""

    def __init__(self, mem: MemoryCore, ops: Sequence[Any]) -> None:
        self.mem = mem
        self.ops = ops
        self.problems = Problems()
        self.shapes: list[Shape | None] = []
        self.known: dict[str, Known] = {}
        self.planned: list[str] = []

    def run(self) -> Problems:
        """Every problem of the plan (empty when it validates)."""
        for i, step in enumerate(self.ops):
            try:
                self.shapes.append(self._step(i, step))
            except Exception:  # a validator bug must not hide the plan's real problems
                log.exception("plan validation of step %d failed", i)
                self.problems.add(i, None, "could not validate this step: check the shape "
                                  "of its arguments")
                self.shapes.append(None)
        return self.problems

    # .............................................................. one step

    def _step(self, i: int, step: Any) -> Shape | None:
        p = self.problems
        if not isinstance(step, Mapping):
            p.add(i, None, "a step must be an object like {\"op\": \"create\", ...}",
                  f"ops: {', '.join(OPS)}")
            return None
        if nesting(step) > MAX_NESTING:
            p.add(i, None, f"the step's arguments nest deeper than {MAX_NESTING} levels")
            return None
        op = step.get("op")
        if op not in OP_ARGS:
            p.add(i, "op", f"unknown op {op!r}", close_matches(op, OPS, "ops"))
            return None
        spec = OP_ARGS[op]
        before = len(p.items)
        for arg in step:
            if arg != "op" and arg not in spec:
                p.add(i, str(arg), f"{op} takes no argument {arg!r}",
                      f"{op} takes: {', '.join(a for a in spec)}")
        for arg, (required, _) in spec.items():
            if required and arg not in step:
                p.add(i, arg, f"{op} needs {arg!r}", f"{op} takes: {', '.join(spec)}")
        ref_shapes: dict[str, Shape] = {}
        ref_args: set[str] = set()
        for where, ref in find_refs({k: v for k, v in step.items() if k != "op"}, ""):
            where = where.lstrip(".")
            ref_args.add(where)
            if where.split(".")[0].split("[")[0] in LITERAL_ONLY:
                p.add(i, where, f"{where} must be a literal value, not a reference")
                continue
            shape = self._check_ref(i, where, ref)
            if shape is not None:
                ref_shapes[where] = shape
        for arg, (_, kind) in spec.items():
            if arg in step and arg not in ref_args:
                self._check_kind(i, op, arg, kind, step[arg])
        if len(p.items) > before:
            return None
        return getattr(self, f"_op_{op}")(i, step, ref_shapes)

    def _check_ref(self, i: int, where: str, ref: Ref) -> Shape | None:
        if ref.step >= i:
            self.problems.add(i, where, f"{ref.text} refers to step {ref.step}, but a step can "
                              "only use the results of earlier steps",
                              f"earlier steps: 0..{i - 1}" if i else "this is the first step")
            return None
        base = self.shapes[ref.step]
        if base is None:
            self.problems.add(i, where, f"{ref.text} refers to step {ref.step}, which is "
                              "itself invalid", "fix that step first")
            return None
        shape, why = walk_shape(self.mem, base, ref.path)
        if why is not None:
            op = self.ops[ref.step].get("op")
            self.problems.add(i, where, f"{ref.text} does not fit the result of step "
                              f"{ref.step} ({op}): that part {why}",
                              shape_hint(ref.step, op))
            return None
        return shape

    def _check_kind(self, i: int, op: str, arg: str, kind: str, value: Any) -> None:
        p = self.problems
        if kind == MODEL:  # the request model's own check: the error of a direct call
            try:
                OPERATIONS[op].arg(arg).check(value)
            except DMFError as exc:
                p.add(i, arg, exc.message[:300])
            return
        ok = {
            "type": isinstance(value, str),
            "id": isinstance(value, str) and full_match(ID_RE, value) is not None,
            "int": isinstance(value, int) and not isinstance(value, bool),
            "str": isinstance(value, str),
        }[kind]
        if ok:
            return
        hints = {"id": "an entity ID string, or a reference like '$0.id'"}
        expected = {"type": "a type name", "int": "an integer", "str": "a string"}.get(
            kind, hints.get(kind, kind))
        p.add(i, arg, f"{arg} must be {expected}, not {value!r}"[:300], hints.get(kind))

    # .............................................................. helpers

    def _type(self, i: int, name: Any, searchable: bool = False) -> EntityType | None:
        # not get_type: that would define a bundled type, and validation writes nothing
        etype = lookup_type(self.mem.types(), name)
        if etype is None:
            self.problems.add(i, "type", f"unknown entity type {name!r}",
                              close_matches(name, [t.name for t in self.mem.types()], "types"))
            return None
        if searchable and etype.typedef.embed is None:
            names = [t.name for t in self.mem.types() if t.typedef.embed is not None]
            self.problems.add(i, "type", f"{etype.name} has no embed template, so it cannot "
                              "be searched", f"searchable types: {', '.join(names) or 'none'}"
                              "; use query instead")
            return None
        return etype

    def _target(self, i: int, arg: str, value: Any, ref_shapes: Mapping[str, Shape],
                *, allow_deleted: bool = False) -> tuple[str | None, Known | None]:
        """(literal id or None, what is known about it); records problems."""
        if arg in ref_shapes:
            shape = ref_shapes[arg]
            if shape[0] == "id":
                return None, Known(shape[1], None, False)
            if shape[0] != "any":
                self.problems.add(i, arg, f"the reference in {arg} points at a {shape[0]}, "
                                  "not an ID", "end the reference with .id, e.g. '$0.id'")
            return None, None
        eid = str(value)
        known = self.known.get(eid)
        if known is None:
            try:
                entity = self.mem.get(eid)
                known = Known(entity.type, entity.version, False)
            except NotFound as exc:
                if exc.details.get("deleted_seq") is None:
                    self.problems.add(i, arg, f"no entity {eid} in this tenant",
                                      similar_ids(self.mem, eid, self.planned))
                    return eid, None
                known = Known(self._type_of_deleted(eid), None, True)
            self.known[eid] = known
        if known.deleted and not allow_deleted:
            self.problems.add(i, arg, f"entity {eid} is deleted",
                              "restore it first with {\"op\": \"restore\", \"id\": ...}")
            return eid, None
        return eid, known

    def _type_of_deleted(self, eid: str) -> str | None:
        return self.mem.reads.type_of_id(eid)

    def _version(self, i: int, step: Mapping[str, Any], eid: str | None,
                 known: Known | None) -> None:
        expected = step.get("expected_version")
        if expected is None or parse_ref(expected) is not None or known is None:
            return
        if known.version is not None and expected != known.version:
            later = " after the earlier steps of this plan" if eid in self.planned else ""
            self.problems.add(i, "expected_version", f"{eid} is at version {known.version}"
                              f"{later}, not {expected}",
                              f"use expected_version={known.version} (or omit it)")

    def _bump(self, eid: str | None, known: Known | None, *, deleted: bool | None = None,
              certain: bool = True) -> None:
        if eid is None or known is None:
            return
        self.known[eid] = Known(known.type, (known.version + 1) if (
            certain and known.version is not None) else None,
            known.deleted if deleted is None else deleted)
        if eid not in self.planned:
            self.planned.append(eid)

    def _fields(self, i: int, etype: EntityType, values: Mapping[str, Any], where: str,
                ref_paths: Sequence[str], *, partial: bool) -> None:
        """Check field names and literal values of ``data`` / ``changes``."""
        skipped = {p[len(where) + 1:].split(".")[0].split("[")[0] for p in ref_paths
                   if p.startswith(where + ".")}
        for name in values:
            if name not in etype.fields:
                self.problems.add(i, f"{where}.{name}", f"{etype.name} has no field {name!r}",
                                  close_matches(name, list(etype.fields), "fields"))
        literal = {k: v for k, v in values.items() if k in etype.fields and k not in skipped}
        if partial:
            for name, value in literal.items():
                spec = etype.fields[name]
                if value is None:
                    if not spec.nullable or spec.required:
                        self.problems.add(i, f"{where}.{name}", f"{etype.name}.{name} may not "
                                          "be null")
                    continue
                annotation: Any = etype.model.model_fields[name].annotation
                try:
                    TypeAdapter(annotation).validate_python(resolve(value, []))
                except pydantic.ValidationError as exc:
                    self.problems.add(i, f"{where}.{name}", first_problem(exc)[1],
                                      field_hint(etype, name))
            return
        try:
            etype.model.model_validate(resolve(literal, []))
        except pydantic.ValidationError as exc:
            for err in exc.errors():
                name = str(err["loc"][0]) if err["loc"] else ""
                if name in skipped:
                    continue
                loc = ".".join(str(x) for x in err["loc"])
                self.problems.add(i, f"{where}.{loc}" if loc else where,
                                  f"{etype.name}.{loc}: {err['msg']}", field_hint(etype, name))
        for name, value in literal.items():
            if value is None and not etype.fields[name].nullable:
                self.problems.add(i, f"{where}.{name}", f"{etype.name}.{name} may not be null")

    def _filter(self, i: int, etype: EntityType, step: Mapping[str, Any],
                ref_shapes: Mapping[str, Shape]) -> None:
        where = step.get("where")
        if where is not None and not any(p.startswith("where") for p in ref_shapes):
            try:
                parse_filter(etype, resolve(where, []))
            except DMFError as exc:
                self.problems.add(i, str(exc.details.get("field") or "where"), exc.message,
                                  close_matches(None, list(etype.fields), "fields")
                                  + "; operators: $eq $ne $gt $gte $lt $lte $in $nin $contains,"
                                  " $and/$or take lists")

    # .............................................................. ops

    def _op_create(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        before = len(self.problems.items)
        etype = self._type(i, step["type"])
        if etype is None:
            return result_shape("create", None)
        self._fields(i, etype, step["data"], "data", list(refs), partial=False)
        if not refs and len(self.problems.items) == before:
            try:
                eid = self.mem.reads.derived_id(etype, resolve(step["data"], []),
                                                step.get("id"))
            except DMFError as exc:
                self.problems.add(i, str(exc.details.get("field") or "data"), exc.message)
                return result_shape("create", etype.name)
            if eid not in self.known:
                try:
                    entity = self.mem.get(eid)
                    self.known[eid] = Known(entity.type, entity.version, False)
                except NotFound as exc:
                    if exc.details.get("deleted_seq") is not None:
                        self.problems.add(i, "data", f"{etype.name} {eid} with this identity "
                                          "exists but is deleted",
                                          f"restore it with {{\"op\": \"restore\", \"id\": "
                                          f"\"{eid}\"}} instead")
                    self.known[eid] = Known(etype.name, 1, False)
                    self.planned.append(eid)
        return result_shape("create", etype.name)

    def _op_update(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        eid, known = self._target(i, "id", step["id"], refs)
        etype = known_type(self.mem, known.type if known else None)
        if etype is not None:
            if not step["data"] and step.get("ttl") is None:
                self.problems.add(i, "data", "data must name at least one field",
                                  close_matches(None, list(etype.fields), "fields"))
            self._fields(i, etype, step["data"], "data", list(refs), partial=True)
        self._version(i, step, eid, known)
        self._bump(eid, known, certain=False)
        return result_shape("update", known.type if known else None)

    def _op_append(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        eid, known = self._target(i, "id", step["id"], refs)
        etype = known_type(self.mem, known.type if known else None)
        if etype is not None:
            name = step["field"]
            lists = [n for n, s in etype.fields.items() if s.type == "list"]
            if name not in lists:
                self.problems.add(i, "field", f"{etype.name} has no list field {name!r}",
                                  close_matches(name, lists, "list fields"))
            elif not step["values"]:
                self.problems.add(i, "values", "values must be a non-empty list")
        self._version(i, step, eid, known)
        self._bump(eid, known)
        return result_shape("append", known.type if known else None)

    def _op_delete(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        eid, known = self._target(i, "id", step["id"], refs)
        self._version(i, step, eid, known)
        self._bump(eid, known, deleted=True)
        return result_shape("delete", known.type if known else None)

    def _op_restore(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        eid, known = self._target(i, "id", step["id"], refs, allow_deleted=True)
        if eid is not None and known is not None and not known.deleted:
            self.problems.add(i, "id", f"entity {eid} is not deleted",
                              "restore only undoes a delete")
        self._version(i, step, eid, known)
        self._bump(eid, known, deleted=False)
        return result_shape("restore", known.type if known else None)

    def _op_link(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        _, src = self._target(i, "from_id", step["from_id"], refs)
        _, dst = self._target(i, "to_id", step["to_id"], refs)
        etype = known_type(self.mem, src.type if src else None)
        if etype is not None:
            rels = etype.typedef.relations
            rel = rels.get(step["relation"])
            if rel is None:
                self.problems.add(i, "relation", f"{etype.name} has no relation "
                                  f"{step['relation']!r}",
                                  close_matches(step["relation"], list(rels),
                                                "relations of " + etype.name))
            elif dst is not None and dst.type and rel.target not in ("*", dst.type):
                self.problems.add(i, "to_id", f"{etype.name}.{step['relation']} links to "
                                  f"{rel.target}, not {dst.type}",
                                  f"pass the ID of a {rel.target}")
        return result_shape(step["op"], None)

    _op_unlink = _op_link

    def _op_get(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        _, known = self._target(i, "id", step["id"], refs)
        return result_shape("get", known.type if known else None)

    def _op_related(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        self._target(i, "id", step["id"], refs)
        return result_shape("related", None)

    def _op_history(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        if "id" not in refs and isinstance(step["id"], str) and step["id"] not in self.known:
            try:
                self.mem.history(step["id"])
            except NotFound:
                self.problems.add(i, "id", f"no entity {step['id']} in this tenant",
                                  similar_ids(self.mem, step["id"], self.planned))
        return result_shape("history", None)

    def _op_query(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        etype = self._type(i, step["type"])
        if etype is None:
            return result_shape("query", None)
        self._filter(i, etype, step, refs)
        if step.get("order_by") is not None:
            try:
                parse_order(etype, step["order_by"])
            except DMFError as exc:
                self.problems.add(i, "order_by", exc.message,
                                  close_matches(None, list(etype.fields) + list(ORDER_SYSTEM),
                                         "fields"))
        limit = step.get("limit", 50)
        if isinstance(limit, int) and not 1 <= limit <= self.mem.settings.max_page_size:
            self.problems.add(i, "limit", "limit must be from 1 to "
                              f"{self.mem.settings.max_page_size}")
        return result_shape("query", etype.name)

    def _op_add_messages(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]
                         ) -> Shape:
        etype = lookup_type(self.mem.types(), MESSAGE_TYPE)
        assert etype is not None  # Message is a bundled type
        try:
            check_log_type(etype, field="conversation")
        except DMFError as exc:
            self.problems.add(i, "conversation", exc.message, "define Message as a "
                              "conversation log (conversation, turn, role, text fields)")
            return result_shape("add_messages", MESSAGE_TYPE)
        if not refs:
            try:
                rows = message_rows(step["conversation"], step["messages"], 0)
            except DMFError as exc:
                self.problems.add(i, str(exc.details.get("field") or "messages"), exc.message)
                return result_shape("add_messages", MESSAGE_TYPE)
            for n, row in enumerate(rows):
                self._fields(i, etype, row, f"messages[{n}]", [], partial=True)
        return result_shape("add_messages", MESSAGE_TYPE)

    def _op_search(self, i: int, step: Mapping[str, Any], refs: Mapping[str, Shape]) -> Shape:
        etype = self._type(i, step["type"], searchable=True)
        if etype is None:
            return result_shape("search", None)
        self._filter(i, etype, step, refs)
        if "conversation" not in refs:
            try:
                scope_to_conversation(etype, None, step.get("conversation"))
            except DMFError as exc:
                self.problems.add(i, "conversation", exc.message, "search a type with a "
                                  "conversation field, or leave out conversation")
        k = step.get("k", 10)
        if isinstance(k, int) and not 1 <= k <= self.mem.settings.max_k:
            self.problems.add(i, "k", f"k must be from 1 to {self.mem.settings.max_k}")
        if "text" not in refs and not str(step["text"]).strip():
            self.problems.add(i, "text", "text must not be empty", "what to look for")
        return result_shape("search", etype.name)
