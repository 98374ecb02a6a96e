"""Mirrors load from a DuckDB snapshot while writes go on, then catch up with those writes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.indexer import Indexer
from dmf_hybrid._internal.store.tables import table_name
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel

WAIT = 20.0
TAGS = (["river", "food"], ["museum"], ["上海", "外滩"], ["hiking", "river"])


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex())
    define_travel(mem)
    mem.create_many("Trip", [{"destination": f"place {i}", "tags": TAGS[i % 4],
                              "status": "booked" if i % 3 else "planned"} for i in range(30)])
    mem.create("Poi", {"name": "The Bund", "city": "Shanghai"})
    yield mem
    mem.close()


def answers(mem: Memory) -> list[list[tuple[str, float]]]:
    """Hits and scores of searches in every mode, filtered and not (the mirrors as loaded)."""
    return [[(h.entity.id, h.score) for h in mem.search(
        "Trip", text, k=40, mode=mode, where=where).hits]
        for text in ("river place 7", "上海 place", "harbour lighthouse")
        for mode in ("vector", "keyword", "hybrid")
        for where in (None, {"status": "planned"})]


def freshly_loaded(mem: Memory) -> list[list[tuple[str, float]]]:
    mem.engine.indexer.forget_local()
    return answers(mem)


class HeldLoad:
    """``ensure_local`` of Trip in a thread, held at the point its snapshot has been read
    (``keyword_only``: the vector mirror is loaded first, so the load reads the BM25 part)."""

    def __init__(self, mem: Memory, keyword_only: bool = False) -> None:
        self.indexer: Indexer = mem.engine.indexer
        self.reading, self.release = threading.Event(), threading.Event()
        self.failures: list[BaseException] = []
        self.locked_loads = 0
        load = self.indexer._load

        def counted(*args: Any) -> None:
            self.locked_loads += 1
            load(*args)

        self.indexer._load = counted  # type: ignore[method-assign]
        self.indexer.forget_local()
        self.trip = mem.get_type("Trip")
        if keyword_only:
            self.indexer.ensure_local(self.trip, keyword=False)
        self.indexer.fault = self._fault
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _fault(self, point: str) -> None:
        if point == "snapshot_read":
            self.reading.set()
            assert self.release.wait(WAIT)

    def _run(self) -> None:
        try:
            self.indexer.ensure_local(self.trip)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.failures.append(exc)

    def start(self) -> None:
        self.thread.start()
        assert self.reading.wait(WAIT), "the load never read its snapshot"

    def finish(self) -> None:
        self.release.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive() and self.failures == []
        self.indexer.fault = None


def run_bounded(step: Callable[[], Any]) -> None:
    """Run a write in a thread; fail if it waits (for the load) instead of committing."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT / 2)
    assert not thread.is_alive(), "a write waited for the mirror load"
    if errors:
        raise errors[0]


def test_writes_commit_while_a_mirror_loads_and_the_load_catches_up(memory: Memory) -> None:
    trips = memory.query("Trip", limit=100).items
    poi = memory.query("Poi", limit=1).items[0]
    # two rows whose vectors left the cache: the load embeds them after its snapshot
    with memory._store.db.write() as con:
        for trip in trips[:2]:
            con.execute("DELETE FROM embeddings WHERE text_hash = "
                        f"(SELECT text_hash FROM {table_name('Trip')} WHERE id = ?)", [trip.id])
    held = HeldLoad(memory)
    held.start()
    writes: list[Callable[[], Any]] = [
        lambda: memory.create("Trip", {"destination": "harbour lighthouse"}),
        lambda: memory.update(trips[3].id, {"tags": ["harbour", "lighthouse"]}),
        lambda: memory.update(trips[4].id, {"status": "planned"}),
        lambda: memory.delete(trips[5].id),
        lambda: memory.erase(trips[6].id),
        lambda: memory.restore(trips[5].id),
        lambda: memory.delete(trips[8].id),
        lambda: memory.create("Poi", {"name": "Lighthouse", "city": "Dalian"}),
        lambda: memory.link(trips[7].id, "includes", poi.id),
    ]
    for write in writes:
        run_bounded(write)
    assert held.thread.is_alive()  # every write committed while the load was held
    held.finish()
    assert held.locked_loads == 0  # installed from its snapshot, not read again under locks
    local = memory.engine.indexer.local("Trip")
    assert local is not None and len(local) == 29  # 30 + 1 created - 1 deleted - 1 erased
    caught_up = answers(memory)
    assert caught_up == freshly_loaded(memory)
    found = memory.search("Trip", "harbour lighthouse", k=2, mode="keyword").hits
    assert {h.entity.id for h in found} >= {trips[3].id}


def test_an_unknown_change_during_the_load_reads_the_mirrors_again(memory: Memory) -> None:
    held = HeldLoad(memory)
    held.start()
    run_bounded(lambda: memory.create("Trip", {"destination": "harbour lighthouse"}))
    run_bounded(lambda: memory.define_type({"name": "Note", "fields": {"text": {}},
                                            "embed": "{text}"}))
    held.finish()
    assert held.locked_loads == 1  # a type defined: the events cannot say what changed
    assert answers(memory) == freshly_loaded(memory)


def test_a_second_caller_waits_for_the_first_load_instead_of_reading_again(
        memory: Memory) -> None:
    held = HeldLoad(memory)
    held.start()
    second = threading.Thread(target=memory.engine.indexer.ensure_local, args=(held.trip,),
                              daemon=True)
    second.start()
    reads: list[str] = []
    held.indexer.fault = lambda point: reads.append(point)
    held.release.set()
    second.join(WAIT)
    held.finish()
    assert not second.is_alive() and reads == []  # the second found the first's mirrors
    assert answers(memory) == freshly_loaded(memory)


def test_mirrors_forgotten_during_the_load_are_read_again(memory: Memory) -> None:
    held = HeldLoad(memory, keyword_only=True)
    held.start()
    held.indexer.forget_local()  # the vector mirror the keyword-only load left alone
    run_bounded(lambda: memory.update(memory.query("Trip", limit=1).items[0].id,
                                      {"tags": ["harbour", "lighthouse"]}))
    held.finish()
    assert held.locked_loads == 1  # installed its part, then read the missing mirror
    assert memory.engine.indexer.local("Trip") is not None
    assert answers(memory) == freshly_loaded(memory)
