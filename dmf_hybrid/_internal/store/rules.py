"""Rules: declarative conditions over an entity and its relations that raise Constraints.

A rule is data, declared per domain in ``indexes/*.toml`` next to the types::

    [rules.trip_over_budget]
    description = "The estimated cost of a trip's points of interest exceeds its budget."
    condition = "sum(PointOfInterest.estimated_cost via includes) > budget"
    trigger = { type = "Trip", where = { budget = { "$gt" = 0 } } }
    action = { kind = "budget", link = "has", message = "cost {value} > budget {threshold}" }

``trigger``: ``type`` (required), ``ops`` (default: every entity op plus link and unlink) and
an optional ``where`` in the filter language. ``action``: the ``kind`` of the Constraint, an
optional ``link`` (a relation of the trigger type to ``Constraint``) and a ``message`` whose
plain ``{placeholders}`` may be ``value``, ``threshold`` (the two sides of the condition),
``subject`` and ``rule``.

Condition grammar (nothing else is accepted; it is compiled to SQL with bound values and
checked field names at definition time)::

    condition := expr (> | >= | < | <= | == | !=) expr
    expr      := term (('+' | '-') term)*      term := unary (('*' | '/') unary)*
    unary     := '-' unary | NUMBER | FIELD | '(' expr ')' | aggregate
    aggregate := (sum | avg | min | max | count) '(' Type.field via relation ')'
               | count '(' Type via relation ')'
               | overlaps '(' Type via relation, day = f, start = f, hours = f ')'

``FIELD`` is a numeric or date field of the trigger entity; ``via`` follows the trigger
type's own outgoing relation to live (not deleted) entities of ``Type``. ``overlaps`` counts
the pairs of those entities on the same ``day`` whose ``[start, start + hours)`` intervals
overlap (``start`` is an ``HH:MM`` text or a datetime; entities missing a value are not
compared). A side that is NULL makes the condition false.

Evaluation runs inside the write transaction of the triggering write (a Store write hook):
after a mutation of the trigger type (one of ``ops``), and after an update, append, delete,
restore or erase of an entity that a ``via`` relation reaches (for each trigger entity linking
to it). The outcome is written to a ``Constraint`` whose ID derives from (subject, kind, rule),
so re-evaluation is idempotent: ``raised`` (created), ``reopened``, ``updated`` (new values),
``resolved`` (the condition stopped holding, or the entity left the trigger filter or was
deleted). Each of those appends one audit event ``op="rule"`` with
``meta = {rule, rule_version, entity_id, outcome, constraint_id}``; an evaluation that changes
nothing writes nothing. Writes made by rules do not trigger rules (no recursion).

Rules are stored with versions in the ``dmf_rules`` table (a changed definition is a new
version, audited as ``op="define_rule"``) and reloaded when the memory opens.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..checks import RULE_NAME_RE, full_match
from ..clock import to_naive_utc, utcnow
from ..errors import NotFound, SchemaError
from ..filters import parse_filter
from ..ids import canonical_json
from ..models import RuleInfo
from ..ruledefs import CONSTRAINT_TYPE, TRIGGER_OPS, RuleDef, rule_from_data
from ..schema import EntityType
from .conditions import ENTITY, TENANT, ConditionParser
from .sql import compile_filter
from .state import Followed
from .store import Store
from .tables import table_name
from .txn import Connection

log = logging.getLogger(__name__)

#: Mutations of an entity a ``via`` relation reaches that re-evaluate its trigger entities.
DEPENDENCY_OPS = ("update", "append", "delete", "restore", "erase")
CONSTRAINT_FIELDS = ("subject", "kind", "rule", "message", "status")
MESSAGE_PLACEHOLDERS = ("value", "threshold", "subject", "rule")


@dataclass(frozen=True)
class CompiledRule:
    """A checked rule: its definition, version, SQL and the relations it depends on."""

    definition: RuleDef
    version: int
    sql: str
    head_params: tuple[Any, ...]
    tail_params: tuple[Any, ...]
    #: (type reached, relation) pairs of the ``via`` aggregates
    dependencies: tuple[tuple[str, str], ...]
    #: the trigger type (of the rule's tenant)
    trigger: EntityType

    @property
    def tenant(self) -> str:
        return self.trigger.tenant

    @property
    def name(self) -> str:
        return self.definition.name

    def params(self, entity_id: str, tenant: str) -> list[Any]:
        """The bound values of ``sql`` for one trigger entity."""
        head = [entity_id if p is ENTITY else tenant if p is TENANT else p
                for p in self.head_params]
        return [*head, entity_id, tenant, *self.tail_params]


# ---------------------------------------------------------------- definition


def compile_rule(store: Store, rule: RuleDef, version: int, tenant: str) -> CompiledRule:
    """The checked, compiled form of a tenant's rule (over the tenant's types); SchemaError
    if anything in it is unknown."""
    if not full_match(RULE_NAME_RE, rule.name):
        raise SchemaError(f"rule name {rule.name!r} must match {RULE_NAME_RE.pattern}",
                          field="name")
    try:
        trigger = store.type_of(rule.trigger.type, tenant, define_bundled=False)
    except NotFound as exc:
        raise SchemaError(f"rule {rule.name}: trigger: {exc.message}",
                          field="trigger.type") from None
    bad_ops = sorted(set(rule.trigger.ops) - set(TRIGGER_OPS))
    if bad_ops or not rule.trigger.ops:
        raise SchemaError(f"rule {rule.name}: trigger ops must be among {', '.join(TRIGGER_OPS)}",
                          field="trigger.ops")
    try:
        node = parse_filter(trigger, rule.trigger.where)
    except SchemaError:
        raise
    except Exception as exc:  # FilterError: re-raised as a definition error
        raise SchemaError(f"rule {rule.name}: trigger.where: {exc}",
                          field="trigger.where") from None
    _check_action(store, rule, trigger)
    parser = ConditionParser(rule, trigger, store)
    lhs, op, rhs = parser.condition()
    tail: list[Any] = []
    where = compile_filter(node, tail, alias="e.", dialect=store.db.dialect)
    sql = (f"SELECT value, threshold, coalesce(value {op} threshold, FALSE) FROM ("
           f"SELECT {lhs.sql} AS value, {rhs.sql} AS threshold FROM {table_name(trigger.key)} "
           f"AS e WHERE e.id = ? AND e.tenant = ? AND e.deleted_at IS NULL AND {where}) AS c")
    return CompiledRule(rule, version, sql, tuple(lhs.params + rhs.params), tuple(tail),
                        tuple(sorted(set(parser.dependencies))), trigger)


def _check_action(store: Store, rule: RuleDef, trigger: EntityType) -> None:
    action = rule.action
    try:
        ctype = store.type_of(CONSTRAINT_TYPE, trigger.tenant, define_bundled=False)
    except NotFound:
        raise SchemaError(f"rule {rule.name}: rules need the {CONSTRAINT_TYPE} type; define it "
                          "first (see indexes/travel.toml)", field="action") from None
    missing = [f for f in CONSTRAINT_FIELDS if f not in ctype.fields]
    if missing:
        raise SchemaError(f"rule {rule.name}: {CONSTRAINT_TYPE} lacks the fields "
                          f"{', '.join(missing)}", field="action")
    identity = set(ctype.typedef.identity or ())
    if not {"subject", "rule"} <= identity <= {"subject", "kind", "rule"}:
        raise SchemaError(f"rule {rule.name}: {CONSTRAINT_TYPE} identity must be (subject, "
                          "kind, rule) so its IDs are deterministic", field="action")
    for fname, wanted in (("kind", action.kind), ("status", "open"), ("status", "resolved")):
        values = ctype.fields[fname].values
        if values is not None and wanted not in values:
            raise SchemaError(f"rule {rule.name}: {CONSTRAINT_TYPE}.{fname} has no value "
                              f"{wanted!r} (values: {', '.join(values)})", field=f"action.{fname}")
    if action.link is not None:
        spec = trigger.typedef.relations.get(action.link)
        if spec is None or spec.target not in ("*", CONSTRAINT_TYPE):
            raise SchemaError(f"rule {rule.name}: action.link must be a relation of "
                              f"{trigger.name} to {CONSTRAINT_TYPE}", field="action.link")
    try:
        parsed = list(string.Formatter().parse(action.message))
    except ValueError as exc:
        raise SchemaError(f"rule {rule.name}: action.message is malformed: {exc}",
                          field="action.message") from None
    allowed = ", ".join(f"{{{p}}}" for p in MESSAGE_PLACEHOLDERS)
    for _, placeholder, fmt, conv in parsed:
        if placeholder is not None and (placeholder not in MESSAGE_PLACEHOLDERS or fmt or conv):
            raise SchemaError(f"rule {rule.name}: action.message placeholders must be plain "
                              f"{allowed}, not {{{placeholder}}}", field="action.message")


# ---------------------------------------------------------------- evaluation


def format_value(value: Any) -> str:
    """A condition value as rule messages show it (deterministic, 2 decimals at most)."""
    if value is None:
        return "n/a"
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".")
        return "0" if text == "-0" else text
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    return value


class RuleEngine:
    """The rules of one store: definition, persistence and evaluation (a write hook)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: by (tenant, rule name): a rule is its tenant's, over its tenant's types
        self._rules: dict[tuple[str, str], CompiledRule] = {}
        self._load()
        store.follow_hooks.append(self._on_foreign)

    def _load(self) -> None:
        rules: dict[tuple[str, str], CompiledRule] = {}
        rows = self.store.db.fetchall(
            "SELECT DISTINCT ON (tenant, name) tenant, name, version, definition FROM dmf_rules "
            "ORDER BY tenant, name, version DESC")
        for tenant, name, version, definition in rows:
            try:
                rules[(tenant, name)] = compile_rule(
                    self.store, RuleDef.model_validate_json(definition), int(version), tenant)
            except SchemaError as exc:  # the schema changed under it: keep the store usable
                log.error("rule %s v%s of tenant %s is disabled: %s", name, version, tenant,
                          exc.message)
        self._rules = rules

    def _on_foreign(self, followed: Followed) -> None:
        """Another process's commits: its rules (or types they read) may have changed."""
        if followed.ops & {"define", "define_rule"}:
            self._load()

    def rules(self, tenant: str | None = None) -> list[CompiledRule]:
        """The active rules of ``tenant`` (None: of every tenant), by name."""
        return [self._rules[k] for k in sorted(self._rules, key=lambda k: (k[1], k[0]))
                if tenant is None or k[0] == tenant]

    def define(self, rule: RuleDef | Mapping[str, Any], *, tenant: str,
               actor: str | None = None, reason: str | None = None,
               principal: str | None = None) -> CompiledRule:
        """Register a rule or a new version of it; the same definition again is a no-op.

        A rule is the tenant's: it reads the tenant's types and runs on its writes. In the
        same transaction the rule is evaluated for every live entity of its trigger type (a
        back-fill), so entities written before the rule existed get their constraints raised,
        and those a new version no longer flags get them resolved.
        """
        rule = rule_from_data(rule)
        current = self._rules.get((tenant, rule.name))
        if current is not None and current.definition == rule:
            return current
        version = 1 if current is None else current.version + 1
        with self.store.db.write(tenant) as con:
            # a bundled type, defined on first use; a rule that does not compile leaves none
            self.store.type_of(CONSTRAINT_TYPE, tenant, principal=principal)
            compiled = compile_rule(self.store, rule, version, tenant)
            seq = self.store.append_event(
                con, tenant=tenant, op="define_rule", type_name=rule.trigger.type,
                entity_id=None, version_before=None if current is None else current.version,
                version_after=version,
                before=None if current is None else current.definition.model_dump(mode="json"),
                after=rule.model_dump(mode="json"), actor=actor, reason=reason, trace_id=None,
                meta={"rule": rule.name, "rule_version": version}, principal=principal)
            con.execute("INSERT INTO dmf_rules (tenant, name, version, definition, seq, "
                        "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                        [tenant, rule.name, version, rule.model_dump_json(), seq,
                         to_naive_utc(utcnow())])

            def undo() -> None:
                if current is None:
                    self._rules.pop((tenant, rule.name), None)
                else:
                    self._rules[(tenant, rule.name)] = current

            self.store.db.on_rollback(undo)  # before the change, so nothing can come between
            self._rules[(tenant, rule.name)] = compiled
            self._back_fill(con, compiled, principal)
        return compiled

    def _back_fill(self, con: Connection, rule: CompiledRule,
                   principal: str | None) -> None:
        """Evaluate ``rule`` for every live entity of its trigger type (in ID order)."""
        subjects = con.execute(f"SELECT tenant, id FROM {table_name(rule.trigger.key)} "
                               "WHERE deleted_at IS NULL AND tenant = ? ORDER BY id",
                               [rule.tenant]).fetchall()
        with self.store.hooks.paused():  # as when a write hook evaluates it
            for tenant, eid in subjects:
                self.evaluate(con, rule, tenant, eid, principal)

    def on_write(self, con: Connection, tenant: str, op: str, type_name: str,
                 entity_id: str, principal: str | None) -> None:
        """The write hook: evaluate the rules this mutation may affect (what they write
        records the principal of the write that set them off)."""
        if not self._rules:
            return
        todo: list[tuple[CompiledRule, str]] = []
        for rule in self.rules(tenant):
            trigger = rule.definition.trigger
            if trigger.type == type_name and op in trigger.ops:
                todo.append((rule, entity_id))
            if op in DEPENDENCY_OPS:
                for reached, relation in rule.dependencies:
                    if reached == type_name:
                        todo.extend((rule, src) for src in self._sources(
                            con, tenant, trigger.type, relation, entity_id))
        done: set[tuple[str, str]] = set()
        for rule, eid in todo:
            if (rule.name, eid) not in done:
                done.add((rule.name, eid))
                self.evaluate(con, rule, tenant, eid, principal)

    def _sources(self, con: Connection, tenant: str, type_name: str,
                 relation: str, to_id: str) -> list[str]:
        # an erase ends the links in its own event: those still count as this write's links
        rows = con.execute(
            "SELECT DISTINCT r.from_id FROM relations AS r JOIN entity_index AS i "
            "ON i.id = r.from_id AND i.tenant = r.tenant WHERE r.tenant = ? AND r.relation = ? "
            "AND r.to_id = ? AND i.type = ? AND (r.deleted_seq IS NULL OR r.deleted_seq = ?) "
            "ORDER BY r.from_id", [tenant, relation, to_id, type_name, self.store.log.head(tenant)],
        ).fetchall()
        return [r[0] for r in rows]

    def evaluate(self, con: Connection, rule: CompiledRule, tenant: str,
                 entity_id: str, principal: str | None = None) -> str | None:
        """Evaluate one rule for one entity and apply it; the outcome, None if nothing changed."""
        row = con.execute(rule.sql, rule.params(entity_id, tenant)).fetchone()
        holds = bool(row is not None and row[2])
        value, threshold = (row[0], row[1]) if row is not None else (None, None)
        action = rule.definition.action
        ctype = self.store.type_of(CONSTRAINT_TYPE, tenant)
        data: dict[str, Any] = {"subject": entity_id, "kind": action.kind, "rule": rule.name}
        cid = self.store.writes.prepare_create(ctype, data, None, tenant)[0]
        found = con.execute(
            f"SELECT i.erased_seq, c.status, c.message, c.deleted_at IS NOT NULL "
            f"FROM entity_index AS i LEFT JOIN {table_name(ctype.key)} AS c ON c.id = i.id "
            "AND c.tenant = i.tenant WHERE i.id = ? AND i.tenant = ?", [cid, tenant]).fetchone()
        if found is not None and found[0] is not None:
            return None  # an erased constraint's ID cannot come back
        current = None if found is None or found[1] is None else found[1:]
        message = string.Formatter().vformat(action.message, (), {
            "value": format_value(value), "threshold": format_value(threshold),
            "subject": entity_id, "rule": rule.name})
        extra = {k: v for k, v in (("observed", value), ("threshold", threshold),
                                   ("rule_version", rule.version))
                 if k in ctype.fields and (v is None or isinstance(v, (int, float)))}
        outcome: str | None = None
        if holds:
            if current is None:
                outcome = "raised"
            elif current[2] or current[0] != "open":
                outcome = "reopened"
            elif current[1] != message:
                outcome = "updated"
        elif current is not None and not current[2] and current[0] == "open":
            outcome = "resolved"
        if outcome is None:
            return None
        self.store.append_event(
            con, tenant=tenant, op="rule", type_name=rule.definition.trigger.type,
            entity_id=entity_id, version_before=None, version_after=None, before=None,
            after={"constraint_id": cid, "holds": holds, "value": _json_value(value),
                   "threshold": _json_value(threshold)},
            actor=f"rule:{rule.name}", reason=f"rule {rule.name} v{rule.version}", trace_id=None,
            meta={"rule": rule.name, "rule_version": rule.version, "entity_id": entity_id,
                  "outcome": outcome, "constraint_id": cid}, principal=principal)
        audit = {"actor": f"rule:{rule.name}", "reason": f"rule {rule.name} v{rule.version}",
                 "principal": principal}
        if outcome == "raised":
            self.store.bulk.create(tenant, ctype.name,
                                   {**data, "message": message, "status": "open", **extra}, **audit)
        elif outcome == "resolved":
            self.store.writes.update(tenant, cid, {"status": "resolved", **extra}, **audit)
        else:
            if current is not None and current[2]:
                self.store.writes.restore(tenant, cid, **audit)
            self.store.writes.update(tenant, cid, {"status": "open", "message": message, **extra},
                                     **audit)
        if holds and action.link is not None:
            self.store.relations.link(tenant, entity_id, action.link, cid, **audit)
        return outcome


def rule_json(rule: CompiledRule) -> RuleInfo:
    """A rule as JSON: its definition, version and dependencies."""
    return RuleInfo.model_validate(json.loads(canonical_json({
        **rule.definition.model_dump(mode="json"), "version": rule.version,
        "dependencies": [list(d) for d in rule.dependencies]})))


def define_rules(engine: RuleEngine, rules: Sequence[RuleDef], *, tenant: str,
                 actor: str | None = None, reason: str | None = None,
                 principal: str | None = None) -> list[CompiledRule]:
    """Define several rules (in the caller's transaction)."""
    return [engine.define(r, tenant=tenant, actor=actor, reason=reason, principal=principal)
            for r in rules]
