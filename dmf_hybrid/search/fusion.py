"""Reciprocal rank fusion with deterministic tie-breaking."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rrf(rankings: Mapping[str, Sequence[tuple[str, float]]], k: int = 60,
        weights: Mapping[str, float] | None = None) -> list[tuple[str, float]]:
    """Fused (id, score) from ranked lists: sum of weight / (k + rank), score desc, id asc."""
    scores: dict[str, float] = {}
    for leg, ranked in rankings.items():
        weight = 1.0 if weights is None else weights.get(leg, 1.0)
        for rank, (eid, _score) in enumerate(ranked, start=1):
            scores[eid] = scores.get(eid, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
