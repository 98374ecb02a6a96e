"""The candidate scope of one search: its candidate list and the rows it reads.

The reads themselves are the store's (:class:`~dmf_hybrid._internal.store.candidates.Candidates`).

Every read of one search happens at one audit seq (see :class:`Scope`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..filters import FilterNode
from ..mirrors.keys import locate
from ..mirrors.vectors import LocalVectors
from ..schema import EntityType
from ..store import Store
from ..store.candidates import INDEX_LOOKUP_MAX, Candidates, Row
from ..store.tables import EXPIRES_COLUMN, SYSTEM_COLUMNS

__all__ = ["EXPIRES", "INDEX_LOOKUP_MAX", "TEXT_HASH", "Moved", "Row", "RowSource", "Scope"]

TEXT_HASH = SYSTEM_COLUMNS.index("text_hash")
EXPIRES = SYSTEM_COLUMNS.index(EXPIRES_COLUMN)


class RowSource(Protocol):
    """Where a scope's rows come from instead of DuckDB alone (:mod:`.row_cache`)."""

    def select(self, ids: Sequence[str]) -> list[Row]:
        """The rows of those ``ids`` that are candidates."""


class Moved(Exception):
    """A commit happened during an optimistic search: redo it holding off writes."""


class Scope:
    """The candidate set of one search and the reads it makes, all at one state of the store:
    its log position ``pos`` (what the caches key by), which is the tenant's ``tenant_seq``.

    Reads run optimistically at the last committed state (or, in the writer's own transaction,
    at its own): the database's commit seqlock (:meth:`Database.stable`) tells afterwards
    whether a commit happened in between, and if one did, the search is redone holding off
    writes (:class:`Moved`). Every entity change is a commit, so an unchanged commit
    generation means an unchanged state.
    """

    def __init__(self, store: Store, etype: EntityType, tenant: str, seq: int | None,
                 at: tuple[int, int], node: FilterNode | None, related: list[str] | None
                 ) -> None:
        self.etype, self.tenant, self.seq = etype, tenant, seq
        #: the store's reads of this scope, all through one connection (one state)
        self.query = Candidates(store.db.reader(), store, etype, tenant, seq, node, related)
        self.reader = self.query.reader
        self.filtered = self.query.filtered
        self.count = 0
        #: the state read: the store's log position and the tenant's seq there
        self.pos, self.tenant_seq = at
        self.by_key = False  # list candidates by DuckDB hash(tenant, id), not ID
        self.index_unavailable = False  # the vector leg could not ask the vector index
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
        return self.query.count()

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
        listed = self.query.listing(self.by_key)
        if self.by_key:
            self._keys = listed  # type: ignore[assignment]
        else:
            self._ids = listed  # type: ignore[assignment]

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
        text = repr((self.etype.name, self.tenant, self.query.filter_sql,
                     self.query.filter_params))
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

    def hold(self, rows: Sequence[Row]) -> None:
        """Keep candidate rows this scope read itself (its own candidates, at its state), so
        later steps fetch them from here."""
        for row in rows:
            self.rows[row[0]] = row
        self._checked.update(row[0] for row in rows)
        self.proven.update(row[0] for row in rows)

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
        return self.query.live_rows(limit)

    def passing(self, ids: list[str]) -> set[str]:
        """Those of ``ids`` that are candidates at this state (live, in the tenant, passing
        the filter), read by the ID index: for a few IDs."""
        return {row[0] for row in self._select_rows(ids)}

    def keys_of(self, ids: list[str]) -> dict[str, int]:
        """The ``hash(tenant, id)`` DuckDB lists each of the tenant's ``ids`` by."""
        return self.query.keys_of(ids)

    def _select_rows(self, ids: list[str]) -> list[Row]:
        return self.query.rows_of(ids, check_filter=not self.proven.issuperset(ids))
