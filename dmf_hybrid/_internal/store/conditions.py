"""Rule conditions: the grammar of a rule's condition, compiled to SQL with bound values.

See :mod:`.rules` for the grammar and what a rule does; :class:`ConditionParser` checks every
field and relation a condition names against the schema at definition time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import NotFound, SchemaError
from ..ruledefs import RuleDef
from ..schema import EntityType
from .sql import q
from .store import Store
from .tables import table_name

AGGREGATES = ("sum", "avg", "min", "max", "count")
MAX_CONDITION_CHARS = 500
MAX_AGGREGATES = 8
COMPARATORS = {">": ">", ">=": ">=", "<": "<", "<=": "<=", "==": "=", "!=": "<>"}
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|"
                    r"(?P<op>>=|<=|==|!=|[<>()+\-*/.,=]))")


class Slot:
    """A bound value filled in per evaluation (the trigger entity's ID or tenant)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


ENTITY, TENANT = Slot("entity_id"), Slot("tenant")


@dataclass
class _Expr:
    sql: str
    params: list[Any]
    kind: str  # "number", "date" or "datetime"


@dataclass
class ConditionParser:
    rule: RuleDef
    trigger: EntityType
    store: Store
    tokens: list[tuple[str, str, int]] = field(default_factory=list)
    pos: int = 0
    dependencies: list[tuple[str, str]] = field(default_factory=list)

    def error(self, message: str) -> SchemaError:
        return SchemaError(f"rule {self.rule.name}: condition {self.rule.condition!r}: {message}",
                           field="condition")

    def tokenize(self) -> None:
        text = self.rule.condition
        if not isinstance(text, str) or not text.strip():
            raise self.error("the condition is empty")
        if len(text) > MAX_CONDITION_CHARS:
            raise self.error(f"the condition is longer than {MAX_CONDITION_CHARS} characters")
        i = 0
        while i < len(text):
            if text[i:].strip() == "":
                break
            m = _TOKEN.match(text, i)
            if m is None:
                j = len(text[i:]) - len(text[i:].lstrip()) + i
                raise self.error(f"unexpected {text[j]!r} at position {j} (a condition is an "
                                 "aggregate comparison, not SQL)")
            kind = m.lastgroup or "op"
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            i = m.end()

    def peek(self, offset: int = 0) -> tuple[str, str, int] | None:
        i = self.pos + offset
        return self.tokens[i] if i < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        token = self.peek()
        if token is None:
            raise self.error("it ends too early")
        self.pos += 1
        return token

    def expect(self, value: str) -> None:
        token = self.take()
        if token[1] != value:
            raise self.error(f"expected {value!r} at position {token[2]}, found {token[1]!r}")

    def name(self, what: str) -> str:
        kind, value, at = self.take()
        if kind != "name":
            raise self.error(f"expected {what} at position {at}, found {value!r}")
        return value

    # ---------------------------------------------------------------- grammar

    def condition(self) -> tuple[_Expr, str, _Expr]:
        self.tokenize()
        lhs = self.expr()
        token = self.take()
        if token[1] not in COMPARATORS:
            raise self.error(f"expected a comparison (> >= < <= == !=) at position {token[2]}, "
                             f"found {token[1]!r}")
        rhs = self.expr()
        extra = self.peek()
        if extra is not None:
            raise self.error(f"unexpected {extra[1]!r} at position {extra[2]}")
        if lhs.kind != rhs.kind:
            raise self.error(f"cannot compare a {lhs.kind} with a {rhs.kind}")
        return lhs, COMPARATORS[token[1]], rhs

    def expr(self) -> _Expr:
        left = self.term()
        while (token := self.peek()) is not None and token[1] in ("+", "-"):
            self.pos += 1
            left = self.arith(left, token[1], self.term())
        return left

    def term(self) -> _Expr:
        left = self.unary()
        while (token := self.peek()) is not None and token[1] in ("*", "/"):
            self.pos += 1
            left = self.arith(left, token[1], self.unary())
        return left

    def arith(self, left: _Expr, op: str, right: _Expr) -> _Expr:
        if left.kind != "number" or right.kind != "number":
            raise self.error(f"'{op}' takes numbers, not {left.kind} and {right.kind}")
        rsql = f"nullif({right.sql}, 0)" if op == "/" else right.sql
        return _Expr(f"({left.sql} {op} {rsql})", left.params + right.params, "number")

    def unary(self) -> _Expr:
        token = self.take()
        kind, value, at = token
        if value == "-":
            inner = self.unary()
            if inner.kind != "number":
                raise self.error("'-' takes a number")
            return _Expr(f"(-{inner.sql})", inner.params, "number")
        if kind == "num":
            return _Expr("CAST(? AS DOUBLE PRECISION)", [float(value)], "number")
        if value == "(":
            inner = self.expr()
            self.expect(")")
            return inner
        if kind != "name":
            raise self.error(f"unexpected {value!r} at position {at}")
        nxt = self.peek()
        if nxt is not None and nxt[1] == "(":
            self.pos += 1
            if len(self.dependencies) >= MAX_AGGREGATES:
                raise self.error(f"at most {MAX_AGGREGATES} aggregates")
            if value in AGGREGATES:
                return self.aggregate(value)
            if value == "overlaps":
                return self.overlaps()
            raise self.error(f"unknown function {value!r} (known: "
                             f"{', '.join(AGGREGATES)}, overlaps)")
        return self.own_field(value)

    # ---------------------------------------------------------------- operands

    def own_field(self, name: str) -> _Expr:
        spec = self.trigger.fields.get(name)
        if spec is None:
            known = ", ".join(sorted(self.trigger.fields))
            raise self.error(f"{self.trigger.name} has no field {name!r} (fields: {known})")
        return _Expr(*_typed_column(self, f"e.{q(name)}", self.trigger.name, name, spec.type))

    def target(self) -> tuple[EntityType, str | None, str]:
        """``Type[.field] via relation``: the reached type, the field and the relation."""
        type_name = self.name("a type name")
        try:
            etype = self.store.type_of(type_name, self.trigger.tenant, define_bundled=False)
        except NotFound:
            known = ", ".join(t.name for t in self.store.types(self.trigger.tenant))
            raise self.error(f"unknown type {type_name!r} (known: {known})") from None
        fname = None
        if self.peek() is not None and self.peek()[1] == ".":  # type: ignore[index]
            self.pos += 1
            fname = self.name("a field name")
            if fname not in etype.fields:
                known = ", ".join(sorted(etype.fields))
                raise self.error(f"{etype.name} has no field {fname!r} (fields: {known})")
        if self.name("'via'") != "via":
            raise self.error("expected 'via <relation>' after the aggregated type")
        relation = self.name("a relation name")
        spec = self.trigger.typedef.relations.get(relation)
        if spec is None:
            known = ", ".join(sorted(self.trigger.typedef.relations)) or "none"
            raise self.error(f"{self.trigger.name} has no relation {relation!r} (known: {known})")
        if spec.target not in ("*", etype.name):
            raise self.error(f"{self.trigger.name}.{relation} links to {spec.target}, "
                             f"not {etype.name}")
        self.dependencies.append((etype.name, relation))
        return etype, fname, relation

    def aggregate(self, func: str) -> _Expr:
        etype, fname, relation = self.target()
        self.expect(")")
        if fname is None:
            if func != "count":
                raise self.error(f"{func}() needs a field: {func}({etype.name}.<field> via ...)")
            return _Expr(f"(SELECT count(x.id) FROM {_reached(etype)})",
                         [TENANT, ENTITY, relation], "number")
        sql_col, _, kind = _typed_column(self, f"x.{q(fname)}", etype.name, fname,
                                         etype.fields[fname].type)
        if func == "count":
            return _Expr(f"(SELECT count({sql_col}) FROM {_reached(etype)})",
                         [TENANT, ENTITY, relation], "number")
        if func in ("sum", "avg") and kind != "number":
            raise self.error(f"{func}() takes a numeric field, {etype.name}.{fname} is {kind}")
        agg = f"coalesce(sum({sql_col}), 0)" if func == "sum" else f"{func}({sql_col})"
        return _Expr(f"(SELECT {agg} FROM {_reached(etype)})", [TENANT, ENTITY, relation], kind)

    def overlaps(self) -> _Expr:
        etype, fname, relation = self.target()
        if fname is not None:
            raise self.error("overlaps() takes a type, not a field: overlaps(Type via rel, ...)")
        named: dict[str, str] = {}
        for key in ("day", "start", "hours"):
            self.expect(",")
            if self.name(f"'{key}'") != key:
                raise self.error("overlaps() takes day =, start = and hours = in that order")
            self.expect("=")
            fname = self.name("a field name")
            spec = etype.fields.get(fname)
            if spec is None:
                raise self.error(f"{etype.name} has no field {fname!r}")
            allowed = {"day": ("date", "datetime"), "start": ("str", "datetime"),
                       "hours": ("int", "float")}[key]
            if spec.type not in allowed:
                raise self.error(f"overlaps() {key} must be a {' or '.join(allowed)} field, "
                                 f"{etype.name}.{fname} is {spec.type}")
            named[key] = fname
        self.expect(")")
        start = f"x.{q(named['start'])}"
        if etype.fields[named["start"]].type == "str":
            start = f"try_cast({start} AS TIME)"
        visits = (f"(SELECT x.id AS id, CAST(x.{q(named['day'])} AS DATE) AS d, "
                  f"(date_part('hour', {start}) * 60 + date_part('minute', {start})) AS s, "
                  f"CAST(x.{q(named['hours'])} AS DOUBLE PRECISION) * 60 AS len "
                  f"FROM {_reached(etype)})")
        sql = (f"(WITH v AS MATERIALIZED {visits} SELECT count(*) FROM v AS a JOIN v AS b "
               "ON a.id < b.id AND a.d = b.d AND a.s < b.s + b.len AND b.s < a.s + a.len)")
        return _Expr(sql, [TENANT, ENTITY, relation], "number")


def _typed_column(parser: ConditionParser, col: str, type_name: str, fname: str, ftype: str
                  ) -> tuple[str, list[Any], str]:
    if ftype in ("int", "float"):
        return f"CAST({col} AS DOUBLE PRECISION)", [], "number"
    if ftype == "date":
        return f"CAST({col} AS DATE)", [], "date"
    if ftype == "datetime":
        return f"CAST({col} AS TIMESTAMP)", [], "datetime"
    raise parser.error(f"{type_name}.{fname} is a {ftype} field; conditions use numeric or "
                       "date fields")


def _reached(etype: EntityType) -> str:
    """FROM clause of the live entities of ``etype`` one relation away from the trigger entity.

    Binds (tenant, entity ID, relation). Not correlated with the outer query on purpose:
    DuckDB then filters the relations first instead of joining whole tables.
    """
    return (f"relations AS r JOIN {table_name(etype.key)} AS x ON x.id = r.to_id "
            "AND x.tenant = r.tenant WHERE r.tenant = ? AND r.from_id = ? "
            "AND r.relation = ? AND r.deleted_seq IS NULL AND x.deleted_at IS NULL")
