"""Transactions: all or nothing, seq counter included; isolation from other threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from dmf_hybrid import DMFError, Memory, MemoryAPI, NotFound, PlanError, VersionConflict
from dmf_hybrid._internal.store.db import Database
from tests.store import assert_unchanged, audit_seqs, both_doors, dump

door = both_doors("door")


class Boom(Exception):
    """Raised inside a transaction by the test."""


def _busy_transaction(mem: Memory, trip: str, poi: str) -> None:
    class Note(BaseModel):
        text: str

    mem.define(Note, identity=["text"])
    mem.create("Note", {"text": "hello"})
    mem.create("Trip", {"destination": "Rome"})
    mem.create_many("Poi", [{"name": f"n{i}", "city": "c"} for i in range(12)])
    mem.update(trip, {"budget": 99})
    mem.append(trip, "tags", ["x"])
    mem.link(trip, "includes", poi)
    mem.delete(poi)


def test_an_exception_inside_commits_nothing(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    before = dump(mem)
    with pytest.raises(Boom):
        with mem.transaction():
            _busy_transaction(mem, trip, poi)
            assert mem.get(trip).data.budget == 99  # visible inside the transaction
            raise Boom
    assert dump(mem) == before  # entities, events, outbox, relations, registry, seq
    assert "Note" not in {t.name for t in mem.types()}
    assert mem.get(trip).version == 1
    # the next write gets the next gap-free seq and the chain still verifies
    seq = before["seq"]
    mem.update(trip, {"budget": 1})
    assert mem.last_seq() == seq + 1
    assert audit_seqs(mem) == list(range(1, seq + 2))
    assert mem.verify_audit().ok


def test_a_committed_transaction_writes_everything(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    seq = mem.last_seq()
    with mem.transaction():
        _busy_transaction(mem, trip, poi)
    assert mem.get(trip).data.tags == ["x"]
    assert mem.count("Poi") == 12
    assert mem.last_seq() == seq + 1 + 1 + 1 + 12 + 1 + 1 + 1 + 1
    assert audit_seqs(mem) == list(range(1, mem.last_seq() + 1))
    assert mem.verify_audit().ok
    assert mem._store.db.fetchone("SELECT count(*) FROM outbox WHERE NOT done") == (0,)


def test_a_caught_error_inside_still_rolls_everything_back(mem: Memory) -> None:
    """A failed step dooms the transaction even when the caller catches its error."""
    trip = mem.create("Trip", {"destination": "Paris"}).id
    before = dump(mem)
    with pytest.raises(DMFError, match="rolled back"):
        with mem.transaction():
            mem.update(trip, {"budget": 5})
            with pytest.raises(VersionConflict):
                mem.update(trip, {"budget": 6}, expected_version=1)
    assert dump(mem) == before


def test_nested_transactions_are_one(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    before = dump(mem)
    with pytest.raises(Boom):
        with mem.transaction():
            with mem.transaction():
                mem.update(trip, {"budget": 5})
            mem.update(trip, {"budget": 6})
            raise Boom
    assert dump(mem) == before
    with mem.transaction():
        with mem.transaction():
            mem.update(trip, {"budget": 5})
        mem.update(trip, {"budget": 6})
    assert mem.get(trip).version == 3


def test_other_threads_do_not_see_uncommitted_writes(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    seen: dict[str, Any] = {}
    inside = threading.Event()
    checked = threading.Event()

    def reader() -> None:
        inside.wait(timeout=30)
        seen["budget"] = mem.get(trip).data.budget
        try:
            mem.get("Trip_" + "0" * 20)
        except NotFound:
            pass
        seen["count"] = mem.count("Trip")
        checked.set()

    thread = threading.Thread(target=reader)
    thread.start()
    with mem.transaction():
        mem.update(trip, {"budget": 42})
        mem.create("Trip", {"destination": "Rome"})
        inside.set()
        assert checked.wait(timeout=30)
    thread.join(timeout=30)
    assert seen == {"budget": 0, "count": 1}
    assert mem.get(trip).data.budget == 42 and mem.count("Trip") == 2


def test_a_second_thread_waits_for_the_transaction(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    order: list[str] = []
    started = threading.Event()

    def writer() -> None:
        started.wait(timeout=30)
        mem.update(trip, {"status": "booked"})
        order.append("other")

    thread = threading.Thread(target=writer)
    thread.start()
    with mem.transaction():
        mem.update(trip, {"budget": 1})
        started.set()
        thread.join(timeout=0.3)  # the other writer blocks on the writer lock
        order.append("tx")
    thread.join(timeout=30)
    assert order == ["tx", "other"]
    assert mem.get(trip).version == 3
    assert mem.verify_audit().ok


def test_schema_migration_after_row_changes_in_one_transaction(mem: Memory) -> None:
    """DuckDB cannot commit ALTER after UPDATE of the same table: refused up front, cleanly."""
    from tests.store.test_schema import PoiV2

    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    before = dump(mem)
    with pytest.raises(DMFError):
        with mem.transaction():
            mem.update(poi, {"cost": 3})
            mem.define(PoiV2, name="Poi", identity=["name", "city"], embed="{name} in {city}")
    assert dump(mem) == before
    assert mem.get_type("Poi").version == 1
    # the store still works (DuckDB's state was not corrupted)
    mem.update(poi, {"cost": 4})
    mem.define(PoiV2, name="Poi", identity=["name", "city"], embed="{name} in {city}")
    assert mem.get(poi).data.country == "FR"
    assert mem.verify_audit().ok
    # migrating first and changing rows after is fine inside one transaction
    with mem.transaction():
        mem.define_type({**mem.get_type("Poi").typedef.model_dump(),
                         "fields": {**mem.get_type("Poi").typedef.model_dump()["fields"],
                                    "zip": {"type": "str", "default": "75001"}}})
        mem.update(poi, {"cost": 5})
    assert mem.get(poi).data.zip == "75001"


def test_the_commit_seqlock_tells_readers_whether_a_commit_got_in(mem: Memory) -> None:
    db = mem._store.db  # noqa: SLF001 - the seqlock is the store's
    trip = mem.create("Trip", {"destination": "Oslo"}).id
    stamp = db.stable()
    assert stamp is not None and stamp[1] == mem.last_seq()
    generation = stamp[0]
    assert db.unchanged(generation)
    inside = threading.Event()
    release = threading.Event()
    seen: dict[str, Any] = {}

    def writer() -> None:
        with mem.transaction():
            mem.update(trip, {"budget": 1})
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    assert inside.wait(10)
    # another thread's open transaction is invisible: same generation, same committed seq,
    # and reading last_seq does not wait for it
    seen["last_seq"] = mem.last_seq()
    assert db.unchanged(generation) and seen["last_seq"] == stamp[1]
    assert mem.get(trip).version == 1
    release.set()
    thread.join(10)
    assert not db.unchanged(generation)
    after = db.stable()
    assert after is not None and after[1] == stamp[1] + 1 == mem.last_seq()
    # a rolled-back transaction is no commit: the committed seq stays
    with pytest.raises(Boom):
        with mem.transaction():
            mem.update(trip, {"budget": 2})
            raise Boom
    assert db.stable() is not None and mem.last_seq() == after[1]


# ---------------------------------------------------------------- through both front doors
# (a transaction block is embedded by nature; over HTTP a plan is one transaction)


def test_a_plan_whose_last_step_fails_commits_nothing(door: MemoryAPI) -> None:
    trip = door.create("Trip", {"destination": "Lyon"})
    plan = [{"op": "update", "id": trip.id, "data": {"budget": 10}},
            {"op": "create", "type": "Poi", "data": {"name": "Fourviere", "city": "Lyon"}},
            {"op": "link", "from_id": trip.id, "relation": "includes", "to_id": "$1.id"},
            {"op": "update", "id": trip.id, "data": {"budget": 20},
             "expected_version": trip.version}]  # stale by then: the plan fails at step 3
    info = assert_unchanged(door, lambda: door.execute_plan(plan), PlanError)
    assert info.value.details["problems"][0]["step"] == 3  # type: ignore[attr-defined]
    assert door.get(trip.id).data.budget == 0 and door.related(trip.id, "includes") == []


def test_a_plan_commits_every_step_in_one_seq_range(door: MemoryAPI) -> None:
    before = door.last_seq()
    plan = [{"op": "create", "type": "Trip", "data": {"destination": "Nice"}},
            {"op": "create", "type": "Poi", "data": {"name": "Port", "city": "Nice"}},
            {"op": "link", "from_id": "$0.id", "relation": "includes", "to_id": "$1.id"}]
    done = door.execute_plan(plan)
    assert done.committed and done.seq_range == [before + 1, before + 3]
    assert door.last_seq() == before + 3 and audit_seqs(door) == list(range(1, before + 4))
    trip_id = done.results[0]["id"]  # type: ignore[index, call-overload]
    assert [r.entity.id for r in door.related(trip_id, "includes")] == [
        done.results[1]["id"]]  # type: ignore[index, call-overload]


def test_reads_from_other_threads_do_not_hold_off_checkpoints(tmp_path: Path) -> None:
    # a thread's one-row read (a count, as the readiness probe makes) followed by another
    # thread's commit of a schema change: the read must not keep a transaction open that
    # blocks checkpoints (DuckDB then skips its automatic ones too, and the WAL and the memory
    # it pins grow without bound)
    db = Database(tmp_path / "db.duckdb")
    try:
        with db.write() as con:
            con.execute("CREATE TABLE queue (seq BIGINT PRIMARY KEY, done BOOLEAN NOT NULL)")
            con.execute("INSERT INTO queue VALUES (1, false), (2, true)")
        counts: list[Any] = []
        reader = threading.Thread(target=lambda: counts.append(
            db.fetchone("SELECT count(*) FROM queue WHERE NOT done")))
        reader.start()
        reader.join()
        assert counts == [(1,)]
        with db.write() as con:
            con.execute("CREATE TABLE other (a INTEGER)")
            con.execute("INSERT INTO queue VALUES (3, false)")
        db.checkpoint()  # raised "Cannot CHECKPOINT: there are other write transactions active"
        assert db.fetchone("SELECT count(*) FROM queue WHERE NOT done") == (2,)
        assert db.fetchone("SELECT seq FROM queue WHERE seq > 5") is None
    finally:
        db.close()


def test_a_search_count_does_not_hold_off_checkpoints(tmp_path: Path) -> None:
    # the same through Memory: a filtered count on one thread, a new type on another
    mem = Memory.open(tmp_path / "m")
    try:
        mem.define_type({"name": "Note", "identity": ["n"], "fields": {"n": {"type": "int"}}})
        mem.create("Note", {"n": 1})
        counts: list[int] = []
        worker = threading.Thread(target=lambda: counts.append(mem.count("Note", {"n": 1})))
        worker.start()
        worker.join()
        assert counts == [1]
        mem.define_type({"name": "Other", "identity": ["n"], "fields": {"n": {"type": "int"}}})
        mem._store.db.checkpoint()
    finally:
        mem.close()
