"""Replay: both legs over the state at an audit seq, rebuilt from the log and the cache.

``as_of`` searches take candidates and texts from the audit log and vectors from the
embedding cache, scored the way the live legs score, so a receipt replays to the same hits
(unless the ANN plan, which is approximate, answered it, or an entity was erased since).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..indexer import Indexer
from ..mirrors.keyword import KeywordIndex, entity_documents, exact_leg, type_analysis
from ..schema import EntityType
from ..store import Store
from ..store.sql import field_values
from ..vector.exact import normalise_rows
from .ranking import Ranking, precise_scores, ranked, unit64
from .scope import Row, Scope


def replay_legs(scope: Scope, store: Store, indexer: Indexer, mode: str, text: str,
                qvec: np.ndarray | None, depth: int) -> dict[str, Ranking]:
    """Both legs over the state at ``scope.seq``, rebuilt from the log and the cache."""
    rankings: dict[str, Ranking] = {}
    etype = scope.etype
    cols = ", ".join(f'"{n}"' for n in etype.fields)
    rows = scope.con.execute(
        f"SELECT id, text_hash, {cols} FROM {scope.source} WHERE {scope.filt} ORDER BY id",
        scope.params).fetchall()
    if mode != "keyword":
        assert qvec is not None
        hashes = {r[1] for r in rows if r[1]}
        vectors = indexer.cached_vectors(sorted(hashes))
        missing = {r[1]: _text(etype, r) for r in rows if r[1] and r[1] not in vectors}
        if missing:
            vectors.update(indexer.embed_texts(
                {h: t for h, t in missing.items() if t is not None}))
        scored = [(r[0], r[1]) for r in rows if r[1] in vectors]
        if scored:
            matrix = normalise_rows(np.stack([vectors[h] for _, h in scored]))
            rankings["vector"] = ranked([e for e, _ in scored],
                                        precise_scores(matrix, unit64(qvec)), depth)
        else:
            rankings["vector"] = []
    if mode != "vector":
        # BM25 statistics come from all of the tenant's documents at that seq, as the
        # live per-tenant index had them, so a replay scores the same
        params: list[Any] = []
        source = store.source_sql(etype, scope.tenant, scope.seq, params)
        every = scope.con.execute(f"SELECT id, text_hash, {cols} FROM {source} ORDER BY id",
                                  params).fetchall()
        kw = KeywordIndex(analyzer=type_analysis(etype))
        kw.upsert(entity_documents(
            etype, [(r[0], field_values(etype, r[2:])) for r in every]))
        rankings["keyword"] = (kw.search(text, depth, candidates=[r[0] for r in rows])
                               if rows else [])
        if mode == "hybrid":
            rankings["exact"] = exact_leg(kw, text, rankings["keyword"])
    return rankings


def _text(etype: EntityType, row: Row) -> str | None:
    return etype.embed_text(field_values(etype, row[2:]))
