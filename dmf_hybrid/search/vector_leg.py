"""The vector leg: candidates scored exactly against the mirror, or proposed by the ANN index.

Candidate sets up to ``exact_threshold`` are scored exactly (recall 1.0); larger ones ask the
vector index for about ``2 k / selectivity`` proposals, keep those among the candidates, and
widen until enough survive, or score every candidate exactly when the index cannot surface
enough.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ..indexer import own_ids
from ..mirrors.vectors import SCORE_EPS, LocalVectors
from ..vector.base import VectorIndex
from .ranking import Ranking, ranked, unit64
from .scope import Scope

#: ANN proposals asked per wanted survivor, on top of 1 / selectivity.
ANN_OVERFETCH = 2.0
#: Factor by which the ANN (and filtered keyword) fetch grows when too few survive.
WIDEN = 4


def vector_leg(scope: Scope, local: LocalVectors | None, vectors: VectorIndex, collection: str,
               qvec: np.ndarray, depth: int, exact_threshold: int) -> tuple[Ranking, str]:
    """The vector ranking of the scope's candidates and the plan that made it ("exact"/"ann")."""
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
    while True:
        pending = [hit for hit in own_ids(vectors.query(collection, qvec, n), scope.tenant)
                   if hit[0] not in decided]
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
                keep.update(hit for hit in chunk if local.has(scope.tenant, hit[0]))
        if len(keep) >= depth or n >= total:
            break
        n = min(total, n * WIDEN)
    if len(keep) < min(depth, scope.count):
        # the index could not surface enough candidates (HNSW is approximate, or it is
        # behind DuckDB): score every candidate exactly instead
        return exact_ranking(scope, local, query, depth), "exact"
    found = local.top(query, depth, lambda: local.rows_of_ids(scope.tenant, keep))
    assert found is not None  # mapping by ID always succeeds
    return ranked(*found, depth), "ann"


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
