"""The candidate scope of one search: its SQL, its candidate list and the rows it reads.

Every read of one search happens at one audit seq (see :class:`Scope`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import duckdb
import numpy as np
import numpy.typing as npt

from ..filters import FilterNode
from ..mirrors.keys import locate
from ..mirrors.vectors import LocalVectors, key_sql
from ..schema import EntityType
from ..store import Store
from ..store.sql import compile_filter, q
from ..store.tables import EXPIRES_COLUMN, SYSTEM_COLUMNS, table_name

#: Up to this many IDs are looked up through the primary-key index, more by a hash join
#: (measured on 100k rows: 0.1-0.25 ms per ID by index, 35-50 ms for a scan).
INDEX_LOOKUP_MAX = 256
TEXT_HASH = SYSTEM_COLUMNS.index("text_hash")
_TENANT = SYSTEM_COLUMNS.index("tenant")
_DELETED = SYSTEM_COLUMNS.index("deleted_at")
EXPIRES = SYSTEM_COLUMNS.index(EXPIRES_COLUMN)

Row = tuple[Any, ...]


class RowSource(Protocol):
    """Where a scope's rows come from instead of DuckDB alone (:mod:`.row_cache`)."""

    def select(self, ids: Sequence[str]) -> list[Row]:
        """The rows of those ``ids`` that are candidates."""


class Moved(Exception):
    """A commit happened during an optimistic search: redo it holding off writes."""


class Scope:
    """The candidate set of one search and the reads it makes, all at one audit seq.

    Reads run optimistically at the last committed seq (or, in the writer's own transaction,
    at its seq): the database's commit seqlock (:meth:`Database.stable`) tells afterwards
    whether a commit happened in between, and if one did, the search is redone holding off
    writes (:class:`Moved`). Every entity change is a commit, so an unchanged commit
    generation means an unchanged state.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Store, etype: EntityType,
                 tenant: str, seq: int | None, at_seq: int, node: FilterNode | None,
                 related: list[str] | None) -> None:
        self.con, self.etype, self.tenant, self.seq = con, etype, tenant, seq
        self.source_params: list[Any] = []
        self.source = store.source_sql(etype, tenant, seq, self.source_params)
        self.filter_params: list[Any] = []
        self.filt = compile_filter(node, self.filter_params)
        if related is not None:
            self.filt += " AND id IN (SELECT unnest(CAST(? AS VARCHAR[])))"
            self.filter_params.append(related)
        self.params = self.source_params + self.filter_params
        self.filtered = node is not None or related is not None
        self.table = table_name(etype.name)
        self.count = 0
        self.seen_seq = at_seq
        self.columns = ", ".join(list(SYSTEM_COLUMNS) + [q(n) for n in etype.fields])
        self.by_key = False  # list candidates by DuckDB hash(tenant, id), not ID
        self.list_large = False  # list the candidates even when the ANN plan is likely
        self._ids: list[str] | None = None
        self._keys: npt.NDArray[np.uint64] | None = None
        # the mirror rows of the candidate list, kept with a cached list (LocalVectors.top)
        self.row_memo: dict[str, Any] | None = None
        self.rows: dict[str, Row] = {}
        self._checked: set[str] = set()
        # IDs drawn from this scope's own candidate list: live, in the tenant and passing the
        # filter at this very state, so fetching their rows needs no filter
        self.proven: set[str] = set()
        # cache writes made only once the search is known to have read one state
        self.on_valid: list[Callable[[], None]] = []
        self.row_cache: RowSource | None = None  # rows kept since the last commit, if any

    def count_candidates(self, with_list: bool = False) -> int:
        """How many candidates there are; ``with_list``: also the candidates, in one scan."""
        if with_list:
            self._fetch_list()
            listed = self.listed()
            assert listed is not None
            return len(listed)
        row = self.con.execute(f"SELECT count(*) FROM {self.source} WHERE {self.filt}",
                               self.params).fetchone()
        return int(row[0]) if row else 0

    def listed(self) -> npt.NDArray[np.uint64] | list[str] | None:
        """The candidate list fetched so far (keys or IDs, as ``by_key`` says), if any."""
        return self._keys if self.by_key else self._ids

    def adopt(self, listed: npt.NDArray[np.uint64] | list[str], memo: dict[str, Any]) -> None:
        """Take a candidate list read earlier at this very state (see SearchEngine._count)."""
        self.row_memo = memo
        if self.by_key:
            self._keys = listed  # type: ignore[assignment]
        else:
            self._ids = listed  # type: ignore[assignment]

    @property
    def _key_sql(self) -> str:
        return key_sql() if self.by_key else "id"

    def candidate_keys(self) -> npt.NDArray[np.uint64]:
        """Every candidate's DuckDB ``hash(tenant, id)`` (needs ``by_key``; fetched once)."""
        assert self.by_key
        if self._keys is None:
            self._fetch_list()
        assert self._keys is not None
        return self._keys

    def candidate_ids(self) -> list[str]:
        """Every candidate ID (fetched once; in no particular order)."""
        if self._ids is None:
            self.by_key = False
            self._fetch_list()
        assert self._ids is not None
        return self._ids

    def _fetch_list(self) -> None:
        # a plain column into numpy: ~20 % faster than a list() aggregate through Arrow
        column = self.con.execute(
            f"SELECT {self._key_sql} AS c FROM {self.source} WHERE {self.filt}",
            self.params).fetchnumpy()["c"]
        if self.by_key:
            self._keys = np.asarray(column, dtype=np.uint64)
        else:
            self._ids = [str(i) for i in column.tolist()]

    def membership(self, local: LocalVectors) -> Callable[[list[str]], set[str]]:
        """A test of which of some IDs are candidates, by the candidate list (fetched)."""
        if self.by_key:
            memo = self.row_memo if self.row_memo is not None else {}
            ordered = memo.get("sorted_keys")
            if ordered is None:
                ordered = memo["sorted_keys"] = np.sort(self.candidate_keys())

            def by_key(ids: list[str]) -> set[str]:
                keys = local.keys_of(self.tenant, ids)  # 0: not in the mirror
                _, hit = locate(ordered, keys)
                return {eid for eid, ok in zip(ids, (hit & (keys != 0)).tolist(), strict=True)
                        if ok}
            return by_key
        listed = set(self.candidate_ids())
        return lambda ids: {eid for eid in ids if eid in listed}

    def fingerprint(self) -> str:
        """A short hash of this candidate set's definition (not of its contents)."""
        text = repr((self.etype.name, self.tenant, self.filt, self.filter_params))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def preload(self, rows: Sequence[Row]) -> None:
        """Every candidate row of this (unfiltered) scope at once: its count, its list, and
        every row a later step fetches (a replayed state kept in memory)."""
        assert not self.filtered
        self.rows = {row[0]: row for row in rows}
        self._checked = set(self.rows)
        self._ids = list(self.rows)
        self.by_key = False
        self.count = len(rows)

    def fetch_rows(self, ids: Sequence[str]) -> dict[str, Row]:
        """The full rows of those ``ids`` that are candidates (live, in tenant, filter holds)."""
        wanted = [i for i in dict.fromkeys(ids) if i not in self._checked]
        if wanted:
            for row in (self._select_rows(wanted) if self.row_cache is None
                        else self.row_cache.select(wanted)):
                self.rows[row[0]] = row
            self._checked.update(wanted)
        return {i: self.rows[i] for i in ids if i in self.rows}

    def live_rows(self, limit: int) -> list[Row] | None:
        """Every live row of this scope's type in its tenant (None: more than ``limit``)."""
        assert self.seq is None  # the scope's source: the tenant's live rows now
        count = self.con.execute(f"SELECT count(*) FROM {self.source}",
                                 self.source_params).fetchone()
        if count is None or int(count[0]) > limit:
            return None
        rows: list[Row] = self.con.execute(f"SELECT {self.columns} FROM {self.source}",
                                           self.source_params).fetchall()
        return rows

    def passing(self, ids: list[str]) -> set[str]:
        """Those of ``ids`` that are candidates at this state (live, in the tenant, passing
        the filter), read by the ID index: for a few IDs."""
        return {row[0] for row in self._select_rows(ids)}

    def keys_of(self, ids: list[str]) -> dict[str, int]:
        """The ``hash(tenant, id)`` DuckDB lists each of the tenant's ``ids`` by."""
        rows = self.con.execute(
            f"SELECT id, {key_sql()} FROM (SELECT CAST(? AS VARCHAR) AS tenant, "
            "unnest(CAST(? AS VARCHAR[])) AS id)", [self.tenant, ids]).fetchall()
        return {str(eid): int(key) for eid, key in rows}

    def _select_rows(self, ids: list[str]) -> list[Row]:
        if self.seq is not None:
            return self.con.execute(
                f"SELECT {self.columns} FROM {self.source} WHERE {self.filt} AND id IN "
                "(SELECT unnest(CAST(? AS VARCHAR[])))", [*self.params, ids]).fetchall()
        if len(ids) <= INDEX_LOOKUP_MAX:
            # a constant ID list alone on the table is answered from the ID index; the
            # other conditions go outside the (materialised) lookup, or DuckDB scans
            lookup = f"id IN ({', '.join('?' * len(ids))})"
            if not self.filtered or self.proven.issuperset(ids):
                # no filter to apply: tenant and liveness are plain columns, checked here
                rows = self.con.execute(f"SELECT {self.columns} FROM {self.table} "
                                        f"WHERE {lookup}", ids).fetchall()
                return [r for r in rows if r[_TENANT] == self.tenant and r[_DELETED] is None]
            params: list[Any] = [*ids, self.tenant, *self.filter_params]
        else:
            lookup = "id IN (SELECT unnest(CAST(? AS VARCHAR[])))"
            params = [ids, self.tenant, *self.filter_params]
        return self.con.execute(
            f"WITH hit AS MATERIALIZED (SELECT {self.columns} FROM {self.table} "
            f"WHERE {lookup}) SELECT * FROM hit WHERE tenant = ? AND deleted_at IS NULL "
            f"AND {self.filt}", params).fetchall()
