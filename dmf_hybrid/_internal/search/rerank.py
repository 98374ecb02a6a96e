"""After fusion: a query's time and names read against the rows, sessions scored and spread.

Both are steps of a type's search profile (``dmf_hybrid._internal.profiles``), applied to the fused
ranking after ordered-neighbour support and before resolution, and both read the proposed
rows once (:meth:`Scope.fetch_rows`, the rows resolution reads anyway):

- :func:`read_query_time`: the query's time phrases as date windows against the search's
  ``reference_time`` (``dmf_hybrid._internal.dates``), and whether it asks *when*.
- *time boost* (``TimeBoost``): a row gains ``window`` times its score when its time or one of
  its grounded dates falls in a window, ``when`` times its score when it has grounded dates
  and the query asks when. A boost only: rows outside every window stay candidates.
- *named* (``Named``): a row gains ``weight`` times its score when the query names its field
  value as whole words ("What did Caroline research?": Caroline's own turns).
- *sessions* (``Sessions``): a row gains ``weight`` times the best score of its group (a
  conversation's session), so a session that matches well lifts its other turns; then the
  ranking is picked greedily, each row's score multiplied by (1 - ``diversity``) for every
  row of its group picked before it (maximal marginal relevance with "same group" as the
  similarity), so one session cannot fill the top when others match well. A picked row keeps
  the score it was picked at; those scores never rise, so the order is (score desc, ID asc).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..clock import utcnow
from ..dates import Grounded, asks_when, ground
from ..profiles import DateGrounding, Named, Sessions, TimeBoost
from ..store.tables import SYSTEM_COLUMNS
from .ranking import Ranking
from .scope import Scope


@dataclass(frozen=True)
class QueryTime:
    """A query as the profile's steps read it: its text, the reference its time phrases were
    read against, their windows, and whether it asks when."""

    text: str
    reference: dt.datetime
    windows: list[Grounded] = field(default_factory=list)
    asks_when: bool = False


#: Query texts whose time phrases are kept (per reference day), as the query vectors are.
QUERY_TIME_CACHE_SIZE = 1024


def read_query_time(text: str, reference: dt.datetime | None) -> QueryTime:
    """The time phrases of ``text`` against ``reference`` (None: now)."""
    ref = reference if reference is not None else utcnow()
    windows, when = _phrases(text, ref.astimezone(dt.UTC).date())
    return QueryTime(text, ref, list(windows), when)


@functools.lru_cache(maxsize=QUERY_TIME_CACHE_SIZE)
def _phrases(text: str, day: dt.date) -> tuple[tuple[Grounded, ...], bool]:
    """The windows of ``text``'s time phrases on ``day`` and whether it asks when: they read
    only the reference's UTC day, so a repeated query finds them here (reading them costs
    ~20 us a search, about as much as resolving its hits)."""
    return tuple(ground(text, day)), asks_when(text)


def rerank(scope: Scope, fused: Ranking, *, time: TimeBoost | None, sessions: Sessions | None,
           named: Named | None, dates: DateGrounding | None, query_time: QueryTime,
           depth: int) -> list[tuple[str, float]]:
    """``fused`` with the time boost, the named boost and the session step applied to its
    first ``depth`` rows (see the module doc); the rest follow in their order, each at most
    the last reranked score, so the ranking stays (score desc, ID asc)."""
    boost = time is not None and dates is not None and (
        (time.window > 0 and bool(query_time.windows)) or (time.when > 0 and
                                                            query_time.asks_when))
    naming = named is not None and named.weight > 0
    spread = sessions is not None and (sessions.weight > 0 or sessions.diversity > 0)
    if not fused or not (boost or naming or spread):
        return list(fused)
    head = _rerank_head(scope, fused[:depth], time, sessions, named, dates, query_time, boost,
                        naming, spread)
    floor = head[-1][1]
    return head + [(eid, min(float(s), floor)) for eid, s in fused[depth:]]


def _rerank_head(scope: Scope, fused: Ranking, time: TimeBoost | None,
                 sessions: Sessions | None, named: Named | None, dates: DateGrounding | None,
                 query_time: QueryTime, boost: bool, naming: bool, spread: bool
                 ) -> list[tuple[str, float]]:
    rows = scope.fetch_rows([eid for eid, _ in fused])
    value = _reader(scope)
    scores = {eid: float(s) for eid, s in fused}
    said = _names_in(query_time.text)
    for eid in scores:
        row = rows.get(eid)
        if row is None:
            continue
        factor = 1.0
        if boost:
            assert time is not None and dates is not None
            factor += _time_boost(value(row, dates.time), value(row, dates.field), time,
                                  query_time)
        if naming:
            assert named is not None
            name = value(row, named.field)
            if isinstance(name, str) and _words(name) and said(name):
                factor += named.weight
        scores[eid] *= factor
    if not spread:
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    assert sessions is not None
    group = {eid: tuple(value(rows[eid], g) for g in sessions.group) if eid in rows
             else (eid,) for eid in scores}
    best: dict[tuple[Any, ...], float] = {}
    for eid, score in scores.items():
        best[group[eid]] = max(best.get(group[eid], score), score)
    lifted = {eid: s + sessions.weight * best[group[eid]] for eid, s in scores.items()}
    return _spread(lifted, group, sessions.diversity)


def _spread(scores: dict[str, float], group: dict[str, tuple[Any, ...]], diversity: float
            ) -> list[tuple[str, float]]:
    """Greedy pick: a row's score times (1 - diversity) per row of its group picked before."""
    order = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    if diversity <= 0:
        return order
    picked: list[tuple[str, float]] = []
    taken: dict[tuple[Any, ...], int] = {}
    left = order
    while left:
        best_at, best = 0, None
        for at, (eid, score) in enumerate(left):
            adjusted = score * (1 - diversity) ** taken.get(group[eid], 0)
            if best is None or adjusted > best[1] or (adjusted == best[1] and eid < best[0]):
                best_at, best = at, (eid, adjusted)
            if best[1] >= score:  # the rest score lower before any penalty
                break
        assert best is not None
        picked.append(best)
        taken[group[best[0]]] = taken.get(group[best[0]], 0) + 1
        left = left[:best_at] + left[best_at + 1:]
    return picked


def _names_in(text: str) -> Callable[[str], bool]:
    """Whether a value's words appear in ``text`` in a row (any case), remembered per value."""
    padded = f" {' '.join(_words(text))} "
    seen: dict[str, bool] = {}

    def said(value: str) -> bool:
        if value not in seen:
            seen[value] = f" {' '.join(_words(value))} " in padded
        return seen[value]
    return said


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _time_boost(when: Any, grounded: Any, time: TimeBoost, query_time: QueryTime) -> float:
    """The boost a row earns by its time ``when`` and its grounded dates."""
    found = _found(grounded)
    factor = 0.0
    if time.when > 0 and query_time.asks_when and found:
        factor += time.when
    if time.window > 0 and query_time.windows:
        spans = [(dt.date.fromisoformat(f["start"]), dt.date.fromisoformat(f["end"]))
                 for f in found]
        if isinstance(when, dt.datetime):
            spans.append((when.date(), when.date()))
        elif isinstance(when, dt.date):
            spans.append((when, when))
        if any(w.overlaps(start, end) for w in query_time.windows for start, end in spans):
            factor += time.window
    return factor


def _found(grounded: Any) -> list[dict[str, str]]:
    if isinstance(grounded, str):  # a json column as DuckDB returns it
        grounded = json.loads(grounded)
    found = grounded.get("found") if isinstance(grounded, dict) else None
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


def _reader(scope: Scope) -> Callable[[tuple[Any, ...], str], Any]:
    """``value(row, field)`` for the scope's rows (system columns, then the type's fields)."""
    at = {name: len(SYSTEM_COLUMNS) + i for i, name in enumerate(scope.etype.fields)}
    return lambda row, name: row[at[name]]
