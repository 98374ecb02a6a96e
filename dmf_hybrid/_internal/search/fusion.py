"""Fusion of the vector and keyword rankings into one, with deterministic tie-breaking.

Each leg hands over its best ``depth`` ``(entity_id, score)`` pairs, best first (vector: cosine
similarity; keyword: BM25; *exact*: the keyword hits the query names, one of their field values
whole, e.g. a dish in a restaurant's list: ``KeywordIndex.exact``). Methods (:data:`FUSIONS`):

- ``"rrf"``: reciprocal rank fusion, ``sum(weight / (k + rank))``. Only ranks count, so a
  document both legs rank fairly high beats one the keyword leg ranks first by far: with a
  weak dense leg, a query that names an entity is pushed below the keyword leg alone.
- ``"minmax"``: each leg's scores scaled to [0, 1] by the minimum and maximum of its list,
  then a weighted sum (Weaviate's *relative score* fusion).
- ``"dbsf"``: each leg's scores standardised by the mean and three standard deviations of
  its list (Qdrant's *distribution-based score fusion*), then a weighted sum.
- ``"bm25max"``: BM25 divided by the list's best BM25, plus twice the raw cosine. Cosines
  of a query's candidates lie close together unless the dense leg really tells them apart, so
  a keyword match much stronger than the rest (an exact name) stays first, while among
  keyword-tied candidates the dense leg decides. A document missing from a full list gets
  that list's lowest score (it ranked below all of them), from a list that is not full 0 for
  BM25 (no term matched).

The default is ``bm25max`` with the exact leg. Of the 15 fusions compared on SciFact (train,
nDCG@10), LoCoMo (7 conversations, R@10) and CrossWOZ (val lookups, success@5) together, with
MiniLM, it has the best LoCoMo and CrossWOZ figures and is 0.001 below the best SciFact one
(0.738, 66.2, 0.998; equal-weight RRF k=60 without the exact leg, the former default: 0.718,
57.7, 0.668). The table is in docs/retrieval.md (``python -m evaluation.compare``). Ties are broken
by entity ID ascending.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dmf_hybrid._internal.config import DEFAULT_FUSION, FUSIONS
from dmf_hybrid._internal.errors import ValidationError

Ranking = Sequence[tuple[str, float]]

#: Leg weights of a method when a search gives none (any leg not named weighs 1). Cosines of a
#: query's candidates spread over about half the range of BM25 relative to the best, so
#: bm25max counts the cosine twice; measured with weights 0.5, 1 and 2 (docs/retrieval.md).
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {"bm25max": {"vector": 2.0}}
#: The leg of the documents a query names (one of their field values, whole): see
#: ``KeywordIndex.exact``. Score methods count it 1 (a best keyword match); RRF by its ranks.
EXACT_LEG = "exact"


def check_fusion(name: object) -> str:
    """``name`` if it names a fusion method, else a ValidationError listing them."""
    if isinstance(name, str) and name in FUSIONS:
        return name
    raise ValidationError(f"unknown fusion {name!r}; known: {', '.join(FUSIONS)}",
                          field="fusion")


def rrf(rankings: Mapping[str, Ranking], k: int = 60,
        weights: Mapping[str, float] | None = None) -> list[tuple[str, float]]:
    """Fused (id, score) from ranked lists: sum of weight / (k + rank), score desc, id asc."""
    scores: dict[str, float] = {}
    for leg, ranked in rankings.items():
        weight = 1.0 if weights is None else weights.get(leg, 1.0)
        for rank, (eid, _score) in enumerate(ranked, start=1):
            scores[eid] = scores.get(eid, 0.0) + weight / (k + rank)
    return _ordered(scores)


def fuse(rankings: Mapping[str, Ranking], method: str = DEFAULT_FUSION, *, k: int = 60,
         weights: Mapping[str, float] | None = None, depth: int | None = None
         ) -> list[tuple[str, float]]:
    """The fused ranking of the legs' lists by ``method`` (``k``: the RRF constant;
    ``depth``: how deep each leg ranked, so a list that long was cut there)."""
    method = check_fusion(method)
    weights = {**DEFAULT_WEIGHTS.get(method, {}), **(weights or {})}
    if method == "rrf":
        return rrf(rankings, k=k, weights=weights)
    every = sorted({eid for ranked in rankings.values() for eid, _ in ranked})
    scores = dict.fromkeys(every, 0.0)  # a document of a zero-weight leg stays, at 0
    for leg, ranked in rankings.items():
        weight = weights.get(leg, 1.0)
        if not ranked or weight == 0.0:
            continue
        scaled = _scaled(leg, ranked, method, full=depth is not None and len(ranked) >= depth)
        for eid in every:
            scores[eid] = scores.get(eid, 0.0) + weight * scaled.get(eid, scaled[""])
    return _ordered(scores)


def _scaled(leg: str, ranked: Ranking, method: str, full: bool) -> dict[str, float]:
    """A leg's scores on the method's scale; key ``""`` holds the score of a missing ID."""
    if leg == EXACT_LEG:  # named by the query: as much as the best keyword match
        return {**{eid: 1.0 for eid, _ in ranked}, "": 0.0}
    values = [float(s) for _, s in ranked]
    low, high = min(values), max(values)
    if method == "minmax":
        span = high - low
        out = {eid: (s - low) / span if span > 0 else 1.0 for eid, s in ranked}
        out[""] = 0.0
        return out
    if method == "dbsf":
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        lo, hi = mean - 3 * std, mean + 3 * std
        span = hi - lo
        out = {eid: min(1.0, max(0.0, (s - lo) / span)) if span > 0 else 1.0
               for eid, s in ranked}
        out[""] = 0.0
        return out
    # bm25max: BM25 relative to the best, cosine as it is
    if leg == "keyword":
        out = {eid: s / high if high > 0 else 0.0 for eid, s in ranked}
        out[""] = (low / high if high > 0 else 0.0) if full else 0.0
        return out
    out = {eid: float(s) for eid, s in ranked}
    out[""] = low if full else min(0.0, low)
    return out


def _ordered(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
