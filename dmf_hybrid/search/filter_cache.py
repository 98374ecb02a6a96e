"""The filter cache: candidate counts and lists of committed states, keyed by audit seq.

The same filter at the same seq has the same candidates, and every entity change appends an
event, so a new seq is a new key (like Lucene's filter cache). Entries are stored only once a
search has checked that it read exactly that state, and never inside a write transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from .scope import Scope

COUNT_CACHE_SIZE = 256
#: Candidate lists kept (each at most ``exact_threshold`` keys or IDs).
LIST_CACHE_SIZE = 32


class FilterCache:
    """Counts (and, for filters, candidate lists) of the searches over committed states."""

    def __init__(self, exact_threshold: int) -> None:
        self.exact_threshold = exact_threshold
        self._count_cache: OrderedDict[tuple[str, str, int], int] = OrderedDict()
        self._guesses: OrderedDict[str, int] = OrderedDict()  # last count of each filter
        # (fingerprint, seq, by_key) -> (count, candidate list or None, its row memo)
        self._lists: OrderedDict[tuple[str, int, bool], tuple[int, Any, dict[str, Any]]] = (
            OrderedDict())
        self._lock = threading.Lock()

    def count(self, scope: Scope, cacheable: bool) -> int:
        """Candidates at the search's seq (with their list when the exact plan is likely).

        Counts and candidate lists of committed states are cached by audit seq (a filter
        cache: the same filter at the same seq has the same candidates; every entity change
        appends an event, so a new seq is a new key). They are stored only once the search
        has checked that it read exactly that state (``on_valid``), and never inside a write
        transaction, whose seq is not committed yet. A filtered count comes with the
        candidate list in the same scan when the last count of that filter was small enough.
        """
        if scope.seq is not None:
            return scope.count_candidates()
        threshold = self.exact_threshold
        if scope.filtered:
            shape = scope.fingerprint()
            key = (shape, scope.seen_seq, scope.by_key)
            with self._lock:
                cached = self._lists.get(key) if cacheable else None
                guess = self._guesses.get(shape)
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
                scope.on_valid.append(lambda: self._keep(self._lists, key,
                                                         (count, found, fresh)))
            return count
        count_key = (scope.etype.name, scope.tenant, scope.seen_seq)
        with self._lock:
            known = self._count_cache.get(count_key) if cacheable else None
        if known is not None:
            return known
        count = scope.count_candidates()
        if cacheable:
            scope.on_valid.append(lambda: self._keep(self._count_cache, count_key, count))
        return count

    def _keep(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        with self._lock:
            _remember(cache, key, value,
                      LIST_CACHE_SIZE if cache is self._lists else COUNT_CACHE_SIZE)

    def forget(self) -> None:
        """Drop the cached candidate counts and lists (they are rebuilt on demand)."""
        with self._lock:
            self._count_cache.clear()
            self._lists.clear()


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any,
              size: int = COUNT_CACHE_SIZE) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
