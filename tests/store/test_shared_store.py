"""Many processes on one PostgreSQL store: each follows the others' commits (types, rules,
entities, the mirrors its searches read), and writers of several processes at once lose
nothing, duplicate nothing and keep one verifying chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, NotFound, VersionConflict
from dmf_hybrid._internal.vector.exact import ExactIndex
from evaluation.pgserver import PgServer
from tests.conftest import define_travel

ROOT = Path(__file__).resolve().parents[2]


def _open(url: str) -> Memory:
    return Memory.open(url, embedder=HashEmbedder(), vector_index=ExactIndex())


@pytest.fixture
def two(pg_server: PgServer) -> Iterator[tuple[Memory, Memory]]:
    """Two memories on one store, as two service processes hold it (each its own
    connections, registry, mirrors and caches)."""
    url = pg_server.fresh()
    a = _open(url)
    b = _open(url)
    try:
        yield a, b
    finally:
        b.close()
        a.close()


def test_a_process_sees_what_another_committed(two: tuple[Memory, Memory]) -> None:
    a, b = two
    define_travel(a)
    assert [t.name for t in b.types()] == []  # nothing read yet
    b.last_seq()  # follows the log
    assert [t.name for t in b.types()] == ["Poi", "Trip"]
    b.search("Poi", "anything", k=1)  # b's mirrors of Poi are loaded now, empty
    bund = a.create("Poi", {"name": "The Bund", "city": "上海"})
    assert b.get(bund.id).data.name == "The Bund"
    b.last_seq()
    # b's own vector index (each process here has one) holds a's entity too
    assert bund.id in b.engine.vectors.records(b.engine.indexer.collection("Poi"))
    assert [e.id for e in b.query("Poi", {"city": "上海"}).items] == [bund.id]
    for mode in ("vector", "keyword", "hybrid"):
        hits = b.search("Poi", "The Bund 上海", mode=mode).hits
        assert [h.entity.id for h in hits] == [bund.id], mode
    view = a.create("Poi", {"name": "外滩 night view", "city": "上海"})
    a.update(bund.id, {"cost": 42})
    seq = a.last_seq()
    found = b.search("Poi", "外滩", mode="keyword")
    assert [h.entity.id for h in found.hits] == [view.id]
    assert found.receipt.resolved_at_seq == seq  # the state it read, every process's commits
    assert b.search("Poi", "The Bund", k=1).hits[0].entity.data.cost == 42
    assert b.get(bund.id, as_of=seq).version == 2  # a seq another process committed
    # b writes on top of a's commits: one chain, no fork
    trip = b.create("Trip", {"destination": "上海", "budget": 5000})
    b.link(trip.id, "includes", bund.id)
    assert [r.entity.id for r in a.related(trip.id)] == [bund.id]
    a.erase(bund.id)
    with pytest.raises(NotFound):
        b.get(bund.id)
    assert b.search("Poi", "Bund", mode="keyword").hits == []  # gone from b's mirrors
    assert a.verify_audit().ok and b.verify_audit().ok
    assert a.last_seq() == b.last_seq()


def test_a_search_answered_from_the_process_state_reads_the_head_once(
        two: tuple[Memory, Memory]) -> None:
    """A search that reads nothing from the database (its candidates and rows all kept in the
    process) answers one committed state, the one the process followed to: it reads the log's
    head once, before, not again after; another process's commit is still followed by the next
    search."""
    a, b = two
    define_travel(a)
    b.last_seq()
    rows = a.create_many("Poi", [{"name": f"stop {i}", "city": "上海"} for i in range(30)])

    def search() -> list[tuple[str, float, Any]]:
        hits = b.search("Poi", "stop 7", where={"city": "上海"}, k=5, mode="vector").hits
        return [(h.entity.id, h.score, h.entity.data.cost) for h in hits]

    first = search()  # loads the mirrors, lists the candidates, reads the rows
    db = b._store.db
    before = db.reads()
    assert search() == first
    assert db.reads() - before == 1  # the head, before the search
    a.update(rows[7].id, {"cost": 7})
    score = {eid: score for eid, score, _ in first}[rows[7].id]
    assert (rows[7].id, score, 7) in search()
    assert b.search("Poi", "stop 7", k=1).receipt.resolved_at_seq == a.last_seq()


def test_a_type_and_a_rule_one_process_defines_apply_in_the_other(
        two: tuple[Memory, Memory]) -> None:
    a, b = two
    a.define_type({"name": "Trip", "identity": ["destination"],
                   "fields": {"destination": {}, "budget": {"type": "float"},
                              "cost": {"type": "float"}}})
    a.define_rule({"name": "over_budget", "condition": "cost > budget",
                   "trigger": {"type": "Trip"},
                   "action": {"kind": "budget", "message": "{value} > {threshold}"}})
    b.create("Trip", {"destination": "上海", "budget": 5000, "cost": 6000})  # b's write
    raised = a.query("Constraint").items
    assert [c.data.message for c in raised] == ["6000 > 5000"]
    # a version of the type one process makes is the version the other writes with
    a.define_type({"name": "Trip", "identity": ["destination"],
                   "fields": {"destination": {}, "budget": {"type": "float"},
                              "cost": {"type": "float"}, "note": {}}})
    b.create("Trip", {"destination": "Paris", "note": "spring"})
    assert a.query("Trip", {"note": "spring"}).items[0].data.destination == "Paris"


_WRITER = r"""
import json, sys
from dmf_hybrid import HashEmbedder, Memory, VersionConflict
from dmf_hybrid._internal.vector.exact import ExactIndex

url, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = Memory.open(url, embedder=HashEmbedder(), vector_index=ExactIndex())
POI = {"name": "Poi", "identity": ["name"], "embed": "{name}",
       "fields": {"name": {}, "count": {"type": "int", "default": 0}}}
acked = {"created": [], "returned": [], "updates": {}, "conflicts": 0}
for tenant in ("t0", "t1"):
    mem.for_tenant(tenant).define_type(POI)  # every process defines it: the same type
for i in range(rounds):
    view = mem.for_tenant(f"t{i % 2}")
    made = view.create("Poi", {"name": f"shared {i % 8}"})  # the same identities everywhere
    acked["created" if made.created else "returned"].append([view.tenant, made.id])
    mine = view.create("Poi", {"name": f"{me} own {i}"})
    acked["created"].append([view.tenant, mine.id])
    for _ in range(50):  # If-Match: read, then update at the version read
        current = view.get(made.id)
        try:
            view.update(made.id, {"count": current.data.count + 1},
                        expected_version=current.version)
        except VersionConflict:
            acked["conflicts"] += 1
            continue
        key = f"{view.tenant}/{made.id}"
        acked["updates"][key] = acked["updates"].get(key, 0) + 1
        break
mem.close()
print(json.dumps(acked))
"""


@pytest.mark.parametrize("processes", [4])
def test_processes_writing_one_store_at_once_lose_and_duplicate_nothing(
        pg_server: PgServer, processes: int) -> None:
    url = pg_server.fresh()
    rounds = 24
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, url, f"p{n}", str(rounds)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for n in range(processes)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    mem = _open(url)
    try:
        report = mem.verify_audit()
        assert report.ok, report
        created = Counter(tuple(c) for r in results for c in r["created"])
        assert max(created.values()) == 1  # each identity created once, by one process
        updates: Counter[str] = Counter()
        for r in results:
            updates.update(r["updates"])
        for tenant in ("t0", "t1"):
            view = mem.for_tenant(tenant)
            items = view.query("Poi", limit=1000).items
            names = Counter(e.data.name for e in items)
            assert max(names.values()) == 1  # no duplicate of an identity
            assert len(items) == sum(1 for t, _ in created if t == tenant)
            for e in items:
                history = [ev.op for ev in view.history(e.id)]
                assert e.version == len(history)  # every version is one event
                acked = updates.get(f"{tenant}/{e.id}", 0)
                assert e.data.count == acked == e.version - 1  # no acknowledged update lost
        assert sum(r["conflicts"] for r in results) >= 0
        total = sum(len(r["created"]) + sum(r["updates"].values()) for r in results)
        assert report.events_checked >= total
    finally:
        mem.close()


def test_a_version_conflict_names_the_other_processs_write(two: tuple[Memory, Memory]) -> None:
    a, b = two
    define_travel(a)
    poi = a.create("Poi", {"name": "Yu Garden", "city": "上海"})
    b.update(poi.id, {"cost": 40}, expected_version=1)
    with pytest.raises(VersionConflict):
        a.update(poi.id, {"cost": 50}, expected_version=1)
    assert a.get(poi.id).data.cost == 40


def test_a_process_that_joins_while_another_writes_misses_nothing(pg_server: PgServer) -> None:
    url = pg_server.fresh()
    a = _open(url)
    define_travel(a)
    names = [f"{w} garden" for w in ("amber birch cedar dahlia elm fern ginkgo hazel iris "
                                     "juniper kale lotus maple nettle olive peony quince rowan "
                                     "sage tulip umber violet willow yarrow zinnia").split()]
    made: list[str] = []
    started = threading.Event()

    def writer() -> None:
        for i, name in enumerate(names * 4):
            made.append(a.create("Poi", {"name": f"{name} {i}", "city": "Oslo"}).id)
            if i == 10:
                started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        started.wait(60)
        b = _open(url)  # joins mid-burst: its mirrors load from a snapshot while a writes
        b.search("Poi", "garden", k=1)
        thread.join()
        assert len(made) == 100
        assert sorted(e.id for e in b.query("Poi", limit=200).items) == sorted(made)
        for eid in made[::9]:
            name = b.get(eid).data.name
            for mode in ("vector", "keyword"):
                assert b.search("Poi", name, mode=mode, k=1).hits[0].entity.id == eid, mode
        assert b.verify_audit().ok
        b.close()
    finally:
        thread.join()
        a.close()


def test_an_entity_of_a_type_another_process_just_defined_is_found_by_id(
        two: tuple[Memory, Memory]) -> None:
    a, b = two
    b.last_seq()  # b has followed the log once, before the type existed
    define_travel(a)
    poi = a.create("Poi", {"name": "Fram museum", "city": "Oslo"})
    assert b.get(poi.id).data.name == "Fram museum"  # nothing else made b follow first
    a.update(poi.id, {"cost": 12})
    assert b.get(poi.id).version == 2


@pytest.mark.timeout(120)  # one lock for every writer would hold the other tenant's write
def test_writers_of_different_tenants_do_not_wait_for_each_other(
        two: tuple[Memory, Memory]) -> None:
    """A transaction of tenant a left open in one process holds off that tenant's writers in
    another (a tenant's seqs and chain are numbered in commit order), not other tenants'; the
    store's positions still follow the commits' order with no gap."""
    first, second = two
    a1, b2, a2 = first.for_tenant("a"), second.for_tenant("b"), second.for_tenant("a")
    for view in (a1, b2):
        define_travel(view)
    opened, release, done = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_a_open() -> None:
        try:
            with a1.transaction():
                a1.create("Poi", {"name": "held", "city": "Paris"})
                opened.set()
                release.wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def write_a_too() -> None:
        try:
            a2.create("Poi", {"name": "waits", "city": "Paris"})
            done.set()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    holder = threading.Thread(target=hold_a_open)
    holder.start()
    assert opened.wait(30)
    b2.create("Poi", {"name": "not held", "city": "上海"})  # tenant b: no wait
    waiter = threading.Thread(target=write_a_too)
    waiter.start()
    assert not done.wait(0.5)  # tenant a's writer waits for a's open transaction
    release.set()
    holder.join(30)
    waiter.join(30)
    assert not errors and done.is_set()
    assert [e.data.name for e in a2.query("Poi", order_by="name").items] == ["held", "waits"]
    assert [e.seq for e in a2.events()] == list(range(1, a2.last_seq() + 1))
    report = second.verify_audit()
    assert report.ok and report.chains == 2
    # b's write committed first: its position comes before a's held create
    rows = first._store.db.fetchall(
        "SELECT tenant, entity_id FROM events WHERE op = 'create' ORDER BY pos")
    names = {e.id: e.data.name for v in (a2, b2) for e in v.query("Poi").items}
    assert [names[eid] for _tenant, eid in rows] == ["not held", "held", "waits"]
