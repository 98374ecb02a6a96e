"""Versions and optimistic concurrency: stale writes fail and change nothing; no lost update."""

from __future__ import annotations

import threading
from collections import Counter
from functools import partial
from typing import Any

import pytest

from dmf_hybrid import Memory, ValidationError, VersionConflict
from tests.store import assert_unchanged, audit_seqs, both_doors

mem = both_doors()


def test_every_change_bumps_the_version(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"})
    versions = [trip.version]
    versions.append(mem.update(trip.id, {"budget": 1}, expected_version=1).version)
    versions.append(mem.append(trip.id, "tags", ["x"], expected_version=2).version)
    versions.append(mem.delete(trip.id, expected_version=3).version)
    versions.append(mem.restore(trip.id, expected_version=4).version)
    versions.append(mem.update(trip.id, {"status": "done"}).version)
    assert versions == [1, 2, 3, 4, 5, 6]
    history = mem.history(trip.id)
    assert [(e.op, e.version_before, e.version_after) for e in history] == [
        ("create", None, 1), ("update", 1, 2), ("append", 2, 3), ("delete", 3, 4),
        ("restore", 4, 5), ("update", 5, 6)]


@pytest.mark.parametrize("operation", ["update", "append", "delete"])
def test_a_stale_expected_version_names_the_current_one_and_changes_nothing(
        mem: Memory, operation: str) -> None:
    trip = mem.create("Trip", {"destination": "Paris"})
    mem.update(trip.id, {"budget": 10})
    mem.update(trip.id, {"budget": 20})
    calls: dict[str, Any] = {
        "update": lambda: mem.update(trip.id, {"budget": 99}, expected_version=2),
        "append": lambda: mem.append(trip.id, "tags", ["x"], expected_version=1),
        "delete": lambda: mem.delete(trip.id, expected_version=4),
    }
    info = assert_unchanged(mem, calls[operation], VersionConflict, match="version 3")
    err = info.value
    assert isinstance(err, VersionConflict)
    assert err.details["current_version"] == 3
    assert err.details["entity_id"] == trip.id
    assert err.status_code == 412 and err.code == "version_conflict"
    assert mem.get(trip.id).data.budget == 20


def test_stale_restore_changes_nothing(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"})
    mem.delete(trip.id)
    assert_unchanged(mem, lambda: mem.restore(trip.id, expected_version=1), VersionConflict,
                     match="version 2")


def test_expected_version_must_be_an_integer(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"})
    bads: list[Any] = ["1", 1.0, True, [1], -0.5]
    for bad in bads:
        assert_unchanged(mem, partial(mem.update, trip.id, {"budget": 1},
                                      expected_version=bad),
                         ValidationError, match="expected_version")


def test_eight_threads_one_success_per_version(mem: Memory) -> None:
    """Each thread tries every version; exactly one wins each, no update is lost."""
    trip = mem.create("Trip", {"destination": "Paris"})
    rounds, threads = 12, 8
    start_seq = mem.last_seq()
    barrier = threading.Barrier(threads)
    wins: list[tuple[int, int]] = []  # (expected_version, thread)
    conflicts: Counter[int] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(tid: int) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=30)
                current = mem.get(trip.id)
                try:
                    mem.append(trip.id, "tags", [f"t{tid}v{current.version}"],
                               expected_version=current.version, actor=f"thread-{tid}")
                except VersionConflict as exc:
                    with lock:
                        conflicts[tid] += 1
                    assert exc.details["current_version"] > current.version
                else:
                    with lock:
                        wins.append((current.version, tid))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not errors, errors
    won_versions = [v for v, _ in wins]
    assert sorted(won_versions) == list(range(1, len(wins) + 1))  # one success per version
    assert len(wins) >= rounds  # every round at least one thread wins
    final = mem.get(trip.id)
    assert final.version == 1 + len(wins)
    # no lost update: every successful append is in the list, in version order
    assert final.data.tags == [f"t{tid}v{v}" for v, tid in sorted(wins)]
    assert sum(conflicts.values()) + len(wins) == rounds * threads
    assert audit_seqs(mem) == list(range(1, mem.last_seq() + 1))
    assert mem.last_seq() == start_seq + len(wins)
    report = mem.verify_audit()
    assert report.ok and report.events_checked == mem.last_seq()
    actors = [e.actor for e in mem.history(trip.id)[1:]]
    assert actors == [f"thread-{tid}" for _, tid in sorted(wins)]


def test_concurrent_writers_on_different_entities_keep_the_chain(mem: Memory) -> None:
    ids = [mem.create("Poi", {"name": f"p{i}", "city": "c"}).id for i in range(8)]
    errors: list[BaseException] = []

    def worker(eid: str) -> None:
        try:
            for i in range(5):
                mem.update(eid, {"cost": float(i + 1)})
                mem.query("Poi", {"cost": {"$gte": 0}})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(eid,)) for eid in ids]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert not errors, errors
    assert all(mem.get(eid).version == 6 for eid in ids)
    assert audit_seqs(mem) == list(range(1, mem.last_seq() + 1))
    assert mem.verify_audit().ok
