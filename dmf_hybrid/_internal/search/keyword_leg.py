"""The keyword leg: BM25 over the tenant's documents, restricted to the candidates."""

from __future__ import annotations

import math

from ..mirrors.keyword import KeywordIndex
from .ranking import Ranking
from .scope import Scope
from .vector_leg import ANN_OVERFETCH, WIDEN


def keyword_leg(scope: Scope, kw: KeywordIndex | None, text: str, depth: int,
                exact_threshold: int) -> Ranking:
    """The BM25 ranking of the scope's candidates (the tenant's index, restricted to them)."""
    if kw is None or scope.count == 0:
        return []
    if not scope.filtered:
        return kw.search(text, depth)
    if scope.count <= exact_threshold or scope.listed() is not None:
        found = (kw.search_keys(text, depth, scope.candidate_keys(), scope.row_memo)
                 if scope.by_key else None)
        if found is None:  # listed by ID (or the keys collided)
            found = kw.search(text, depth, candidates=scope.candidate_ids())
        scope.proven.update(eid for eid, _ in found)
        return found
    fetch = max(depth, math.ceil(depth * len(kw) / scope.count * ANN_OVERFETCH))
    while True:
        found = kw.search(text, fetch)
        passing = scope.fetch_rows([eid for eid, _ in found])
        keep = [(eid, s) for eid, s in found if eid in passing]
        if len(keep) >= depth or len(found) < fetch:
            return keep[:depth]
        fetch *= WIDEN
