"""A thread pool that serves its callers' queues in turn, so one tenant cannot queue everyone
else out.

A plain executor runs tasks first come, first served: eight clients of one tenant looping slow
searches keep every thread busy and push another tenant's search behind all of theirs. Here
each key (a tenant) has a queue of its own, and a free thread takes the next task of the next
key in turn that has one: a tenant with one task waiting is served after at most one task of
each other waiting tenant, however many those have queued.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Task = tuple[Future[Any], Callable[[], Any]]


class FairPool:
    """``workers`` threads serving per-key queues round-robin."""

    def __init__(self, workers: int, name: str = "dmf-fair") -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self.workers, self.name = workers, name
        self._queues: OrderedDict[str, deque[_Task]] = OrderedDict()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, key: str, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn()`` in a worker, in ``key``'s turn; its future."""
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._queues.setdefault(key, deque()).append((future, fn))
            if self._idle:
                self._cond.notify()
            elif len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def queued(self) -> dict[str, int]:
        """Tasks waiting, by key."""
        with self._cond:
            return {key: len(tasks) for key, tasks in self._queues.items()}

    def _next(self) -> _Task | None:
        """The next task in turn (its key goes to the back of the turn), or None once shut
        down; waits for one (the condition's lock held)."""
        while not self._queues:
            if self._closed:
                return None
            self._idle += 1
            try:
                self._cond.wait()
            finally:
                self._idle -= 1
        key, tasks = next(iter(self._queues.items()))
        task = tasks.popleft()
        if tasks:
            self._queues.move_to_end(key)
        else:
            del self._queues[key]
        return task

    def _work(self) -> None:
        while True:
            with self._cond:
                task = self._next()
            if task is None:
                return
            future, fn = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True) -> None:
        """Cancel the queued tasks, let running ones finish (``wait``: for them too)."""
        with self._cond:
            self._closed = True
            for tasks in self._queues.values():
                for future, _fn in tasks:
                    future.cancel()
            self._queues.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()
