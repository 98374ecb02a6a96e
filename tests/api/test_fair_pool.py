"""The search threads serve the tenants in turn (``api.fair.FairPool``): one tenant's queue
of searches delays another tenant's by at most one of its own per thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from dmf_hybrid._internal.api.fair import FairPool

WAIT = 30.0


def _recorder(order: list[str]) -> Callable[[str], Callable[[], str]]:
    def task(name: str) -> Callable[[], str]:
        def run() -> str:
            order.append(name)
            return name
        return run
    return task


def test_a_tenant_with_one_search_waits_for_at_most_one_of_a_busy_tenants() -> None:
    pool = FairPool(1)
    order: list[str] = []
    task = _recorder(order)
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        assert release.wait(WAIT)
        order.append("a1")
        return "a1"

    try:
        first = pool.submit("a", blocking)
        assert started.wait(WAIT)
        queued = [pool.submit("a", task(f"a{i}")) for i in range(2, 6)]
        other = pool.submit("b", task("b1"))
        late = pool.submit("c", task("c1"))
        assert pool.queued() == {"a": 4, "b": 1, "c": 1}
        release.set()
        assert [f.result(WAIT) for f in (first, *queued, other, late)] == [
            "a1", "a2", "a3", "a4", "a5", "b1", "c1"]
        assert order == ["a1", "a2", "b1", "c1", "a3", "a4", "a5"]
    finally:
        release.set()
        pool.shutdown()


def test_errors_reach_the_caller_and_shutdown_cancels_what_waits() -> None:
    pool = FairPool(1)
    started, release = threading.Event(), threading.Event()

    def fail() -> None:
        raise ValueError("bad query")

    def blocking() -> str:
        started.set()
        assert release.wait(WAIT)
        return "done"

    with pytest.raises(ValueError, match="bad query"):
        pool.submit("a", fail).result(WAIT)
    running = pool.submit("a", blocking)
    assert started.wait(WAIT)
    waiting = pool.submit("b", lambda: "never")
    pool.shutdown(wait=False)  # cancels what waits; the running search goes on
    assert waiting.cancelled() and not running.done()
    release.set()
    assert running.result(WAIT) == "done"
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit("a", lambda: None)


def test_threads_are_started_as_work_arrives_up_to_the_bound() -> None:
    pool = FairPool(2)
    gate = threading.Event()
    both = threading.Barrier(3, timeout=WAIT)

    def meet() -> None:
        both.wait()
        assert gate.wait(WAIT)

    try:
        futures = [pool.submit("a", meet), pool.submit("a", meet)]
        both.wait()  # two threads run the tenant's two searches side by side
        third = pool.submit("b", lambda: "b")
        gate.set()
        assert third.result(WAIT) == "b"
        for f in futures:
            f.result(WAIT)
    finally:
        gate.set()
        pool.shutdown()
