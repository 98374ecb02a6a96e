"""What the commits between two positions of the audit log changed, read from the log.

Every entity change appends an event in the transaction that makes it (create, update,
append, delete, restore, erase; one log position each, with no gap: a rolled-back transaction
gives its positions back). So the events after position ``a`` up to ``b`` name every entity
whose row differs between the two states, and the search caches (:mod:`.row_cache`,
:mod:`.filter_cache`) keep what those events do not touch instead of starting over at every commit.

The store's journal (:mod:`dmf_hybrid._internal.store.journal`) holds the recent events this process
committed, so the usual question (the last commit or few) needs no DuckDB statement.

Only what can be proven is kept. :meth:`ChangeFeed.between` answers None (anything may have
changed) when the range holds any event that is not a plain entity change or a relation
change (a type defined, a reindex, a lifecycle rule, an archive...), when events are missing
from the range (archived, or a seq not committed), or when the range is too long to be worth
reading. Relation changes touch no entity row and no filter outcome: a ``related_to`` search
carries its related IDs in its filter parameters, which are part of every cache key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from .journal import Journal
from .tables import ENTITY_OPS
from .txn import Connection

#: Longest range of events read to carry caches over; past it they start over (a bulk load).
MAX_EVENTS = 4096
#: Ops that change no entity row (the relations table only).
_RELATION_OPS = frozenset({"link", "unlink"})
_ENTITY_OPS = frozenset(ENTITY_OPS)
#: Ranges remembered (each search cache asks once per commit).
_MEMO_SIZE = 8

Part = tuple[str, str]  # (type, tenant)


@dataclass(frozen=True)
class Changes:
    """The entities a range of commits changed."""

    ids: dict[Part, frozenset[str]]  # (type, tenant) -> IDs of that type changed in that tenant

    def touches(self, part: Part) -> bool:
        """True if any entity of that type in that tenant changed."""
        return part in self.ids

    def all_ids(self) -> frozenset[str]:
        """Every changed ID, of any type and tenant."""
        return frozenset().union(*self.ids.values()) if self.ids else frozenset()


class ChangeFeed:
    """:meth:`between` two log positions, from the store's journal of recent events where it holds
    them, else from the events table; memoised for the few ranges the caches ask about."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal
        self._memo: OrderedDict[tuple[int, int], Changes | None] = OrderedDict()
        self._lock = threading.Lock()

    def between(self, con: Connection, after: int, upto: int) -> Changes | None:
        """What the events with ``after < pos <= upto`` changed; None if that is not known.

        ``upto`` must be a committed position (the caller read it from :meth:`Database.stable`):
        the events up to it never change, so the answer does not depend on when it is read.
        """
        if upto < after:
            return None
        if upto == after:
            return Changes({})
        if upto - after > MAX_EVENTS:
            return None
        key = (after, upto)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        rows = None if self.journal is None else self.journal.span(after, upto)
        if rows is None:  # older than the journal: the table (a scan of the log)
            rows = con.execute(
                "SELECT op, type, tenant, entity_id FROM events WHERE pos > ? AND pos <= ?",
                [after, upto]).fetchall()
        found = _digest(rows, upto - after)
        with self._lock:
            self._memo[key] = found
            while len(self._memo) > _MEMO_SIZE:
                self._memo.popitem(last=False)
        return found


def _digest(rows: list[tuple[str, str | None, str, str | None]], expected: int
            ) -> Changes | None:
    if len(rows) != expected:  # an event is missing (archived, or not committed)
        return None
    ids: dict[Part, set[str]] = {}
    for op, type_name, tenant, entity_id in rows:
        if op in _RELATION_OPS:
            continue
        if op not in _ENTITY_OPS or type_name is None or entity_id is None:
            return None
        ids.setdefault((type_name, tenant), set()).add(entity_id)
    return Changes({part: frozenset(found) for part, found in ids.items()})
