"""Structured queries: one page of a type's entities in a deterministic order, and counts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..checks import (
    AsOf,
    check_page,
)
from ..clock import utcnow
from ..filters import parse_filter, parse_order
from ..models import Page
from ..schema import EntityType
from .expiry import live_sql
from .registry import TypeRegistry
from .rows import RowReader
from .sql import (
    bind_value,
    compile_filter,
    decode_cursor,
    encode_cursor,
    keyset_sql,
    order_sql,
    query_fingerprint,
)
from .tables import (
    table_name,
)
from .timetravel import TimeTravel, as_of_table_sql
from .txn import Transactions


@dataclass(eq=False)
class Queries:
    """Structured queries: pages in a deterministic order (cursors sealed by the store's
    ``cursor_key``) and counts, now or as of a seq."""

    db: Transactions
    registry: TypeRegistry
    rows: RowReader
    timetravel: TimeTravel
    cursor_key: bytes

    def query(self, tenant: str, type_name: str, where: Any = None, order_by: Any = None,
              limit: Any = 50, cursor: Any = None, as_of: AsOf = None,
              max_limit: int = 1000) -> Page:
        """One page of a type's entities matching ``where``, in a deterministic order."""
        etype = self.registry.type_of(type_name, tenant)
        node = parse_filter(etype, where)
        order = parse_order(etype, order_by)
        check_page(limit, cursor, max_limit)
        seq = self.timetravel.resolve_as_of(tenant, as_of)
        fingerprint = query_fingerprint(etype.name, where, order, seq)
        params: list[Any] = []
        source = self.source_sql(etype, tenant, seq, params)
        clauses = [compile_filter(node, params, dialect=self.db.dialect)]
        if cursor:
            values, last_id = decode_cursor(self.cursor_key, cursor, fingerprint)
            clauses.append(keyset_sql(etype, order, values, last_id, params,
                                      dialect=self.db.dialect))
        sql = (f"SELECT {self.rows.select_cols(etype)} FROM {source} WHERE "
               + " AND ".join(clauses) + f" {order_sql(order)} LIMIT {limit + 1}")
        rows = self.db.fetchall(sql, params)
        items = [self.rows.row_to_entity(etype, r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            sys_values = {"created_at": last.created_at, "updated_at": last.updated_at,
                          "version": last.version}
            fields = last.fields()
            values = [sys_values[n] if n in sys_values else fields[n] for n, _ in order]
            next_cursor = encode_cursor(self.cursor_key, fingerprint,
                                        [bind_value(v) for v in values], last.id)
        return Page(items=items, next_cursor=next_cursor, as_of_seq=seq)

    def source_sql(self, etype: EntityType, tenant: str, seq: int | None,
                   params: list[Any], now: dt.datetime | None = None) -> str:
        """A FROM-clause source of the type's live rows now (at ``now``, default the clock's),
        or at seq (rebuilt from the log)."""
        if seq is None:
            params.append(tenant)
            live = live_sql(params, now or utcnow())
            return f"(SELECT * FROM {table_name(etype.key)} WHERE tenant = ? AND {live}) AS t"
        return as_of_table_sql(etype, tenant, seq, params, self.db.dialect)

    def count(self, tenant: str, type_name: str, where: Any = None,
              as_of: AsOf = None) -> int:
        """How many live entities of a type match ``where``."""
        etype = self.registry.type_of(type_name, tenant)
        node = parse_filter(etype, where)
        params: list[Any] = []
        seq = self.timetravel.resolve_as_of(tenant, as_of)
        source = self.source_sql(etype, tenant, seq, params)
        where = compile_filter(node, params, dialect=self.db.dialect)
        sql = f"SELECT count(*) FROM {source} WHERE {where}"
        row = self.db.fetchone(sql, params)
        return int(row[0]) if row else 0
