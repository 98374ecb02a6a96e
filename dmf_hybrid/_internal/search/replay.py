"""Replay: both legs over the state at an audit seq, rebuilt from the log and the cache.

``as_of`` searches take candidates and texts from the audit log and vectors from the
embedding cache, scored the way the live legs score, so a receipt replays to the same hits
(unless the ANN plan, which is approximate, answered it, or an entity was erased since).

Rebuilding a state from the log costs far more than a live search and grows with the log, so
the states of the last few (tenant, type, seq) searched are kept (:class:`ReplayCache`): the
tenant's rows at that seq, their vectors and their BM25 index. A state at a seq never changes
(the log only grows), except by an erase, which empties the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..indexer import Indexer
from ..mirrors.keyword import KeywordIndex, exact_leg
from ..mirrors.text import entity_documents, type_analysis
from ..schema import EntityType
from ..store.sql import field_values
from ..store.tables import SYSTEM_COLUMNS
from ..vector.exact import normalise_rows, precise_scores
from .ranking import Ranking, ranked, unit64
from .scope import TEXT_HASH, Row, Scope

#: States kept, and the rows they may hold in all (a larger state is rebuilt every time).
REPLAY_STATES = 4
REPLAY_ROWS = 200_000


@dataclass
class ReplayState:
    """A tenant's rows of one type at one seq (full rows, as ``Scope.fetch_rows`` gives
    them), with what both legs need from them."""

    rows: list[Row]
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    keyword: KeywordIndex | None = None


class ReplayCache:
    """The last :data:`REPLAY_STATES` replayed states, within :data:`REPLAY_ROWS` rows."""

    def __init__(self, states: int = REPLAY_STATES, max_rows: int = REPLAY_ROWS) -> None:
        self.states, self.max_rows = states, max_rows
        self._states: OrderedDict[tuple[str, str, int, int], ReplayState] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple[str, str, int, int]) -> ReplayState | None:
        with self._lock:
            state = self._states.get(key)
            if state is None:
                self.misses += 1
                return None
            self._states.move_to_end(key)
            self.hits += 1
            return state

    def put(self, key: tuple[str, str, int, int], state: ReplayState) -> None:
        if len(state.rows) > self.max_rows:
            return
        with self._lock:
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > self.states or sum(
                    len(s.rows) for s in self._states.values()) > self.max_rows:
                self._states.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()


def state_at(scope: Scope, cache: ReplayCache | None) -> ReplayState:
    """The tenant's rows of the scope's type at ``scope.seq``: kept, or rebuilt from the log.

    An unfiltered scope is given them at once (its count and every row a later step fetches),
    so nothing more is read from the log for it.
    """
    assert scope.seq is not None
    etype = scope.etype
    key = (scope.tenant, etype.name, etype.version, scope.seq)
    state = cache.get(key) if cache is not None else None
    if state is None:
        state = ReplayState(scope.query.ordered_rows(filtered=False))
        if cache is not None:
            cache.put(key, state)
    if not scope.filtered:
        scope.preload(state.rows)
    return state


def replay_legs(scope: Scope, indexer: Indexer, mode: str, text: str,
                qvec: np.ndarray | None, depth: int, state: ReplayState
                ) -> dict[str, Ranking]:
    """Both legs over ``state`` (the tenant's rows at ``scope.seq``), within the scope."""
    etype = scope.etype
    rows = state.rows if not scope.filtered else scope.query.ordered_rows()
    rankings: dict[str, Ranking] = {}
    if mode != "keyword":
        assert qvec is not None
        rankings["vector"] = vector_ranking(
            rows, row_vectors(etype, indexer, rows, state.vectors), qvec, depth)
    if mode != "vector":
        # BM25 statistics come from all of the tenant's documents at that seq, as the live
        # per-tenant index had them, so a replay scores the same
        if state.keyword is None:
            state.keyword = rows_index(etype, state.rows)
        rankings["keyword"] = (state.keyword.search(text, depth, candidates=[r[0] for r in rows])
                               if rows else [])
        if mode == "hybrid":
            rankings["exact"] = exact_leg(state.keyword, text, rankings["keyword"])
    return rankings


def vector_ranking(rows: list[Row], vectors: dict[str, np.ndarray], qvec: np.ndarray,
                   depth: int) -> Ranking:
    """The exact vector ranking of ``rows`` (those with a vector), from ``vectors`` by text
    hash."""
    scored = [(r[0], r[TEXT_HASH]) for r in rows if r[TEXT_HASH] in vectors]
    if not scored:
        return []
    return matrix_ranking([e for e, _ in scored], np.stack([vectors[h] for _, h in scored]),
                          qvec, depth)


def matrix_ranking(ids: list[str], matrix: np.ndarray, qvec: np.ndarray, depth: int
                   ) -> Ranking:
    """The exact ranking of ``ids`` by their rows of ``matrix`` (normalised here) against the
    query, scored in float64 row by row."""
    return ranked(ids, precise_scores(normalise_rows(matrix), unit64(qvec)), depth)


def rows_index(etype: EntityType, rows: list[Row]) -> KeywordIndex:
    """A BM25 index of the documents of ``rows`` (its statistics are theirs)."""
    kw = KeywordIndex(analyzer=type_analysis(etype))
    kw.upsert(entity_documents(etype, [(r[0], _fields(etype, r)) for r in rows]))
    return kw


def _fields(etype: EntityType, row: Row) -> dict[str, Any]:
    return field_values(etype, row[len(SYSTEM_COLUMNS):])


def row_vectors(etype: EntityType, indexer: Indexer, rows: list[Row],
                have: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The vectors of ``rows`` by text hash: those in ``have``, else from the embedding cache
    (texts it lacks are embedded), added to ``have``, which is returned."""
    wanted = {r[TEXT_HASH] for r in rows if r[TEXT_HASH]} - set(have)
    if wanted:
        found = indexer.cached_vectors(sorted(wanted))
        missing = {r[TEXT_HASH]: etype.embed_text(_fields(etype, r)) for r in rows
                   if r[TEXT_HASH] in wanted and r[TEXT_HASH] not in found}
        if missing:
            found.update(indexer.embed_texts(
                {h: t for h, t in missing.items() if t is not None}))
        have.update(found)
    return have
