"""The vector leg: candidates scored exactly against the mirror, or proposed by the ANN index.

Candidate sets up to ``exact_threshold`` are scored exactly (recall 1.0); larger ones ask the
vector index for about ``2 k / selectivity`` proposals, keep those among the candidates, and
widen until enough survive, or score every candidate exactly when the index cannot surface
enough. A vector index other processes write is behind the store by what its relay has not
applied yet: those entities (``unrelayed``) join the proposals with their scores from the
mirror, which is never behind. An index that cannot be reached (a Chroma server that is down)
proposes nothing: every candidate is scored exactly, and the scope says so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ..errors import NotFound, ServiceUnavailable
from ..indexer import own_ids
from ..mirrors.vectors import PRECISE_ONLY_ROWS, SCORE_EPS, LocalVectors
from ..vector.base import VectorIndex
from .ranking import Ranking, ranked, unit64
from .scope import Scope

log = logging.getLogger(__name__)

#: ANN proposals asked per wanted survivor, on top of 1 / selectivity.
ANN_OVERFETCH = 2.0
#: Factor by which the ANN (and filtered keyword) fetch grows when too few survive.
WIDEN = 4


def vector_leg(scope: Scope, local: LocalVectors | None, vectors: VectorIndex, collection: str,
               qvec: np.ndarray, depth: int, exact_threshold: int,
               unrelayed: Callable[[], Sequence[str] | None] | None = None
               ) -> tuple[Ranking, str]:
    """The vector ranking of the scope's candidates and the plan that made it ("exact"/"ann");
    ``unrelayed``: the IDs the vector index may be behind on (None: too many to tell)."""
    if scope.count == 0 or local is None or not len(local):
        return [], "exact"
    query = unit64(qvec)
    if scope.count <= exact_threshold:
        return exact_ranking(scope, local, query, depth), "exact"
    total = len(local)
    selectivity = min(1.0, scope.count / total)
    n = min(total, max(depth + 1, math.ceil(depth / selectivity * ANN_OVERFETCH)))
    keep: dict[str, float] = {}  # confirmed proposals and their similarity
    decided: set[str] = set()
    # with the candidate list at hand, a proposal is confirmed by membership, not by DuckDB
    member = scope.membership(local) if scope.listed() is not None else None
    fresh = _fresh(scope, local, query, unrelayed)
    if fresh is None:
        return exact_ranking(scope, local, query, depth), "exact"
    while True:
        hits = proposals(vectors, collection, qvec, n)
        if hits is None:
            scope.index_unavailable = True
            return exact_ranking(scope, local, query, depth), "exact"
        proposed = own_ids(hits, scope.tenant)
        if fresh:
            proposed = sorted([h for h in proposed if h[0] not in fresh] + list(fresh.items()),
                              key=lambda hit: (-hit[1], hit[0]))
        pending = [hit for hit in proposed if hit[0] not in decided]
        # confirm proposals best first, a few at a time, until ``depth`` survive and no
        # unchecked proposal can still beat the last of them (a primary-key lookup per ID
        # costs more than the arithmetic, so stop early)
        at = 0
        while at < len(pending):
            if len(keep) >= depth and pending[at][1] < sorted(
                    keep.values(), reverse=True)[depth - 1] - SCORE_EPS:
                break
            need = max(1, depth - len(keep))
            chunk = pending[at:at + math.ceil(need / selectivity * 1.25) + 2]
            at += len(chunk)
            decided.update(eid for eid, _ in chunk)
            if scope.filtered and member is not None:
                members = member([eid for eid, _ in chunk])
                scope.proven.update(members)
                keep.update(hit for hit in chunk if hit[0] in members)
            elif scope.filtered:
                passing = scope.fetch_rows([eid for eid, _ in chunk])
                keep.update(hit for hit in chunk if hit[0] in passing)
            else:
                held = local.have(scope.tenant, [eid for eid, _ in chunk])
                keep.update(hit for hit, ok in zip(chunk, held, strict=True) if ok)
        if len(keep) >= depth or n >= total:
            break
        n = min(total, n * WIDEN)
    if len(keep) < min(depth, scope.count):
        # the index could not surface enough candidates (HNSW is approximate, or it is
        # behind DuckDB): score every candidate exactly instead
        return exact_ranking(scope, local, query, depth), "exact"
    if len(keep) <= PRECISE_ONLY_ROWS:
        return ranked(*local.precise(scope.tenant, keep, query), depth), "ann"
    found = local.top(query, depth, lambda: local.rows_of_ids(scope.tenant, keep))
    assert found is not None  # mapping by ID always succeeds
    return ranked(*found, depth), "ann"


def proposals(vectors: VectorIndex, collection: str, qvec: np.ndarray, n: int
               ) -> list[tuple[str, float]] | None:
    """The index's ``n`` nearest (none while the collection does not exist: a shared index
    the relay has not written yet; None: the index cannot be reached)."""
    try:
        return vectors.query(collection, qvec, n)
    except NotFound:
        return []
    except ServiceUnavailable as exc:
        log.warning("vector index unavailable, scoring every candidate exactly: %s", exc)
        return None


def _fresh(scope: Scope, local: LocalVectors, query: npt.NDArray[np.float64],
           unrelayed: Callable[[], Sequence[str] | None] | None) -> dict[str, float] | None:
    """The mirror's similarities of the scope tenant's entities the index is behind on (None:
    too many of them: score every candidate exactly)."""
    if unrelayed is None:
        return {}
    ids = unrelayed()
    if ids is None:
        return None
    ids = [eid for eid in ids if local.has(scope.tenant, eid)]
    if not ids:
        return {}
    found = local.top(query, len(ids), lambda: local.rows_of_ids(scope.tenant, ids))
    assert found is not None  # mapping by ID always succeeds
    return {str(eid): float(score) for eid, score in zip(*found, strict=True)}


def exact_ranking(scope: Scope, local: LocalVectors, query: npt.NDArray[np.float64],
           depth: int) -> Ranking:
    """The exact top ``depth`` candidates, scored against the mirror."""
    memo = scope.row_memo
    found = None
    if not scope.filtered:
        found = local.top(query, depth, lambda: local.rows_of_tenant(scope.tenant), memo)
    elif scope.by_key:
        found = local.top(query, depth, lambda: local.rows_of_keys(scope.candidate_keys()),
                          memo)
    if found is None:  # listed by ID (or the keys collided)
        found = local.top(query, depth,
                          lambda: local.rows_of_ids(scope.tenant, scope.candidate_ids()),
                          memo)
        assert found is not None  # mapping by ID always succeeds
    ids, scores = found
    if scope.filtered:
        scope.proven.update(ids)
    return ranked(ids, scores, depth)
