"""The journal: what the audit events this process committed lately were about.

The search caches ask which entities the commits between two log positions changed
(:mod:`.changes`). The events table answers, but DuckDB scans it for a range
of seqs (its key index serves no range), a cost that grows with the log. This process is the
file's only writer, so it records the (op, type, tenant, entity ID) of each event it appends
and makes them visible once their transaction commits; a rolled-back transaction's events are
never recorded. A range the journal does not hold in full (older than it, or a commit whose
hook has not run yet) is read from the table instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

#: Events remembered, newest kept.
JOURNAL_SIZE = 8192

#: (log position, op, type, tenant, entity ID) of one event.
Entry = tuple[int, str, str | None, str, str | None]


class Journal:
    """The last :data:`JOURNAL_SIZE` committed events' subjects, by log position."""

    def __init__(self, size: int = JOURNAL_SIZE) -> None:
        self.size = size
        self._events: OrderedDict[int, tuple[str, str | None, str, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def committed(self, entries: list[Entry]) -> None:
        """Record events whose transaction has committed."""
        with self._lock:
            for seq, op, type_name, tenant, entity_id in entries:
                self._events[seq] = (op, type_name, tenant, entity_id)
            while len(self._events) > self.size:
                self._events.popitem(last=False)

    def span(self, after: int, upto: int) -> list[tuple[str, str | None, str, str | None]] | None:
        """(op, type, tenant, entity ID) of every event with ``after < pos <= upto``; None
        unless the journal holds each of them."""
        with self._lock:
            events = self._events
            if upto - after > len(events):
                return None
            found = [events.get(seq) for seq in range(after + 1, upto + 1)]
        if any(item is None for item in found):
            return None
        return found  # type: ignore[return-value]
