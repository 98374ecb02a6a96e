"""Candidates: the query object search asks the store for a filter's candidates with.

A :class:`Candidates` is one type's rows in one tenant that pass a filter (and, optionally,
lie in a list of related IDs) at one state: live now, or rebuilt from the log at an audit
seq. It counts them, lists them (by ID or by the 64-bit key the mirrors use) and reads their
rows; all of it through one read connection, so every read of one search sees one state.
Nothing above the store holds the SQL: search composes its steps from these reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..filters import FilterNode
from ..schema import EntityType
from .db import Reader, first_row
from .sql import compile_filter, key_sql, q
from .store import Store
from .tables import EXPIRES_COLUMN, SYSTEM_COLUMNS, table_name

#: Up to this many IDs are looked up through the primary-key index, more by a hash join
#: (measured on 100k rows: 0.1-0.25 ms per ID by index, 35-50 ms for a scan).
INDEX_LOOKUP_MAX = 256
_TENANT = SYSTEM_COLUMNS.index("tenant")
_DELETED = SYSTEM_COLUMNS.index("deleted_at")

Row = tuple[Any, ...]
_IN_LIST = "id IN (SELECT unnest(CAST(? AS VARCHAR[])))"


class Candidates:
    """A filter's candidates of one type in one tenant, at ``seq`` (None: live now).

    Rows come in the store's row layout: :data:`~.tables.SYSTEM_COLUMNS`, then the type's
    fields in order.
    """

    def __init__(self, reader: Reader, store: Store, etype: EntityType, tenant: str,
                 seq: int | None, node: FilterNode | None, related: list[str] | None) -> None:
        self.reader, self.etype, self.tenant, self.seq = reader, etype, tenant, seq
        self._source_params: list[Any] = []
        self._source = store.queries.source_sql(etype, tenant, seq, self._source_params)
        self.filter_params: list[Any] = []
        self.dialect = store.db.dialect
        self.filter_sql = compile_filter(node, self.filter_params, dialect=self.dialect)
        if related is not None:
            self.filter_sql += f" AND {_IN_LIST}"
            self.filter_params.append(related)
        self._params = self._source_params + self.filter_params
        self.filtered = node is not None or related is not None
        self._table = table_name(etype.key)
        self._columns = ", ".join(list(SYSTEM_COLUMNS) + [q(n) for n in etype.fields])

    def count(self) -> int:
        """How many candidates there are."""
        row = first_row(self.reader.execute(
            f"SELECT count(*) FROM {self._source} WHERE {self.filter_sql}", self._params))
        return int(row[0]) if row else 0

    def listing(self, by_key: bool) -> npt.NDArray[np.uint64] | list[str]:
        """Every candidate, in no particular order: keys (``by_key``) or IDs."""
        # a plain column into numpy: ~20 % faster than a list() aggregate through Arrow
        column = self.dialect.column(
            self.reader, f"SELECT {key_sql(dialect=self.dialect) if by_key else 'id'} AS c "
            f"FROM {self._source} WHERE {self.filter_sql}", self._params)
        if by_key:
            return np.asarray(column, dtype=np.uint64)
        return [str(i) for i in column.tolist()]

    def text_hashes(self) -> list[tuple[str, str]]:
        """(ID, text hash) of every candidate with a text to embed."""
        return [(str(i), str(h)) for i, h in self.reader.execute(
            f"SELECT id, text_hash FROM {self._source} WHERE {self.filter_sql} AND "
            "text_hash IS NOT NULL", self._params).fetchall()]

    def vectors(self, model_id: str) -> tuple[list[str], npt.NDArray[np.float32], list[str]]:
        """Every candidate's cached vector of ``model_id``: (IDs, vectors), by ID, and the IDs
        of candidates with a text whose vector is not cached."""
        scoped = (f"SELECT id, text_hash FROM {self._source} WHERE {self.filter_sql} AND "
                  "text_hash IS NOT NULL")
        ids, matrix = self.dialect.vectors(
            self.reader, f"SELECT t.id, e.vector FROM ({scoped}) AS t JOIN embeddings AS e ON "
            "e.model_id = ? AND e.text_hash = t.text_hash ORDER BY t.id",
            [*self._params, model_id])
        missing = self.reader.execute(
            f"SELECT t.id FROM ({scoped}) AS t WHERE NOT EXISTS (SELECT 1 FROM embeddings AS "
            "e WHERE e.model_id = ? AND e.text_hash = t.text_hash)",
            [*self._params, model_id]).fetchall()
        return [str(i) for i in ids], matrix, [str(r[0]) for r in missing]

    def containing(self, needles: Sequence[str], limit: int) -> list[Row]:
        """At most ``limit`` candidate rows (live now) whose embedded fields hold any of the
        lowercase ``needles`` (at most 62), the rarest first: a row scores log(1 + N / n) for
        each needle it holds (N candidates, n of them hold it), ties by ID. One scan of the
        candidates (which needles each holds, as bits), then the chosen rows by ID."""
        assert self.seq is None and len(needles) <= 62
        roots = self.etype.embed_roots()
        if not needles or not roots:
            return []
        text = " || ' ' || ".join(f"coalesce(lower(CAST({q(r)} AS VARCHAR)), '')"
                                  for r in roots)
        bits = " + ".join(f"(CASE WHEN position(CAST(? AS VARCHAR) IN dmf_text) > 0 THEN "
                          f"{1 << i} ELSE 0 END)" for i in range(len(needles)))
        found = self.reader.execute(
            f"SELECT id, dmf_bits, dmf_total FROM (SELECT id, {bits} AS dmf_bits, count(*) "
            f"OVER () AS dmf_total FROM (SELECT id, {text} AS dmf_text FROM {self._source} "
            f"WHERE {self.filter_sql}) AS t) AS s WHERE dmf_bits > 0",
            [*needles, *self._params]).fetchall()
        if not found:
            return []
        masks = np.asarray([r[1] for r in found], dtype=np.int64)
        held = ((masks[:, None] >> np.arange(len(needles))) & 1).astype(bool)
        weights = np.log1p(int(found[0][2]) / np.maximum(held.sum(axis=0), 1))
        scores = held @ weights
        ids = [str(r[0]) for r in found]
        keep: Sequence[int] = range(len(ids))
        if len(ids) > limit:  # those scoring at least the limit-th best (ties kept)
            cut = np.partition(scores, len(ids) - limit)[len(ids) - limit]
            keep = np.flatnonzero(scores >= cut).tolist()
        order = sorted(keep, key=lambda i: (-scores[i], ids[i]))[:limit]
        chosen = [ids[i] for i in order]
        rank = {eid: i for i, eid in enumerate(chosen)}
        return sorted(self.rows_of(chosen, check_filter=False), key=lambda r: rank[str(r[0])])

    def ordered_rows(self, *, filtered: bool = True) -> list[Row]:
        """Every candidate row by ID (``filtered`` False: every row of the source, by ID)."""
        if not filtered:
            return self.reader.execute(f"SELECT {self._columns} FROM {self._source} ORDER BY id",
                                       self._source_params).fetchall()
        return self.reader.execute(
            f"SELECT {self._columns} FROM {self._source} WHERE {self.filter_sql} ORDER BY id",
            self._params).fetchall()

    def live_rows(self, limit: int) -> list[Row] | None:
        """Every live row of the type in the tenant, unfiltered (None: more than ``limit``)."""
        assert self.seq is None  # the source: the tenant's live rows now
        count = first_row(self.reader.execute(f"SELECT count(*) FROM {self._source}",
                                              self._source_params))
        if count is None or int(count[0]) > limit:
            return None
        rows: list[Row] = self.reader.execute(f"SELECT {self._columns} FROM {self._source}",
                                              self._source_params).fetchall()
        return rows

    def keys_of(self, ids: list[str]) -> dict[str, int]:
        """The 64-bit key (``hash(tenant, id)``) each of the tenant's ``ids`` is listed by."""
        rows = self.reader.execute(
            f"SELECT id, {key_sql(dialect=self.dialect)} FROM (SELECT CAST(? AS VARCHAR) AS "
            "tenant, unnest(CAST(? AS VARCHAR[])) AS id) AS listed", [self.tenant, ids]).fetchall()
        return {str(eid): int(key) for eid, key in rows}

    def rows_of(self, ids: list[str], *, check_filter: bool = True) -> list[Row]:
        """The rows of those ``ids`` that are candidates (live, in the tenant, passing the
        filter); ``check_filter`` False: the IDs are known to pass it, check the rest."""
        if self.seq is not None:
            return self.reader.execute(
                f"SELECT {self._columns} FROM {self._source} WHERE {self.filter_sql} AND "
                f"{_IN_LIST}", [*self._params, ids]).fetchall()
        if len(ids) <= INDEX_LOOKUP_MAX:
            # a constant ID list alone on the table is answered from the ID index; the
            # other conditions go outside the (materialised) lookup, or DuckDB scans
            lookup = f"id IN ({', '.join('?' * len(ids))})"
            if not self.filtered or not check_filter:
                # no filter to apply: tenant and liveness are plain columns, checked here
                rows = self.reader.execute(f"SELECT {self._columns} FROM {self._table} "
                                           f"WHERE {lookup}", ids).fetchall()
                return [r for r in rows if r[_TENANT] == self.tenant and r[_DELETED] is None]
            params: list[Any] = [*ids, self.tenant, *self.filter_params]
        else:
            lookup = _IN_LIST
            params = [ids, self.tenant, *self.filter_params]
        return self.reader.execute(
            f"WITH hit AS MATERIALIZED (SELECT {self._columns} FROM {self._table} "
            f"WHERE {lookup}) SELECT * FROM hit WHERE tenant = ? AND deleted_at IS NULL "
            f"AND {self.filter_sql}", params).fetchall()

    def places(self, group: Sequence[str], order: str) -> list[tuple[Any, ...]]:
        """(ID, expiry, group values..., order) of every candidate whose group and order
        fields are all set (what :meth:`neighbours` reads, for all of them at once; the expiry,
        naive UTC or None, says until when a row is one)."""
        cols_list = [*(q(f) for f in group), q(order)]
        set_ = " AND ".join(f"{c} IS NOT NULL" for c in cols_list)
        return [tuple(r) for r in self.reader.execute(
            f"SELECT id, {EXPIRES_COLUMN}, {', '.join(cols_list)} FROM {self._source} "
            f"WHERE {self.filter_sql} AND {set_}", self._params).fetchall()]

    def neighbours(self, ids: Sequence[str], group: Sequence[str], order: str
                   ) -> dict[str, tuple[Any, ...]]:
        """(group values..., order) of the candidates among ``ids`` and of every candidate
        with the same group values and an ``order`` one step before or after theirs."""
        cols_list = [*(q(f) for f in group), q(order)]
        cols, order_col = ", ".join(cols_list), cols_list[-1]
        join = " AND ".join(f"n.{g} = h.{g}" for g in cols_list[:-1])
        rows = self.reader.execute(
            f"WITH src AS MATERIALIZED (SELECT id, {cols} FROM {self._source} "
            f"WHERE {self.filter_sql}), h AS (SELECT {cols} FROM src WHERE {_IN_LIST}) "
            f"SELECT DISTINCT n.id, {', '.join(f'n.{c}' for c in cols_list)} FROM src n "
            f"JOIN h ON {join} AND n.{order_col} BETWEEN h.{order_col} - 1 "
            f"AND h.{order_col} + 1 WHERE n.{order_col} IS NOT NULL ORDER BY n.id",
            [*self._params, list(ids)]).fetchall()
        return {str(r[0]): tuple(r[1:]) for r in rows}
