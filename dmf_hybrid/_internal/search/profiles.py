"""A type's search profile applied to one search: effective options, query terms, neighbours.

:func:`effective` merges, per option, the explicit argument of the search, else the type's
profile (``dmf_hybrid._internal.profiles.SearchProfile``), else the memory's setting.
:func:`strip_query` is the ``drop_stopwords`` query term handling. :func:`neighbour_support`
is ordered-neighbour support: after fusion, each proposed row gains ``weight`` times the better
fused score of the rows right before and after it in its group. The neighbours are read from
the structured fields at the search's audit seq and under its filter (one query over the fused
proposals, each group joined to its rows at order +-1, or places read once and looked up:
:mod:`.places`), so no row outside the proposals and their neighbours is scored, and the
result is a function of the data alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..errors import ValidationError
from ..profiles import LEGS, Named, Neighbours, SearchProfile, Sessions, TimeBoost
from .fusion import check_fusion
from .places import WholePlaces, places_of
from .ranking import Ranking
from .scope import Scope

#: NLTK's English stopword list (179 words): question words, pronouns, auxiliaries.
QUERY_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their
theirs themselves what which who whom this that that'll these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of
at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very s t can will
just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn
didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn
mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn
wouldn't""".split())
_QUERY_TOKEN = re.compile(r"[\w']+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Options:
    """The options one search runs with, after the profile and overrides are applied."""

    fusion: str
    rrf_k: int
    weights: Mapping[str, float] | None
    query_terms: str
    neighbours: Neighbours | None
    sessions: Sessions | None = None
    time: TimeBoost | None = None
    named: Named | None = None


def effective(profile: SearchProfile | None, settings: Settings, *, fusion: str | None,
              rrf_k: int | None, weights: Mapping[str, float] | None,
              query_terms: str | None, neighbour_weight: float | None) -> Options:
    """Explicit arguments first, then the type's profile, then the memory's settings."""
    p = profile or SearchProfile()
    if weights is not None:
        bad = sorted(set(weights) - set(LEGS))
        if bad or any(not math.isfinite(w) or w < 0 for w in weights.values()):
            raise ValidationError(f"weights name the legs {', '.join(LEGS)} with finite "
                                  "numbers >= 0", field="weights")
    if query_terms is not None and query_terms not in ("all", "drop_stopwords"):
        raise ValidationError("query_terms must be 'all' or 'drop_stopwords'",
                              field="query_terms")
    if rrf_k is not None and (isinstance(rrf_k, bool) or not isinstance(rrf_k, int)
                              or rrf_k < 1):
        raise ValidationError("rrf_k must be an integer >= 1", field="rrf_k")
    near = p.neighbours
    if neighbour_weight is not None:
        if not math.isfinite(neighbour_weight) or neighbour_weight < 0:
            raise ValidationError("neighbour_weight must be a finite number >= 0",
                                  field="neighbour_weight")
        if near is None and neighbour_weight > 0:
            raise ValidationError("the type's profile declares no neighbours (group, order)",
                                  field="neighbour_weight")
        near = None if near is None or neighbour_weight == 0 else near.model_copy(
            update={"weight": float(neighbour_weight)})
    if near is not None and near.weight == 0:
        near = None
    return Options(
        fusion=check_fusion(fusion if fusion is not None else p.fusion or settings.fusion),
        rrf_k=rrf_k if rrf_k is not None else p.rrf_k or settings.rrf_k,
        weights=weights if weights is not None else p.weights,
        query_terms=query_terms if query_terms is not None else p.query_terms,
        neighbours=near, sessions=p.sessions, time=p.time, named=p.named)


def strip_query(text: str) -> str:
    """The query without English stopwords: ``"When did Caroline go?"`` -> ``"Caroline go"``.

    A token (apostrophes kept: ``what's``, ``Melanie's``) is dropped when each of its word parts
    is a stopword or a single letter; punctuation goes; words of other scripts stay. When
    nothing would be left, the text is returned unchanged (a query made only of stopwords still
    means something to the model).
    """
    kept = []
    for token in _QUERY_TOKEN.findall(text):
        parts = _WORD.findall(token.lower())
        if not all(p in QUERY_STOPWORDS or (len(p) == 1 and not p.isdigit()) for p in parts):
            kept.append(token)
    return " ".join(kept) if kept else text


def neighbour_support(scope: Scope, fused: Ranking, near: Neighbours, floor: float,
                      whole: WholePlaces | None = None) -> list[tuple[str, float]]:
    """``fused`` re-scored with ordered-neighbour support (score desc, entity ID asc).

    Candidates are the fused proposals and their neighbours (rows at order +-1 of the same
    group that pass the search's filter); a neighbour that was not proposed has score
    ``floor`` of its own. A row's new score: its own plus ``near.weight`` times the best own
    score of the rows at its two neighbouring places (several rows may share a place: the
    best of them counts, whatever order the engine lists them in). ``whole``: the kept
    places of whole types, for a search with no filter (:mod:`.places`).
    """
    if not fused:
        return []
    own = {eid: float(s) for eid, s in fused}
    places = places_of(scope, list(own), near, whole)
    at: dict[tuple[Any, ...], list[str]] = {}
    for eid, place in places.items():
        at.setdefault(place, []).append(eid)
    scores: dict[str, float] = {}
    for eid, (*group, position) in places.items():
        best = None
        for step in (-1, 1):
            for other in at.get((*group, position + step), ()):
                value = own.get(other, floor)
                best = value if best is None else max(best, value)
        base = own.get(eid, floor)
        scores[eid] = base + near.weight * best if best is not None else base
    for eid, score in own.items():  # proposals the filter or group fields do not place
        scores.setdefault(eid, score)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
