"""The relay: the one process that writes a vector index the store's processes share.

Every process of one PostgreSQL store embeds its own writes (into the shared embedding cache)
and keeps its own mirrors in step; a Chroma server they share is written by one of them at a
time, the one holding the store's relay lock (``Database.lead``). Its relay thread drains the
outbox as soon as another process's commit queued rows (a PostgreSQL ``NOTIFY`` wakes it:
``Database.wait_for_outbox``), and every :data:`INTERVAL` seconds whatever happens (a
notification is a wake-up, never the source of truth: a lost one costs at most an interval);
its own commits it applies at once. The others ask for the lock every :data:`RETRY` seconds.
The lock lives with the leader's connection, so when the leader dies another process leads
within about :data:`RETRY` seconds, and catches up first:
whatever the dead leader had not applied is still pending in the outbox, and drift between the
store and the index is reconciled.

On the embedded engine, or with a vector index of the process's own, there is no relay: the
process always writes its index.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..indexer import Indexer
from ..store.txn import Transactions

log = logging.getLogger(__name__)

#: Seconds between the leader's drains of what other processes wrote, when no notification
#: comes sooner.
INTERVAL = 1.0
#: Seconds between two looks at whether the relay was stopped, while it waits for a commit.
STOP_CHECK = 0.25
#: Seconds between another process's requests for the lead.
RETRY = 1.0


class Relay:
    """Takes the lead when it is free, and drains the outbox while it holds it."""

    def __init__(self, indexer: Indexer, db: Transactions, catch_up: Callable[[], None],
                 interval: float = INTERVAL, retry: float = RETRY) -> None:
        self._indexer = indexer
        self._db = db
        self._catch_up = catch_up
        self.interval = interval
        self.retry = retry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the relay on a thread of its own (a daemon: it holds nothing a crash loses)."""
        self._thread = threading.Thread(target=self._run, name="dmf-relay", daemon=True)
        self._thread.start()

    def step(self) -> bool:
        """One turn: lead if nobody else does; a new leader catches up, a leader drains.
        Whether this process leads afterwards (a failure to reach the index gives the turn
        up, and the next one catches up again)."""
        if not self._db.lead():
            if self._indexer.leading:
                log.warning("this process no longer relays the outbox (its lock was lost)")
            self._indexer.leading = False
            return False
        try:
            if self._indexer.leading:
                self._indexer.drain()
            else:
                self._indexer.leading = True
                log.info("this process now relays the outbox to the shared vector index")
                self._catch_up()
        except Exception:
            self._indexer.leading = False
            raise
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                leading = self.step()
            except Exception:  # noqa: BLE001 - logged; the rows stay pending for the next turn
                log.exception("relaying the outbox failed; trying again")
                leading = False
            if leading:
                self._listen(self.interval)
            else:
                self._stop.wait(self.retry)

    def _listen(self, seconds: float) -> None:
        """Wait until another process's commit queued outbox rows, ``seconds`` passed or the
        relay is stopped (looked at every :data:`STOP_CHECK` seconds)."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._db.wait_for_outbox(min(STOP_CHECK, left)):
                return

    def stop(self) -> None:
        """Stop the thread (its turn in progress finishes first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
