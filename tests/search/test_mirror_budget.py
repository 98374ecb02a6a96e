"""The loaded mirrors stay within ``mirror_budget_mb``: the least recently searched types' are
dropped and loaded again on their next search, with the same answers (both engines)."""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.mirrors.vectors import ROW_OBJECT_BYTES

TYPES = ("Alpha", "Beta", "Gamma")
WORDS = ("amber birch cedar dahlia elm fern ginkgo hazel iris juniper kale lotus maple nettle "
         "olive peony quince rowan sage tulip umber violet willow yarrow").split()
ROWS = 300


def define_and_fill(mem: Memory) -> None:
    rng = random.Random(5)
    for name in TYPES:
        mem.define_type({"name": name, "embed": "{title}", "fields": {"title": {}}})
        mem.create_many(name, [{"title": " ".join(rng.choices(WORDS, k=5)) + f" {name}{i}"}
                               for i in range(ROWS)])


def open_memory(path: Path, store_url: str | None, budget_mb: float = 0) -> Memory:
    return Memory.open(path, embedder=HashEmbedder(),
                       settings=Settings(store_url=store_url, mirror_budget_mb=budget_mb))


def answers(mem: Memory, name: str) -> list[Any]:
    """Every mode's hits (IDs and scores) for three queries of a type."""
    out = []
    for i in (3, 141, 277):
        for mode in ("vector", "keyword", "hybrid"):
            res = mem.search(name, f"{name}{i}", mode=mode, k=5)
            out.append([(h.entity.id, round(h.score, 6)) for h in res.hits])
    return out


def loaded(mem: Memory) -> set[str]:
    return set(mem.engine.indexer.loaded.nbytes())


@pytest.fixture
def budget_mb(tmp_path: Path, store_url: str | None) -> float:
    """A budget that holds two of the three types' mirrors, measured on the same data."""
    mem = open_memory(tmp_path / "measure", store_url)
    define_and_fill(mem)
    for name in TYPES:
        mem.search(name, "amber")
    sizes = mem.engine.indexer.loaded.nbytes()
    mem.close()
    assert set(sizes) == set(TYPES)
    return max(sizes.values()) * 2.5 / 2**20


def test_the_least_recently_searched_type_is_dropped(tmp_path: Path, store_url: str | None,
                                                     budget_mb: float) -> None:
    mem = open_memory(tmp_path / "m", store_url, budget_mb)
    if store_url is None:
        define_and_fill(mem)
    indexer = mem.engine.indexer
    first = {name: answers(mem, name) for name in TYPES[:2]}
    assert loaded(mem) == {"Alpha", "Beta"} and indexer.loaded.evictions == 0
    first["Gamma"] = answers(mem, "Gamma")  # past the budget: Alpha, used longest ago, goes
    assert loaded(mem) == {"Beta", "Gamma"} and indexer.loaded.evictions == 1
    assert sum(indexer.loaded.nbytes().values()) <= budget_mb * 2**20
    # a change to a type whose mirrors are not loaded: its next search reads the store
    hit = mem.search("Alpha", "Alpha3", mode="keyword", k=1).hits[0].entity
    assert loaded(mem) == {"Gamma", "Alpha"}  # Beta now the least recent
    mem.update(hit.id, {"title": "zebra crossing"})
    mem.search("Beta", "amber")  # Beta again: Gamma goes
    assert loaded(mem) == {"Alpha", "Beta"} and indexer.loaded.evictions == 3
    assert mem.search("Alpha", "zebra crossing", mode="keyword", k=1).hits[0].entity.id == hit.id
    assert answers(mem, "Gamma") == first["Gamma"]  # loaded again, the same answers
    assert answers(mem, "Beta") == first["Beta"]
    mem.close()


def test_searches_and_writes_from_many_threads_while_types_come_and_go(
        tmp_path: Path, store_url: str | None, budget_mb: float) -> None:
    mem = open_memory(tmp_path / "m", store_url, budget_mb)
    if store_url is None:
        define_and_fill(mem)
    expected = {name: {i: mem.search(name, f"{name}{i}", mode="keyword", k=1).hits[0].entity.id
                       for i in range(0, ROWS, 37)} for name in TYPES}
    failures: list[str] = []

    def searcher(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            name = rng.choice(TYPES)
            i = rng.choice(sorted(expected[name]))
            mode = rng.choice(("keyword", "hybrid"))
            try:
                hits = mem.search(name, f"{name}{i}", mode=mode, k=3).hits
            except Exception as exc:  # noqa: BLE001 - recorded, asserted below
                failures.append(repr(exc))
                continue
            if not hits or hits[0].entity.id != expected[name][i]:
                failures.append(f"{mode} {name}{i}: {[h.entity.id for h in hits]}")

    def writer() -> None:
        for i in range(30):
            mem.create(TYPES[i % 3], {"title": f"fresh note{i:02d}"})

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(4)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert mem.engine.indexer.loaded.evictions > 0
    for i in range(30):  # every write found, whichever mirrors were loaded when it came
        hits = mem.search(TYPES[i % 3], f"note{i:02d}", mode="keyword", k=1).hits
        assert hits[0].entity.data.title == f"fresh note{i:02d}"
    mem.close()


def test_a_type_larger_than_the_whole_budget_is_kept_while_searched(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its vectors fit the budget (else it is searched directly, see test_direct_search),
    its vectors and BM25 index together do not."""
    vectors = ROWS * (HashEmbedder().dim * 4 + ROW_OBJECT_BYTES)
    mem = open_memory(tmp_path / "m", None, budget_mb=vectors * 1.05 / 2**20)
    define_and_fill(mem)
    with caplog.at_level(logging.WARNING):
        assert mem.search("Alpha", "Alpha7", mode="keyword", k=1).hits
        assert mem.search("Beta", "Beta7", mode="keyword", k=1).hits
    assert loaded(mem) == {"Beta"}  # Alpha dropped, Beta kept though over the budget
    assert "more than the whole budget" in caplog.text
    mem.close()


def test_a_type_dropped_right_after_its_load_is_loaded_again_for_the_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = open_memory(tmp_path / "m", None)
    define_and_fill(mem)
    indexer = mem.engine.indexer
    load = indexer.ensure_local
    calls: list[str] = []

    def load_then_lose(etype: Any, keyword: bool = True) -> None:
        load(etype, keyword)
        calls.append(etype.name)
        if len(calls) == 1:  # another search's load drops it at once
            with indexer.loaded.lock:
                indexer.loaded.forget(etype.key)

    monkeypatch.setattr(indexer, "ensure_local", load_then_lose)
    res = mem.search("Alpha", "Alpha7", mode="hybrid", k=1)
    assert res.hits[0].entity.data.title.endswith("Alpha7") and len(calls) >= 2
    mem.close()


def test_a_search_holding_off_writes_loads_without_waiting_for_another_load(
        tmp_path: Path) -> None:
    """A search's locked pass (writes held off) that finds its type's mirrors gone loads them
    itself: waiting for another thread's load, which waits for that lock, would never end."""
    mem = open_memory(tmp_path / "m", None)
    define_and_fill(mem)
    indexer, db = mem.engine.indexer, mem.engine.store.db
    read, locked = threading.Event(), threading.Event()

    def pause(point: str) -> None:
        if point == "snapshot_read" and threading.current_thread().name == "other-load":
            read.set()
            locked.wait(30)  # then it wants the database's lock, which the search holds

    indexer.fault = pause
    other = threading.Thread(target=indexer.ensure_local, args=(mem.get_type("Beta"),),
                             name="other-load")
    other.start()
    assert read.wait(30)
    found: list[Any] = []

    def locked_pass() -> None:
        with db.no_writes():
            locked.set()
            found.append(indexer.mirrors(mem.get_type("Alpha"), mem.tenant))

    search = threading.Thread(target=locked_pass)
    search.start()
    search.join(30)
    finished = not search.is_alive()
    other.join(30)
    assert finished and found[0][0] is not None and len(found[0][0]) == ROWS
    assert not other.is_alive() and indexer.local("Beta") is not None
    mem.close()
