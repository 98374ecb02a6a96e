"""Direct legs: the search of a type whose mirrors would not fit the memory budget.

Nothing of such a type is held in memory (:meth:`Indexer.direct`); both legs read what they
rank from the store, at the search's one state, and score it the way the mirrors would:

* vector leg, a scope of at most ``exact_threshold`` candidates: every candidate's vector is
  read from the embedding cache, by text hash through its index for up to
  :data:`INDEXED_MAX` candidates (:meth:`EmbeddingCache.by_index`), else in one join
  (:meth:`Candidates.vectors`), and scored exactly (recall 1.0, the plan "exact");
* vector leg, a larger scope: the vector index proposes about ``2 k / selectivity`` nearest
  neighbours (widened until enough of them are candidates), the store reads those that are,
  and they are scored exactly from their cached vectors (the plan "ann"). Entities a shared
  vector index is behind on join the proposals. When the index cannot be reached, or cannot
  surface enough candidates, every candidate is read and scored a chunk at a time (the plan
  "exact"), within the memory of one chunk;
* keyword leg: the store finds the candidates holding the query's words (its terms and words
  as substrings of the embedded fields), at most :data:`KEYWORD_POOL` of them, those holding
  the rarest first (:meth:`Candidates.containing`), and BM25 ranks them. A row holding none
  of them would score 0. The statistics are those of the rows ranked (a mirror's are the
  tenant's whole type), so scores differ from a mirrored search's; the receipt says
  ``direct``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import NotFound, ServiceUnavailable
from ..indexer import Indexer, own_ids
from ..mirrors.keyword import exact_leg
from ..mirrors.text import substring_needles, type_analysis
from ..vector.base import VectorIndex
from .ranking import Ranking
from .replay import matrix_ranking, row_vectors, rows_index, vector_ranking
from .scope import TEXT_HASH, Row, Scope
from .vector_leg import ANN_OVERFETCH, WIDEN, proposals

#: Candidate rows read and scored at a time when every candidate of a large scope is scored.
CHUNK = 20_000
#: Candidates up to this many are looked up in the embedding cache by their text hashes,
#: more joined with it (measured at 100,000 entities on DuckDB: 105 candidates 7.6 against
#: 77 ms, 1,010 41 against 78 ms, 9,889 364 against 93 ms).
INDEXED_MAX = 1500
#: The most rows holding the query's words that the keyword leg ranks.
KEYWORD_POOL = 1000


def direct_legs(scope: Scope, indexer: Indexer, index: VectorIndex, collection: str,
                mode: str, text: str, qvec: np.ndarray | None, depth: int,
                exact_threshold: int, unrelayed: Callable[[], Sequence[str] | None] | None
                ) -> tuple[dict[str, Ranking], str]:
    """The legs of ``mode`` over the scope's candidates read from the store, and the plan."""
    etype = scope.etype
    rankings: dict[str, Ranking] = {}
    plan = "exact"
    if mode != "keyword":
        assert qvec is not None
        if not scope.count:
            rankings["vector"] = []
        elif scope.count <= exact_threshold:
            rankings["vector"] = _exact(scope, indexer, qvec, depth)
        else:
            rows = _proposed_rows(scope, index, collection, qvec, depth, unrelayed)
            if rows is None:
                rows = _best_in_chunks(scope, indexer, qvec, depth)
            else:
                plan = "ann"
            rankings["vector"] = vector_ranking(rows, row_vectors(etype, indexer, rows, {}),
                                                qvec, depth)
    if mode != "vector":
        # rows without any of the query's words score 0: BM25 ranks those holding them
        held = scope.query.containing(substring_needles(type_analysis(etype), text),
                                      KEYWORD_POOL) if scope.count else []
        scope.hold(held)
        kw = rows_index(etype, held) if held else None
        rankings["keyword"] = kw.search(text, depth) if kw is not None else []
        if mode == "hybrid":
            rankings["exact"] = exact_leg(kw, text, rankings["keyword"])
    return rankings, plan


def _exact(scope: Scope, indexer: Indexer, qvec: np.ndarray, depth: int) -> Ranking:
    """Every candidate scored exactly from its cached vector: up to :data:`INDEXED_MAX`
    looked up by text hash, more in one join of the candidates with the cache (the few texts
    the cache lacks are embedded)."""
    model = indexer.embedder.model_id
    listed = scope.query.text_hashes() if scope.count <= INDEXED_MAX else None
    if listed is not None:
        hashes, matrix = indexer.store.embedding_cache.by_index(
            model, sorted({h for _, h in listed}))
        row_of = {h: i for i, h in enumerate(hashes)}
        ids = [eid for eid, h in listed if h in row_of]
        matrix = matrix[[row_of[h] for eid, h in listed if h in row_of]] if ids else matrix
        missing = [eid for eid, h in listed if h not in row_of]
    else:
        ids, matrix, missing = scope.query.vectors(model)
    if missing:
        rows = scope.query.rows_of(missing, check_filter=False)
        vectors = row_vectors(scope.etype, indexer, rows, {})
        extra = [r for r in rows if r[TEXT_HASH] in vectors]
        ids += [r[0] for r in extra]
        matrix = np.vstack([matrix.reshape(-1, indexer.embedder.dim),
                            *[vectors[r[TEXT_HASH]][None, :] for r in extra]])
    if not ids:
        return []
    ranking = matrix_ranking(ids, matrix, qvec, depth)
    scope.proven.update(eid for eid, _ in ranking)
    return ranking


def _proposed_rows(scope: Scope, index: VectorIndex, collection: str, qvec: np.ndarray,
                   depth: int, unrelayed: Callable[[], Sequence[str] | None] | None
                   ) -> list[Row] | None:
    """The candidate rows among the vector index's nearest, at least ``depth`` of them (None:
    the index cannot be reached, is behind on too many entities, or cannot surface enough)."""
    behind: Sequence[str] | None = unrelayed() if unrelayed is not None else ()
    if behind is None:
        return None
    try:
        total = max(index.count(collection), scope.count)
    except NotFound:  # a shared index the relay has not written yet
        return None
    except ServiceUnavailable:
        scope.index_unavailable = True
        return None
    selectivity = min(1.0, scope.count / max(total, 1))
    n = min(total, max(depth + 1, math.ceil(depth / selectivity * ANN_OVERFETCH)))
    while True:
        hits = proposals(index, collection, qvec, n)
        if hits is None:
            scope.index_unavailable = True
            return None
        ids = [eid for eid, _ in own_ids(hits, scope.tenant)] + list(behind)
        found = scope.fetch_rows(ids)
        if len(found) >= depth or n >= total:
            break
        n = min(total, n * WIDEN)
    if len(found) < min(depth, scope.count):
        return None  # HNSW is approximate: too few of the candidates came up
    return [found[eid] for eid in dict.fromkeys(ids) if eid in found]


def _best_in_chunks(scope: Scope, indexer: Indexer, qvec: np.ndarray, depth: int
                    ) -> list[Row]:
    """Every candidate scored exactly, :data:`CHUNK` rows at a time: the rows of the best
    ``depth``."""
    ids = sorted(scope.candidate_ids())
    best: list[Row] = []
    for at in range(0, len(ids), CHUNK):
        rows = best + scope.query.rows_of(ids[at:at + CHUNK], check_filter=False)
        keep = {eid for eid, _ in vector_ranking(
            rows, row_vectors(scope.etype, indexer, rows, {}), qvec, depth)}
        best = [row for row in rows if row[0] in keep]
    scope.hold(best)
    return best
