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

A read-mostly phase over a large type (distinct queries propose distinct IDs, so most lookups
miss) would still issue a DuckDB statement per search. Once ``FILL_AFTER`` searches of one
generation have read a (type, tenant) from DuckDB, the next one reads all its live rows in one
statement at its own state; kept like any entry (only if no commit got in), that copy is
complete: an ID it lacks has no live row, so no later lookup of that (type, tenant) reads
DuckDB until the next commit. A copy counts against the same bound (a type that does not fit
is not copied) and is never evicted piecemeal, so "absent from the copy" always means absent.
Filter outcomes of IDs a search has not proven still come from DuckDB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from .scope import Row, Scope

#: Searches of one generation that read a (type, tenant) from DuckDB before it is copied whole.
FILL_AFTER = 16

Part = tuple[str, str]  # (type, tenant)


class RowCache:
    """Rows and filter outcomes of the last committed state searches resolved against."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._generation = -1
        self._entries: OrderedDict[tuple[Any, ...], Row | bool | None] = OrderedDict()
        self._whole: dict[Part, dict[str, Row]] = {}  # complete copies
        self._misses: dict[Part, int] = {}  # searches that read DuckDB, this generation
        self._too_big: set[Part] = set()  # did not fit, this generation
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries) + self._copied()

    def _copied(self) -> int:
        """Rows held by complete copies (they count against the bound)."""
        return sum(len(rows) for rows in self._whole.values())

    def _reset(self, generation: int) -> None:
        """Forget everything (a commit happened); caller holds the lock."""
        self._entries.clear()
        self._whole.clear()
        self._misses.clear()
        self._too_big.clear()
        self._generation = generation

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
                # a commit happened since: nothing here holds
                self._reset(max(generation, self._generation))
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
                self._reset(generation)
            self._entries.update(fresh)
            for key in fresh:
                self._entries.move_to_end(key)
            bound = self.size - self._copied()
            while self._entries and len(self._entries) > bound:
                self._entries.popitem(last=False)

    def _copy(self, generation: int, part: Part) -> dict[str, Row] | None:
        """The complete copy of a (type, tenant) at ``generation``, if there is one."""
        with self._lock:
            return self._whole.get(part) if generation == self._generation else None

    def _missed(self, generation: int, part: Part) -> int:
        """Count one more search of ``generation`` reading ``part`` from DuckDB; how many
        there were (0: a copy is not worth trying)."""
        with self._lock:
            if generation != self._generation or part in self._too_big:
                return 0
            self._misses[part] = count = self._misses.get(part, 0) + 1
            return count

    def _room(self) -> int:
        """Rows a new copy may hold."""
        with self._lock:
            return self.size - self._copied()

    def _store_copy(self, generation: int, part: Part, rows: dict[str, Row] | None) -> None:
        with self._lock:
            if generation != self._generation:
                return  # a commit got in: this copy may be stale already
            if rows is None:
                self._too_big.add(part)
            else:
                self._whole[part] = rows
                for key in [k for k in self._entries if k[:2] == part]:
                    del self._entries[key]  # the copy answers these now

    def forget(self) -> None:
        """Drop every entry (they are refilled from DuckDB on demand)."""
        with self._lock:
            self._reset(self._generation)


class RowView:
    """One search's access to the cache: lookups at its generation, reads kept for later."""

    def __init__(self, cache: RowCache, scope: Scope, generation: int) -> None:
        self.cache, self.scope, self.generation = cache, scope, generation
        self.fingerprint = scope.fingerprint() if scope.filtered else None
        self.fresh: dict[tuple[Any, ...], Row | bool | None] = {}
        self.part: Part = (scope.etype.name, scope.tenant)
        self.copy: dict[str, Row] | None = None  # a complete copy of the part, when read
        self.new_copy: dict[str, Row] | None = None  # read by this search, kept if valid
        self.too_big = False
        self.counted = False

    def select(self, ids: Sequence[str]) -> list[Row]:
        """The rows of those ``ids`` that are candidates, from the cache or from DuckDB."""
        scope = self.scope
        base = self.part
        plain = [i for i in ids if self.fingerprint is None or i in scope.proven]
        checked = [i for i in ids if self.fingerprint is not None and i not in scope.proven]
        copy = self.whole()
        if copy is not None:
            return self._from_copy(copy, plain, checked)
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
        if missing_plain or missing_checked:
            self.note_miss()
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

    def _from_copy(self, copy: dict[str, Row], plain: list[str], checked: list[str]
                   ) -> list[Row]:
        """:meth:`select` with a complete copy: it answers tenant and liveness; only filter
        outcomes not known yet are read from DuckDB."""
        rows = [copy[i] for i in plain if i in copy]
        checked = [i for i in checked if i in copy]  # the others have no live row
        known = self.cache._lookup(self.generation, [(self.fingerprint, i) for i in checked])
        missing: list[str] = []
        for eid in checked:
            passes = known.get((self.fingerprint, eid))
            if passes is None:
                missing.append(eid)
            elif passes:
                rows.append(copy[eid])
        if missing:
            found = {row[0]: row for row in self.scope._select_rows(missing)}
            for eid in missing:
                self.fresh[(self.fingerprint, eid)] = eid in found
            rows.extend(found.values())
        return rows

    def whole(self) -> dict[str, Row] | None:
        """The complete copy of this search's (type, tenant), if one is kept or was read."""
        if self.copy is None:
            self.copy = (self.new_copy if self.new_copy is not None
                         else self.cache._copy(self.generation, self.part))
        return self.copy

    def note_miss(self) -> None:
        """Count this search as one that read DuckDB; past FILL_AFTER, copy the part whole."""
        if self.counted:
            return
        self.counted = True
        if self.cache._missed(self.generation, self.part) < FILL_AFTER:
            return
        room = self.cache._room()
        rows = self.scope.live_rows(room)
        if rows is None:
            self.too_big = True
        else:
            self.new_copy = {row[0]: row for row in rows}

    def keep(self) -> None:
        """Store what this search read (called once it is known to have read one state)."""
        if self.fresh:
            self.cache._store(self.generation, self.fresh)
        if self.new_copy is not None or self.too_big:
            self.cache._store_copy(self.generation, self.part, self.new_copy)
