"""The filter cache: candidate counts and lists of committed states, keyed by audit seq.

The same filter at the same seq has the same candidates, and every entity change appends an
event, so a new seq is a new key (like Lucene's filter cache). Entries are stored only once a
search has checked that it read exactly that state, and never inside a write transaction.

A new seq does not mean new candidates: the events since the seq an entry was read at
(:mod:`dmf_hybrid._internal.store.changes`) name the entities that changed. An entry whose type
changed in none of its tenant's entities holds as it is; a candidate list of a type a few entities
of which changed is patched (those IDs out, the ones that pass the filter now back in, two
statements on the ID index) instead of being listed again. When the events cannot tell, the entry is
read again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..store.changes import ChangeFeed
from .scope import INDEX_LOOKUP_MAX, Scope

COUNT_CACHE_SIZE = 256
#: Candidate lists kept (each at most ``exact_threshold`` keys or IDs).
LIST_CACHE_SIZE = 32


class FilterCache:
    """Counts (and, for filters, candidate lists) of the searches over committed states."""

    def __init__(self, exact_threshold: int, feed: ChangeFeed | None = None) -> None:
        self.exact_threshold = exact_threshold
        self.feed = feed if feed is not None else ChangeFeed()
        self._count_cache: OrderedDict[tuple[str, str, int], int] = OrderedDict()
        self._guesses: OrderedDict[str, int] = OrderedDict()  # last count of each filter
        # (fingerprint, seq, by_key) -> (count, candidate list or None, its row memo)
        self._lists: OrderedDict[tuple[str, int, bool], tuple[int, Any, dict[str, Any]]] = (
            OrderedDict())
        # each filter's (each unfiltered type and tenant's) newest entry: (its seq, its key)
        self._latest: OrderedDict[tuple[Any, ...], tuple[int, tuple[Any, ...]]] = (
            OrderedDict())
        self._lock = threading.Lock()

    def count(self, scope: Scope, cacheable: bool) -> int:
        """Candidates at the search's seq (with their list when the exact plan is likely).

        Counts and candidate lists of committed states are cached by audit seq (a filter
        cache: the same filter at the same seq has the same candidates); an entry of an
        earlier seq is carried over, or its list patched, when the events since say how
        (see the module doc). They are stored only once the search has checked that it read
        exactly that state (``on_valid``), and never inside a write transaction, whose seq
        is not committed yet. A filtered count comes with the candidate list in the same
        scan when the last count of that filter was small enough.
        """
        if scope.seq is not None:
            return scope.count_candidates()
        threshold = self.exact_threshold
        if scope.filtered:
            shape = scope.fingerprint()
            key = (shape, scope.pos, scope.by_key)
            ident = (shape, scope.by_key)
            with self._lock:
                cached = self._lists.get(key) if cacheable else None
                guess = self._guesses.get(shape)
            if cached is None and cacheable:
                cached = self._carried(scope, self._lists, ident, key)
            if cached is not None:
                count, listed, memo = cached
                if listed is not None:
                    scope.adopt(listed, memo)
                    return count
                if count > threshold and not scope.list_large:  # the count is enough for ANN
                    return count
            count = scope.count_candidates(
                with_list=guess is None or guess <= threshold or scope.list_large)
            with self._lock:  # only a planning hint: safe to keep whatever happens
                _remember(self._guesses, shape, count)
            # a list read anyway is kept, large or not: the next search confirms by it
            found = scope.listed()
            if cacheable:
                fresh: dict[str, Any] = {}
                scope.row_memo = fresh
                scope.on_valid.append(lambda: self._keep(
                    self._lists, key, (count, found, fresh), ident, scope.pos))
            return count
        part = (scope.etype.name, scope.tenant)
        count_key = (*part, scope.pos)
        with self._lock:
            known = self._count_cache.get(count_key) if cacheable else None
        if known is None and cacheable:
            known = self._carried(scope, self._count_cache, part, count_key)
        if known is not None:
            return known
        count = scope.count_candidates()
        if cacheable:
            scope.on_valid.append(lambda: self._keep(self._count_cache, count_key, count, part,
                                                     scope.pos))
        return count

    def _carried(self, scope: Scope, cache: OrderedDict[Any, Any], ident: tuple[Any, ...],
                 key: tuple[Any, ...]) -> Any:
        """The newest entry of ``ident`` (a filter, or an unfiltered type and tenant), of an
        earlier seq, brought to the scope's seq (and kept under ``key`` once the search is
        valid); None if the events do not allow it."""
        listing = cache is self._lists
        with self._lock:
            latest = self._latest.get(ident)
            value = None if latest is None else cache.get(latest[1])
        if value is None or latest is None or latest[0] >= scope.pos:
            return None
        changes = self.feed.between(scope.reader, latest[0], scope.pos)
        if changes is None:
            return None
        changed = changes.ids.get((scope.etype.name, scope.tenant))
        if changed:
            if not listing or value[1] is None or len(changed) > INDEX_LOOKUP_MAX:
                return None  # a count alone cannot be patched: it is read again
            listed = _patched(scope, value[1], sorted(changed))
            if listed is not None:  # new members: new mirror rows, so a new row memo
                value = (len(listed), listed, {})
        scope.on_valid.append(lambda: self._keep(cache, key, value, ident, scope.pos))
        return value

    def _keep(self, cache: OrderedDict[Any, Any], key: tuple[Any, ...], value: Any,
              ident: tuple[Any, ...], seq: int) -> None:
        with self._lock:
            _remember(cache, key, value,
                      LIST_CACHE_SIZE if cache is self._lists else COUNT_CACHE_SIZE)
            latest = self._latest.get(ident)
            if latest is None or latest[0] <= seq:
                _remember(self._latest, ident, (seq, key), LIST_CACHE_SIZE + COUNT_CACHE_SIZE)

    def forget(self) -> None:
        """Drop the cached candidate counts and lists (they are rebuilt on demand)."""
        with self._lock:
            self._count_cache.clear()
            self._lists.clear()
            self._latest.clear()


def _patched(scope: Scope, listed: Any, changed: list[str]) -> Any:
    """A candidate list of an earlier state with the ``changed`` IDs brought to this one;
    None if its members are the same (an entity changed a field the filter does not read)."""
    passing = scope.passing(changed)
    if isinstance(listed, list):
        gone = set(changed)
        members = {i for i in listed if i in gone}
        if members == passing:
            return None
        return [i for i in listed if i not in gone] + [i for i in changed if i in passing]
    keys = scope.keys_of(changed)
    # a few keys against the list: one comparison pass each (np.isin hashes the whole list)
    hits = [listed == keys[i] for i in changed]
    if {i for i, hit in zip(changed, hits, strict=True) if hit.any()} == passing:
        return None
    kept = listed[~np.logical_or.reduce(hits)]
    added = np.fromiter((keys[i] for i in changed if i in passing), dtype=np.uint64)
    return np.concatenate([kept, added])


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any,
              size: int = COUNT_CACHE_SIZE) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
