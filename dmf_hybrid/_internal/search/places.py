"""The places of rows in their groups (group values..., order), for ordered-neighbour support.

Neighbour support needs, for each proposal, the rows one step before and after it in its group.
The database answers that with a join over the search's candidates (``Candidates.neighbours``);
repeated searches of one state answer it from places read once instead. Reading every place
costs more than one join (5.2 against 3.6 ms over LoCoMo's 4,124 turns), so the places are
read by the second search of a state, not the first: a store written between every two
searches joins as it did, one searched again and again looks up.

- a filtered search whose candidate list the filter cache keeps (a conversation) keeps the
  places of those candidates beside the list (``Scope.row_memo``), read once per audit seq;
- a search with no filter (the whole type, up to :data:`WHOLE_ROWS_KEPT` rows) uses
  :class:`WholePlaces`: the places of the type's live rows in a tenant, kept while the events
  since say that no entity of that type and tenant changed (``store.changes``).

Either way the answer is the database's, row for row (``tests/search/test_profiles.py``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..clock import to_naive_utc, utcnow
from ..profiles import Neighbours
from ..store.changes import ChangeFeed
from .scope import Scope

#: Candidate lists up to this size keep their rows' places (at most ~2 MB each).
PLACES_KEPT = 20_000
#: Whole types up to this many rows have their places kept (at most ~20 MB each) ...
WHOLE_ROWS_KEPT = 100_000
#: ... for at most this many (type, tenant, group, order) at once, least recently used dropped.
WHOLE_KEPT = 4


class PlaceIndex:
    """The places (group values..., order) of a set of rows, both ways, and the expiry of
    those that have one (a row expires with no event: its place stops counting then)."""

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        #: ID -> place
        self.place: dict[str, tuple[Any, ...]] = {str(r[0]): tuple(r[2:]) for r in rows}
        #: ID -> expiry (naive UTC), for the rows that have one
        self.expires: dict[str, dt.datetime] = {str(r[0]): r[1] for r in rows
                                                 if r[1] is not None}
        #: place -> the IDs there
        self.at: dict[tuple[Any, ...], list[str]] = {}
        for eid, place in self.place.items():
            self.at.setdefault(place, []).append(eid)

    def neighbours(self, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """The places of ``ids`` and of every row at their place or one step before or after
        it, among the rows not expired now: what :meth:`Candidates.neighbours` answers."""
        now = to_naive_utc(utcnow())
        found: set[str] = set()
        for eid in ids:
            place = self.place.get(eid)
            if place is None or self._expired(eid, now):
                continue
            *group, position = place
            for step in (-1, 0, 1):
                found.update(self.at.get((*group, position + step), ()))
        return {eid: self.place[eid] for eid in sorted(found)
                if not self._expired(eid, now)}

    def _expired(self, eid: str, now: dt.datetime) -> bool:
        at = self.expires.get(eid)
        return at is not None and at <= now


class WholePlaces:
    """The places of whole types' rows per tenant, for the searches with no filter."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        # (type key, tenant, group, order) -> (the seq it was read at, its places)
        self._kept: OrderedDict[tuple[Any, ...], tuple[int, PlaceIndex]] = OrderedDict()
        # ... -> the seq of the last search that found none kept
        self._missed: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._lock = threading.Lock()

    def index(self, scope: Scope, near: Neighbours) -> PlaceIndex | None:
        """The places of the scope's rows (no filter, now): kept from an earlier seq when no
        entity of the type changed in the tenant since; else read, when a search of the same
        state found none before this one (kept once the search is known to have read one
        state); else None (the caller joins)."""
        key = (scope.etype.key, scope.tenant, near.group, near.order)
        with self._lock:
            held = self._kept.get(key)
            missed = self._missed.get(key)
            _remember(self._missed, key, scope.pos)
        if held is not None and self._unchanged(scope, held[0]):
            return held[1]
        if missed is None or not self._unchanged(scope, missed):
            return None
        index = PlaceIndex(scope.query.places(near.group, near.order))
        scope.on_valid.append(lambda: self._keep(key, scope.pos, index))
        return index

    def _unchanged(self, scope: Scope, seq: int) -> bool:
        """Whether no entity of the scope's type changed in its tenant after ``seq``."""
        if seq > scope.pos:
            return False
        changes = self.feed.between(scope.reader, seq, scope.pos)
        return changes is not None and not changes.ids.get((scope.etype.name, scope.tenant))

    def _keep(self, key: tuple[Any, ...], seq: int, index: PlaceIndex) -> None:
        with self._lock:
            held = self._kept.get(key)
            if held is None or held[0] <= seq:
                _remember(self._kept, key, (seq, index), WHOLE_KEPT)

    def forget(self) -> None:
        """Drop every kept place (read again on demand)."""
        with self._lock:
            self._kept.clear()
            self._missed.clear()


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any, size: int = 64) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def places_of(scope: Scope, ids: Sequence[str], near: Neighbours,
              whole: WholePlaces | None) -> dict[str, tuple[Any, ...]]:
    """(group values..., order) of the proposed rows and of their neighbours at order +-1,
    from kept places where there are some (see the module doc), else from the database."""
    memo = scope.row_memo
    if memo is not None and scope.count <= PLACES_KEPT:
        key = f"places:{','.join(near.group)}:{near.order}"
        held = memo.get(key)
        if held is not None and held[0] == scope.pos:
            return held[1].neighbours(ids)
        if memo.get(f"{key}:missed") == scope.pos:  # the second search of this state
            held = (scope.pos, PlaceIndex(scope.query.places(near.group, near.order)))
            scope.on_valid.append(lambda: memo.__setitem__(key, held))  # read at that state
            return held[1].neighbours(ids)
        memo[f"{key}:missed"] = scope.pos  # only a hint of when to read
    elif whole is not None and not scope.filtered and scope.seq is None and (
            scope.count <= WHOLE_ROWS_KEPT):
        index = whole.index(scope, near)
        if index is not None:
            return index.neighbours(ids)
    return scope.query.neighbours(ids, near.group, near.order)
