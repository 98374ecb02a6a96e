"""The mirrors a process has loaded, within a memory budget.

Per entity type (by storage key) a search loads an exact mirror of the vectors
(:class:`LocalVectors`) and one BM25 :class:`KeywordIndex` per tenant; they mirror the store,
kept in step by the indexer. Every process would otherwise hold every vector of every type it
has ever searched (1.47 GB at 100,000 entities with the model), so the loaded mirrors are
bounded by ``budget_bytes``: when a load takes them past it, the least recently used types'
mirrors are dropped, and their next search loads them again. What a type holds is its arrays'
bytes exactly, plus its Python objects by averages measured with tracemalloc
(:meth:`LocalVectors.nbytes`, :func:`keyword_bytes`). A type whose vectors alone would not
fit the whole budget is never loaded (:meth:`fits`): its searches read the store directly
(:mod:`dmf_hybrid._internal.search.direct`). One whose vectors fit but whose mirrors together
come out larger than the budget is kept while it is searched (a warning says so).

A search takes a type's mirrors once per pass (:meth:`Indexer.mirrors`); dropping them later
leaves that pass's objects whole, and the pass's stamp tells whether a commit came meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from .mirror_load import Item, add_keyword
from .mirrors.keyword import KeywordIndex
from .mirrors.text import TypeAnalyzer
from .mirrors.vectors import ROW_OBJECT_BYTES, Key, LocalVectors

log = logging.getLogger(__name__)

#: Bytes of one BM25 document's Python objects (ID, slot map, its values' term sets) and of one
#: posting waiting in an index's delta: tracemalloc over 4,000 documents gave 540 to 1,710
#: (6 and 30 words) and 53.
DOC_OBJECT_BYTES, DELTA_POSTING_BYTES = 1000, 60


def keyword_bytes(index: KeywordIndex) -> int:
    """What a BM25 index holds: its arrays exactly, its Python objects by those averages."""
    stats = index.stats()
    return (stats["array_bytes"] + (stats["documents"] + stats["dead_slots"]) * DOC_OBJECT_BYTES
            + stats["delta_postings"] * DELTA_POSTING_BYTES)


class LoadedMirrors:
    """Every loaded type's mirrors (``lock`` guards them all) and their budget."""

    def __init__(self, budget_bytes: int = 0) -> None:
        self.lock = threading.RLock()
        self.vectors: dict[str, LocalVectors] = {}  # storage key -> exact mirror
        self.keyword: dict[tuple[str, str], KeywordIndex] = {}  # (key, tenant) -> BM25
        self.keyword_types: set[str] = set()  # types whose keyword indexes are loaded
        self.analysis: dict[str, TypeAnalyzer] = {}  # what they were analysed with
        #: what they may hold (0: no bound)
        self.budget_bytes = budget_bytes
        self._recent: OrderedDict[str, None] = OrderedDict()  # loaded types, least recent first
        self._over: set[str] = set()  # types said (logged) to be larger than the budget alone
        #: how many times a type's mirrors were dropped to stay within the budget
        self.evictions = 0

    def has(self, key: str, keyword: bool, analysis: TypeAnalyzer) -> bool:
        """Whether a type's exact mirror (and, with ``keyword``, its BM25 indexes analysed with
        ``analysis``) are loaded."""
        return key in self.vectors and (not keyword or self.keyword_loaded(key, analysis))

    def keyword_loaded(self, key: str, analysis: TypeAnalyzer) -> bool:
        return key in self.keyword_types and self.analysis.get(key) == analysis

    def fits(self, rows: int, dim: int) -> bool:
        """Whether the vector mirror of a type of ``rows`` rows of ``dim`` floats would fit
        the budget (always, without one)."""
        return not self.budget_bytes or rows * (dim * 4 + ROW_OBJECT_BYTES) <= self.budget_bytes

    def holds(self, key: str) -> bool:
        """Whether any mirror of a type is loaded."""
        return key in self.vectors or key in self.keyword_types

    def set_keyword(self, key: str, analysis: TypeAnalyzer,
                    indexes: dict[str, KeywordIndex]) -> None:
        """Replace every tenant's BM25 index of a type (first load, or the type's analyzer
        changed with a new type version: never two analyzers mixed)."""
        for index_key in [k for k in self.keyword if k[0] == key]:
            del self.keyword[index_key]
        for tenant, index in indexes.items():
            self.keyword[(key, tenant)] = index
        self.analysis[key] = analysis
        self.keyword_types.add(key)

    def update(self, key: str, items: list[Item], vectors: dict[str, np.ndarray],
               gone: Sequence[Key]) -> None:
        """Apply a change to the loaded mirrors of a type (lock held)."""
        local = self.vectors.get(key)
        if local is not None:
            local.delete(gone)
            if items:
                local.upsert([p[0] for p in items], [p[5] for p in items],
                             np.stack([vectors[p[3]] for p in items]),
                             [p[1] for p in items], [p[3] for p in items])
        if key not in self.keyword_types:
            return
        by_tenant: dict[str, list[str]] = {}
        for tenant, eid in gone:
            by_tenant.setdefault(tenant, []).append(eid)
        for tenant, ids in sorted(by_tenant.items()):
            kw = self.keyword.get((key, tenant))
            if kw is not None:
                kw.delete(ids)

        def index_of(tenant: str) -> KeywordIndex:
            if (key, tenant) not in self.keyword:
                self.keyword[(key, tenant)] = KeywordIndex(analyzer=self.analysis[key])
            return self.keyword[(key, tenant)]

        add_keyword(index_of, items)

    def take(self, key: str, tenant: str) -> tuple[LocalVectors | None, KeywordIndex | None]:
        """A type's exact mirror and one tenant's BM25 index, as just used (lock held)."""
        if key in self._recent:
            self._recent.move_to_end(key)
        return self.vectors.get(key), self.keyword.get((key, tenant))

    def nbytes(self) -> dict[str, int]:
        """What each loaded type's mirrors hold, by storage key."""
        with self.lock:
            sizes = {key: local.nbytes() for key, local in self.vectors.items()}
            for (key, _tenant), index in self.keyword.items():
                sizes[key] = sizes.get(key, 0) + keyword_bytes(index)
            return sizes

    def loaded(self, key: str) -> None:
        """A type's mirrors were just loaded for a search: drop the least recently used others'
        until the loaded ones fit the budget (lock held)."""
        self._recent[key] = None
        self._recent.move_to_end(key)
        if not self.budget_bytes:
            return
        sizes = self.nbytes()
        total = sum(sizes.values())
        for other in list(self._recent):
            if total <= self.budget_bytes:
                break
            if other != key:
                self.forget(other)
                total -= sizes.get(other, 0)
                self.evictions += 1
        if total > self.budget_bytes and key not in self._over:
            self._over.add(key)
            log.warning("the mirrors of type %s hold %.1f MB, more than the whole budget of "
                        "%.1f MB (mirror_budget_mb): kept while it is searched", key,
                        sizes.get(key, 0) / 2**20, self.budget_bytes / 2**20)

    def forget(self, key: str | None = None) -> None:
        """Drop one type's mirrors, or every type's (lock held); they load again on demand."""
        keys = list(set(self.vectors) | self.keyword_types) if key is None else [key]
        for one in keys:
            self.vectors.pop(one, None)
            for index_key in [k for k in self.keyword if k[0] == one]:
                del self.keyword[index_key]
            self.keyword_types.discard(one)
            self.analysis.pop(one, None)
            self._recent.pop(one, None)
