"""The row cache: rows that search resolution read from DuckDB, kept while they hold.

Resolution re-reads every proposed ID from DuckDB (fail closed). Between two commits those
reads always give the same answer, so their results are kept in process and a repeated search
issues no DuckDB statement. DuckDB stays the truth: entries are only ever filled from what a
search read, never written to directly, and a miss reads DuckDB.

The cache is at one state, the commit generation of the database (:meth:`Database.stable`)
and its audit seq. An entry is stored only once its search has checked that no commit got in
while it read (``Scope.on_valid``), and only at the cache's state. A search at a later state
first brings the cache to it: the audit events between the two seqs
(:mod:`dmf_hybrid._internal.store.changes`) name
every entity those commits changed, and exactly their entries are dropped, so every commit of
this process (its only writer) invalidates what it touched. When the events cannot tell (a
type defined, a reindex, a rule, a gap) the whole cache is dropped. A search at an earlier
state finds nothing and stores nothing. Searches inside the writer's own transaction and
``as_of`` searches do not use it. Two kinds of entries:

- ``(type, tenant, id) -> row or None``: the live row of that ID in that tenant (None: there is
  none — absent, deleted or in another tenant only);
- ``(filter fingerprint, id) -> bool``: whether that ID passes that filter (tenant, type,
  compiled condition and parameters). A filter reads only the entity's own row and its
  parameters, so an outcome holds as long as the row does.

The bound is a number of entries (``Settings.row_cache_size``), least recently used first out.

A read-mostly phase over a large type (distinct queries propose distinct IDs, so most lookups
miss) would still issue a DuckDB statement per search. Once ``FILL_AFTER`` searches have read
a (type, tenant) from DuckDB, the next one reads all its live rows in one statement at its own
state; kept like any entry (only if no commit got in), that copy is complete: an ID it lacks
has no live row, so no later lookup of that (type, tenant) reads DuckDB. A commit that changes
some of its entities marks those IDs stale in the copy (they are looked up like any entry);
past ``STALE_MAX`` stale IDs (or an eighth of the copy) it is dropped. A copy counts against
the same bound (a type that does not fit is not copied) and is never evicted piecemeal, so
"absent from the copy, not stale" always means absent. Filter outcomes of IDs a search has not
proven still come from DuckDB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..store.changes import ChangeFeed, Changes
from ..store.db import Reader
from .scope import Row, Scope

#: Searches that read a (type, tenant) from DuckDB before it is copied whole.
FILL_AFTER = 16
#: Stale IDs a complete copy carries before it is dropped (or an eighth of its rows, if more).
STALE_MAX = 1024

Part = tuple[str, str]  # (type, tenant)
Key = tuple[Any, ...]
#: A search's state: (commit generation, audit seq, the connection it reads with).
At = tuple[int, int, Reader]


class RowCache:
    """Rows and filter outcomes of the committed state searches resolved against."""

    def __init__(self, size: int, feed: ChangeFeed | None = None) -> None:
        self.size = size
        self.feed = feed if feed is not None else ChangeFeed()
        self._generation = -1
        self._seq = -1
        self._entries: OrderedDict[Key, Row | bool | None] = OrderedDict()
        self._by_id: dict[str, set[Key]] = {}  # entity ID -> its entries (the last item)
        self._whole: dict[Part, dict[str, Row]] = {}  # complete copies
        self._stale: dict[Part, set[str]] = {}  # IDs a copy no longer answers
        self._misses: dict[Part, int] = {}  # searches that read DuckDB
        self._too_big: set[Part] = set()  # did not fit
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries) + self._copied()

    def _copied(self) -> int:
        """Rows held by complete copies (they count against the bound)."""
        return sum(len(rows) for rows in self._whole.values())

    def _reset(self, generation: int, seq: int) -> None:
        """Forget everything; caller holds the lock."""
        self._entries.clear()
        self._by_id.clear()
        self._whole.clear()
        self._stale.clear()
        self._misses.clear()
        self._too_big.clear()
        self._generation, self._seq = generation, seq

    def _sync(self, at: At) -> bool:
        """Bring the cache to the state ``at`` (caller holds the lock); False if it is past it.

        The events between the two seqs say which entities changed; only their entries go.
        """
        generation, seq, con = at
        if generation == self._generation:
            return True
        if generation < self._generation:
            return False  # a search of an older state: it may neither read nor store
        changes = None if self._generation < 0 else self.feed.between(con, self._seq, seq)
        if changes is None:
            self._reset(generation, seq)
        else:
            self._drop(changes)
            self._generation, self._seq = generation, seq
        return True

    def _drop(self, changes: Changes) -> None:
        """Forget what ``changes`` touched (caller holds the lock)."""
        for eid in changes.all_ids():
            for key in self._by_id.pop(eid, ()):
                self._entries.pop(key, None)  # its rows in any type and tenant, its outcomes
        for part, ids in changes.ids.items():
            self._too_big.discard(part)
            copy = self._whole.get(part)
            if copy is None:
                continue
            stale = self._stale.setdefault(part, set())
            stale.update(ids)
            if len(stale) > max(STALE_MAX, len(copy) // 8):
                del self._whole[part], self._stale[part]

    def attach(self, scope: Scope, generation: int, seq: int) -> None:
        """Let a search's scope resolve through the cache; it keeps what it read if valid.

        ``generation`` and ``seq``: the committed state the search reads
        (:meth:`Database.stable`).
        """
        if self.size <= 0:
            return
        view = RowView(self, scope, (generation, seq, scope.reader))
        scope.row_cache = view
        scope.on_valid.append(view.keep)

    def _lookup(self, at: At, keys: list[Key]) -> dict[Key, Row | bool | None]:
        found: dict[Key, Row | bool | None] = {}
        with self._lock:
            if not self._sync(at):
                return found
            for key in keys:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    found[key] = self._entries[key]
        return found

    def _store(self, at: At, fresh: dict[Key, Row | bool | None]) -> None:
        with self._lock:
            if not self._sync(at):
                return  # read before a later commit: stale already
            self._entries.update(fresh)
            for key in fresh:
                self._entries.move_to_end(key)
                self._by_id.setdefault(key[-1], set()).add(key)
            bound = self.size - self._copied()
            while self._entries and len(self._entries) > bound:
                self._unlink(self._entries.popitem(last=False)[0])

    def _unlink(self, key: Key) -> None:
        keys = self._by_id.get(key[-1])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_id[key[-1]]

    def _copy(self, at: At, part: Part) -> tuple[dict[str, Row], set[str]] | None:
        """The complete copy of a (type, tenant) at ``at`` and its stale IDs, if there is one."""
        with self._lock:
            if not self._sync(at) or part not in self._whole:
                return None
            return self._whole[part], self._stale.setdefault(part, set())

    def _missed(self, part: Part) -> int:
        """Count one more search reading ``part`` from DuckDB; how many there were (0: a copy
        is not worth trying)."""
        with self._lock:
            if part in self._too_big:
                return 0
            self._misses[part] = count = self._misses.get(part, 0) + 1
            return count

    def _room(self) -> int:
        """Rows a new copy may hold."""
        with self._lock:
            return self.size - self._copied()

    def _store_copy(self, at: At, part: Part, rows: dict[str, Row] | None) -> None:
        with self._lock:
            if not self._sync(at):
                return  # a later state is cached: this copy may be stale already
            if rows is None:
                self._too_big.add(part)
                return
            self._whole[part] = rows
            self._stale.pop(part, None)
            for key in [k for k in self._entries if k[:2] == part]:
                del self._entries[key]  # the copy answers these now
                self._unlink(key)

    def forget(self) -> None:
        """Drop every entry (they are refilled from DuckDB on demand)."""
        with self._lock:
            self._reset(self._generation, self._seq)


class RowView:
    """One search's access to the cache: lookups at its state, reads kept for later."""

    def __init__(self, cache: RowCache, scope: Scope, at: At) -> None:
        self.cache, self.scope, self.at = cache, scope, at
        self.fingerprint = scope.fingerprint() if scope.filtered else None
        self.fresh: dict[Key, Row | bool | None] = {}
        self.part: Part = (scope.etype.name, scope.tenant)
        self.copy: tuple[dict[str, Row], set[str]] | None = None  # the part's complete copy
        self.new_copy: dict[str, Row] | None = None  # read by this search, kept if valid
        self.too_big = False
        self.counted = False

    def select(self, ids: Sequence[str]) -> list[Row]:
        """The rows of those ``ids`` that are candidates, from the cache or from DuckDB."""
        proven = self.scope.proven
        plain = [i for i in ids if self.fingerprint is None or i in proven]
        checked = [i for i in ids if self.fingerprint is not None and i not in proven]
        whole = self.whole()
        if whole is None:
            return self._from_entries(plain, checked)
        copy, stale = whole
        if not stale:
            return self._from_copy(copy, plain, checked)
        # IDs changed since the copy was read are looked up like any entry
        return (self._from_copy(copy, [i for i in plain if i not in stale],
                                [i for i in checked if i not in stale])
                + self._from_entries([i for i in plain if i in stale],
                                     [i for i in checked if i in stale], count=False))

    def _from_entries(self, plain: list[str], checked: list[str], count: bool = True
                      ) -> list[Row]:
        """:meth:`select` by entries; what they lack is read from DuckDB (``count``: as a
        search that may earn the part a complete copy)."""
        scope = self.scope
        base = self.part
        known = self.cache._lookup(self.at, [(*base, i) for i in (*plain, *checked)]
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
        if (missing_plain or missing_checked) and count:
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
        if not checked:
            return rows
        known = self.cache._lookup(self.at, [(self.fingerprint, i) for i in checked])
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

    def whole(self) -> tuple[dict[str, Row], set[str]] | None:
        """The complete copy of this search's (type, tenant) and its stale IDs, if one is kept
        or was read."""
        if self.copy is None:
            self.copy = ((self.new_copy, set()) if self.new_copy is not None
                         else self.cache._copy(self.at, self.part))
        return self.copy

    def note_miss(self) -> None:
        """Count this search as one that read DuckDB; past FILL_AFTER, copy the part whole."""
        if self.counted:
            return
        self.counted = True
        if self.cache._missed(self.part) < FILL_AFTER:
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
            self.cache._store(self.at, self.fresh)
        if self.new_copy is not None or self.too_big:
            self.cache._store_copy(self.at, self.part, self.new_copy)
