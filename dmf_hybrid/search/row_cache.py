"""The row cache: rows that search resolution read from DuckDB, kept until the next commit.

Resolution re-reads every proposed ID from DuckDB (fail closed). Between two commits those
reads always give the same answer, so their results are kept in process and a repeated search
issues no DuckDB statement. DuckDB stays the truth: entries are only ever filled from what a
search read, never written to directly, and a miss reads DuckDB.

Every entry is tagged with the commit generation of the database (:meth:`Database.stable`) it
was read at, and it is stored only once that search has checked that no commit got in while it
read (``Scope.on_valid``). A lookup at any other generation finds nothing and empties the
cache, so every commit of this process (its only writer) invalidates all of it. Searches inside
the writer's own transaction and ``as_of`` searches do not use it. Two kinds of entries:

- ``(type, tenant, id) -> row or None``: the live row of that ID in that tenant (None: there is
  none — absent, deleted or in another tenant only);
- ``(filter fingerprint, id) -> bool``: whether that ID passes that filter (tenant, type,
  compiled condition and parameters).

The bound is a number of entries (``Settings.row_cache_size``), least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from .scope import Row, Scope


class RowCache:
    """Rows and filter outcomes of the last committed state searches resolved against."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._generation = -1
        self._entries: OrderedDict[tuple[Any, ...], Row | bool | None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def attach(self, scope: Scope, generation: int) -> None:
        """Let a search's scope resolve through the cache; it keeps what it read if valid."""
        if self.size <= 0:
            return
        view = RowView(self, scope, generation)
        scope.row_cache = view
        scope.on_valid.append(view.keep)

    def _lookup(self, generation: int, keys: list[tuple[Any, ...]]
                ) -> dict[tuple[Any, ...], Row | bool | None]:
        found: dict[tuple[Any, ...], Row | bool | None] = {}
        with self._lock:
            if generation != self._generation:
                self._entries.clear()  # a commit happened since: nothing here holds
                self._generation = max(generation, self._generation)
                return found
            for key in keys:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    found[key] = self._entries[key]
        return found

    def _store(self, generation: int, fresh: dict[tuple[Any, ...], Row | bool | None]) -> None:
        with self._lock:
            if generation < self._generation:
                return  # read before a later commit: stale already
            if generation > self._generation:
                self._entries.clear()
                self._generation = generation
            self._entries.update(fresh)
            for key in fresh:
                self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self) -> None:
        """Drop every entry (they are refilled from DuckDB on demand)."""
        with self._lock:
            self._entries.clear()


class RowView:
    """One search's access to the cache: lookups at its generation, reads kept for later."""

    def __init__(self, cache: RowCache, scope: Scope, generation: int) -> None:
        self.cache, self.scope, self.generation = cache, scope, generation
        self.fingerprint = scope.fingerprint() if scope.filtered else None
        self.fresh: dict[tuple[Any, ...], Row | bool | None] = {}

    def select(self, ids: Sequence[str]) -> list[Row]:
        """The rows of those ``ids`` that are candidates, from the cache or from DuckDB."""
        scope = self.scope
        base = (scope.etype.name, scope.tenant)
        plain = [i for i in ids if self.fingerprint is None or i in scope.proven]
        checked = [i for i in ids if self.fingerprint is not None and i not in scope.proven]
        known = self.cache._lookup(self.generation, [(*base, i) for i in ids]
                                   + [(self.fingerprint, i) for i in checked])
        rows: list[Row] = []
        missing_plain: list[str] = []
        missing_checked: list[str] = []
        for eid in plain:
            if (*base, eid) not in known:
                missing_plain.append(eid)
            elif (row := known[(*base, eid)]) is not None:
                rows.append(row)  # type: ignore[arg-type]
        for eid in checked:
            passes = known.get((self.fingerprint, eid))
            if passes is None or (passes and (*base, eid) not in known):
                missing_checked.append(eid)
            elif passes:
                rows.append(known[(*base, eid)])  # type: ignore[arg-type]
        if missing_plain:  # proven or unfiltered: DuckDB checks tenant and liveness only
            found = {row[0]: row for row in scope._select_rows(missing_plain)}
            for eid in missing_plain:
                self.fresh[(*base, eid)] = found.get(eid)
                if self.fingerprint is not None and eid in found:  # proven: it passes
                    self.fresh[(self.fingerprint, eid)] = True
            rows.extend(found.values())
        if missing_checked:
            found = {row[0]: row for row in scope._select_rows(missing_checked)}
            for eid in missing_checked:
                self.fresh[(self.fingerprint, eid)] = eid in found
                if eid in found:
                    self.fresh[(*base, eid)] = found[eid]
            rows.extend(found.values())
        return rows

    def keep(self) -> None:
        """Store what this search read (called once it is known to have read one state)."""
        if self.fresh:
            self.cache._store(self.generation, self.fresh)
