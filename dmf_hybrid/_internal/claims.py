"""Claims on the entities the indexer's drains are applying (see ``indexer``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Claims:
    """The entities (type, tenant, ID) that drains are applying, so two drains never apply
    the same entity at once (the later one could write an older state last); drains of
    other entities go on side by side. A repair (reconcile, reindex) holds them all."""

    def __init__(self) -> None:
        self._held: set[tuple[str, str, str]] = set()
        self._cond = threading.Condition()
        self._exclusive: int | None = None  # the thread holding every entity
        self._depth = 0

    @contextmanager
    def hold(self, keys: set[tuple[str, str, str]], wait: bool
             ) -> Iterator[set[tuple[str, str, str]]]:
        """Claim ``keys``: all of them, waiting while any is claimed (``wait``), or only the
        free ones at once; yields what was claimed, released on exit. A claim is made while
        holding no other, so two drains never wait on each other."""
        me = threading.get_ident()
        got: set[tuple[str, str, str]] = set()
        try:  # (from before the claim: an interruption, Ctrl-C, cannot leave it claimed)
            with self._cond:
                if self._exclusive == me:  # a repair's own drains: it holds every entity
                    claimed = keys
                else:
                    while self._exclusive is not None or (
                            wait and not keys.isdisjoint(self._held)):
                        self._cond.wait()
                    got = claimed = keys if wait else keys - self._held
                    self._held |= got
            yield claimed
        finally:
            if got:
                with self._cond:
                    self._held -= got
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold every entity: wait for running drains, keep new ones out (re-entrant)."""
        me = threading.get_ident()
        depth: int | None = None
        try:  # (from before the claim, as in hold)
            with self._cond:
                if self._exclusive != me:
                    while self._exclusive is not None or self._held:
                        self._cond.wait()
                    depth = 0
                    self._exclusive = me
                else:
                    depth = self._depth
                self._depth = depth + 1
            yield
        finally:
            with self._cond:
                if depth is not None:  # (back to what this block found)
                    self._depth = depth
                if self._depth == 0 and self._exclusive == me:
                    self._exclusive = None
                    self._cond.notify_all()
