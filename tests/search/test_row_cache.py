"""The row cache: a repeated search reads nothing from DuckDB, and no hit is ever older than
the last commit (updated, deleted, other tenant, filter no longer holds), through both doors
and on both plans (exact: candidates proven by their list; ANN: each proposal checked).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, MemoryClient, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.search import row_cache
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel, tenant_like
from tests.doors import START_TIMEOUT
from tests.store import DOORS

#: exact_threshold per plan: 0 sends every search with candidates to the ANN plan.
PLANS = {"exact": 15_000, "ann": 0}
MODES = ("vector", "keyword", "hybrid")


class CountingConnection:
    """A DuckDB connection that records every statement executed on it."""

    def __init__(self, con: Any, log: list[str]) -> None:
        self._con, self._log = con, log

    def execute(self, sql: str, *args: Any) -> Any:
        self._log.append(sql)
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


@contextmanager
def a_door(kind: str, plan: str, path: Path) -> Iterator[tuple[MemoryAPI, Memory]]:
    """(front door, the memory behind it) with the travel types, on ``plan``."""
    memory = Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex(),
                         settings=Settings(exact_threshold=PLANS[plan]))
    try:
        define_travel(memory)
        if kind == "memory":
            yield memory, memory
            return
        settings = Settings(data_dir=path.parent / "server", embedder="hash",
                            load_examples=False)
        with serve_in_thread(create_app(settings, memory), timeout=START_TIMEOUT) as url, \
                MemoryClient(url, timeout=START_TIMEOUT * 3) as client:
            yield client, memory
    finally:
        memory.close()


@pytest.fixture(params=[(d, p) for d in DOORS for p in PLANS], ids="-".join)
def door(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[MemoryAPI, Memory]]:
    with a_door(*request.param, tmp_path / "mem") as pair:
        yield pair


def statements(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The list every DuckDB statement read from now on is appended to."""
    log: list[str] = []
    db = memory._store.db
    reader = db.reader
    monkeypatch.setattr(db, "reader", lambda: CountingConnection(reader(), log))
    return log


@pytest.mark.parametrize("where", [None, {"city": "Oslo"}])
def test_a_repeated_search_issues_no_duckdb_statement(
        door: tuple[MemoryAPI, Memory], monkeypatch: pytest.MonkeyPatch,
        where: dict[str, Any] | None) -> None:
    mem, memory = door
    mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo" if i % 2 else "Rome"}
                            for i in range(40)])
    log = statements(memory, monkeypatch)
    for mode in MODES:
        first = mem.search("Poi", "cafe 3", where=where, k=5, mode=mode)
        assert first.hits
        log.clear()
        again = mem.search("Poi", "cafe 3", where=where, k=5, mode=mode)
        assert log == [], mode
        assert again.hits == first.hits
    mem.update(first.hits[0].entity.id, {"cost": 3.0})
    log.clear()
    after = mem.search("Poi", "cafe 3", where=where, k=5, mode="hybrid")
    assert log  # a commit empties the cache: resolution reads DuckDB again
    assert after.hits[0].entity.version == 2


def test_a_hit_is_never_older_than_the_last_commit(door: tuple[MemoryAPI, Memory]) -> None:
    mem, memory = door
    other = tenant_like(memory, "other")
    # the same IDs in two tenants, with other content
    pois = [mem.create("Poi", {"name": f"cafe {i}", "city": "Oslo"}, id=f"poi-{i}")
            for i in range(8)]
    theirs = [other.create("Poi", {"name": f"cafe {i}", "city": "Oslo", "cost": 9.0},
                           id=f"poi-{i}") for i in range(8)]
    where = {"city": "Oslo"}

    def found(m: MemoryAPI, mode: str) -> dict[str, tuple[int, float]]:
        hits = {}
        for _ in range(2):  # the second answer comes from the cache
            res = m.search("Poi", "cafe", where=where, k=20, mode=mode)
            hits = {h.entity.id: (h.entity.version, h.entity.fields()["cost"])
                    for h in res.hits}
        return hits

    for mode in MODES:
        assert set(found(mem, mode)) == {p.id for p in pois}
        assert {v for v in found(other, mode).values()} == {(1, 9.0)}  # theirs, not ours
    mem.update(pois[0].id, {"cost": 5.0})  # updated
    mem.delete(pois[1].id)  # deleted
    mem.update(pois[2].id, {"city": "Bergen"})  # the filter no longer holds
    for mode in MODES:
        hits = found(mem, mode)
        assert set(hits) == {p.id for p in pois[3:]} | {pois[0].id}, mode
        assert hits[pois[0].id] == (2, 5.0)
        assert {v for v in found(other, mode).values()} == {(1, 9.0)}
    other.delete(theirs[3].id)  # another tenant's commit changes nothing of ours
    for mode in MODES:
        assert pois[3].id in found(mem, mode)
        assert pois[3].id not in found(other, mode)
    mem.update(pois[2].id, {"city": "Oslo"})  # holds again
    for mode in MODES:
        assert pois[2].id in found(mem, mode)


def test_the_bound_is_a_setting(tmp_path: Path) -> None:
    for size in (0, 5):
        mem = Memory.open(tmp_path / f"mem{size}", embedder=HashEmbedder(),
                          vector_index=ExactIndex(), settings=Settings(row_cache_size=size))
        define_travel(mem)
        mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo"} for i in range(30)])
        res = mem.search("Poi", "cafe", k=20)
        assert len(res.hits) == 20
        assert len(mem.engine.rows) == size
        mem.close()


def test_a_read_mostly_phase_copies_the_type_whole(door: tuple[MemoryAPI, Memory],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    mem, memory = door
    monkeypatch.setattr(row_cache, "FILL_AFTER", 3)
    other = tenant_like(memory, "other")
    pois = mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo", "cost": float(i)}
                                   for i in range(40)])
    other.create("Poi", {"name": "cafe 7", "city": "Oslo", "cost": 9.0}, id="theirs")
    cheap = {"cost": {"$lt": 20.0}}
    log = statements(memory, monkeypatch)

    def ids(text: str, where: dict[str, Any] | None = None, mode: str = "vector") -> set[str]:
        return {h.entity.id for h in mem.search("Poi", text, where=where, k=5, mode=mode).hits}

    for i in range(4):  # distinct texts propose distinct IDs: lookups miss, then a copy
        for mode in MODES:
            ids(f"cafe {i}", mode=mode)
    log.clear()
    before = {i: ids(f"cafe {i}", mode=mode) for i in range(10, 30) for mode in MODES}
    assert log == []  # every ID is answered by the copy, absent ones included
    assert "theirs" not in set().union(*before.values())
    found = ids("cafe 15", cheap, "hybrid")
    assert found and found <= {p.id for p in pois[:20]}
    mem.update(pois[15].id, {"cost": 5.0})
    mem.delete(pois[13].id)
    mem.update(pois[11].id, {"cost": 99.0})  # the filter no longer holds
    for i in range(4):  # the commits dropped the copy; a new one forms
        ids(f"cafe {i}")
    for mode in MODES:
        res = mem.search("Poi", "cafe 15", where=cheap, k=40, mode=mode)
        got = {h.entity.id: h.entity for h in res.hits}
        assert set(got) == {p.id for p in pois[:20]} - {pois[13].id, pois[11].id}, mode
        assert pois[13].id not in got and pois[11].id not in got, mode
        assert got[pois[15].id].version == 2 and got[pois[15].id].fields()["cost"] == 5.0
        assert "theirs" not in got


def test_a_type_larger_than_the_bound_is_not_copied(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_cache, "FILL_AFTER", 2)
    mem = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex(),
                      settings=Settings(row_cache_size=12))
    try:
        define_travel(mem)
        mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo"} for i in range(30)])
        log = statements(mem, monkeypatch)
        for i in range(6):
            log.clear()
            assert len(mem.search("Poi", f"cafe {i}", k=5, mode="vector").hits) == 5
            assert len(mem.engine.rows) <= 12
        assert log  # still read from DuckDB: 30 rows do not fit in 12
    finally:
        mem.close()
