"""Caches carried across commits: the audit events say what changed, and only that is read
again. A search answers exactly what it answers with empty caches after any mix of writes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from dmf_hybrid import HashEmbedder, Memory, Settings
from dmf_hybrid._internal.search import filter_cache, row_cache
from dmf_hybrid._internal.search.filter_cache import FilterCache
from dmf_hybrid._internal.search.row_cache import RowCache
from dmf_hybrid._internal.store import changes
from dmf_hybrid._internal.store.changes import ChangeFeed
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import define_travel, tenant_like
from tests.search.test_row_cache import MODES, PLANS, a_door, statements
from tests.store import DOORS


class Note(BaseModel):
    """A type defined between two entity changes."""

    text: str


def _feed_between(memory: Memory, after: int, upto: int, journal: bool = False
                  ) -> changes.Changes | None:
    feed = ChangeFeed(memory._store.journal if journal else None)
    return feed.between(memory._store.db.reader(), after, upto)


@pytest.mark.parametrize("journal", [False, True], ids=["table", "journal"])
def test_the_feed_names_the_entities_a_range_of_commits_changed(memory: Memory,
                                                                journal: bool) -> None:
    other = tenant_like(memory, "other")
    start = memory._store.log.pos
    poi = memory.create("Poi", {"name": "cafe", "city": "Oslo"})
    trip = memory.create("Trip", {"destination": "Rome"})
    theirs = other.create_many("Poi", [{"name": "bar", "city": "Rome"}])[0]
    memory.update(poi.id, {"cost": 2.0})
    memory.link(trip.id, "includes", poi.id)  # relations change no entity row
    memory.delete(trip.id)
    found = _feed_between(memory, start, memory._store.log.pos, journal)
    assert found is not None
    assert found.ids == {("Poi", "default"): {poi.id}, ("Trip", "default"): {trip.id},
                         ("Poi", "other"): {theirs.id}}
    assert found.touches(("Poi", "other")) and not found.touches(("Trip", "other"))
    assert found.all_ids() == {poi.id, trip.id, theirs.id}
    now = memory._store.log.pos
    assert _feed_between(memory, now, now, journal) == changes.Changes({})
    assert _feed_between(memory, now, now - 1, journal) is None


@pytest.mark.parametrize("journal", [False, True], ids=["table", "journal"])
def test_the_feed_does_not_guess(memory: Memory, tmp_path: Path, journal: bool,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    start = memory._store.log.pos
    memory.create("Poi", {"name": "cafe", "city": "Oslo"})
    memory.define(Note, embed="{text}")  # not an entity change
    assert _feed_between(memory, start, memory._store.log.pos, journal) is None
    before = memory._store.log.pos
    for i in range(3):
        memory.create("Poi", {"name": f"bar {i}", "city": "Oslo"})
    monkeypatch.setattr(changes, "MAX_EVENTS", 2)  # too long to be worth reading
    assert _feed_between(memory, before, memory._store.log.pos, journal) is None
    monkeypatch.undo()
    assert _feed_between(memory, before, memory._store.log.pos, journal) is not None
    if not journal:
        memory.archive_events(before + 2, tmp_path / "archive")  # gone from the table
        assert _feed_between(memory, before, before + 2) is None


def test_the_journal_holds_committed_events_only(memory: Memory,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    start = memory._store.log.pos
    poi = memory.create("Poi", {"name": "cafe", "city": "Oslo"})
    with pytest.raises(RuntimeError), memory.transaction() as tx:
        tx.create("Poi", {"name": "never", "city": "Oslo"})
        tx.update(poi.id, {"cost": 9.0})
        raise RuntimeError("rolled back")
    # the rolled-back seqs are given back and taken by the next commit
    kept = memory.create("Trip", {"destination": "Rome"})
    journal = memory._store.journal
    assert journal.span(start, memory._store.log.pos) == [
        ("create", "Poi", "default", poi.id), ("create", "Trip", "default", kept.id)]
    log = statements(memory, monkeypatch)
    assert _feed_between(memory, start, memory._store.log.pos, journal=True) == (
        _feed_between(memory, start, memory._store.log.pos))
    assert len(log) == 1  # the table was read once, by the feed without a journal
    small = type(journal)(size=1)
    small.committed([(1, "create", "Poi", "default", "a"), (2, "create", "Poi", "default", "b")])
    assert small.span(1, 2) == [("create", "Poi", "default", "b")]
    assert small.span(0, 2) is None  # the first fell out


@pytest.mark.parametrize(("kind", "plan"), [(d, p) for d in DOORS for p in PLANS],
                         ids="-".join)
def test_a_commit_to_another_type_keeps_every_cached_answer(
        kind: str, plan: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with a_door(kind, plan, tmp_path / "mem") as (mem, memory):
        mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo" if i % 2 else "Rome"}
                                for i in range(40)])
        log = statements(memory, monkeypatch)
        for where in (None, {"city": "Oslo"}):
            for mode in MODES:
                first = mem.search("Poi", "cafe 3", where=where, k=5, mode=mode)
                mem.search("Poi", "cafe 3", where=where, k=5, mode=mode)
                mem.create("Trip", {"destination": f"Rome {mode} {where}"})
                log.clear()
                again = mem.search("Poi", "cafe 3", where=where, k=5, mode=mode)
                # the journal says what changed: no row, count or candidate list again
                assert log == [], (mode, where, log)
                assert again.hits == first.hits


@pytest.mark.parametrize("plan", PLANS)
def test_a_commit_reads_again_only_what_it_changed(
        plan: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with a_door("memory", plan, tmp_path / "mem") as (mem, memory):
        mem.create_many("Poi", [{"name": f"cafe {i}", "city": "Oslo"} for i in range(40)])
        where = {"city": "Oslo"}
        first = mem.search("Poi", "cafe", where=where, k=10, mode="hybrid")
        mem.search("Poi", "cafe", where=where, k=10, mode="hybrid")
        target = first.hits[0].entity.id
        mem.update(target, {"cost": 7.0})
        log = statements(memory, monkeypatch)
        after = mem.search("Poi", "cafe", where=where, k=10, mode="hybrid")
        got = {h.entity.id: h.entity for h in after.hits}
        assert got[target].version == 2 and got[target].fields()["cost"] == 7.0
        assert [h.entity.id for h in after.hits] == [h.entity.id for h in first.hits]
        # the events, then the changed row: never the candidates' whole scan or other rows
        rows_read = [s for s in log if '"ent_Poi"' in s]
        assert rows_read and all("id IN (?)" in s for s in rows_read), log


def _answer(mem: Memory, text: str, where: dict[str, Any] | None, mode: str
            ) -> list[tuple[str, int, dict[str, Any], float]]:
    res = mem.search("Poi", text, where=where, k=8, mode=mode)
    return [(h.entity.id, h.entity.version, h.entity.fields(), h.score) for h in res.hits]


def _uncached(mem: Memory, text: str, where: dict[str, Any] | None, mode: str
              ) -> list[tuple[str, int, dict[str, Any], float]]:
    engine = mem.engine
    kept = engine.filters, engine.rows
    engine.filters = FilterCache(engine.settings.exact_threshold)
    engine.rows = RowCache(0)
    try:
        return _answer(mem, text, where, mode)
    finally:
        engine.filters, engine.rows = kept


@pytest.fixture(params=list(PLANS))
def busy(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Memory]:
    monkeypatch.setattr(row_cache, "FILL_AFTER", 2)  # complete copies form, and go stale
    monkeypatch.setattr(row_cache, "STALE_MAX", 3)
    memory = Memory.open(tmp_path / "mem", embedder=HashEmbedder(), vector_index=ExactIndex(),
                         settings=Settings(exact_threshold=PLANS[request.param]))
    define_travel(memory)
    yield memory
    memory.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cached_answers_equal_uncached_ones_after_any_mix_of_writes(
        busy: Memory, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    patched = []
    real = filter_cache._patched
    monkeypatch.setattr(filter_cache, "_patched",
                        lambda *a: patched.append(1) or real(*a))  # type: ignore[func-returns-value]
    rng = random.Random(seed)
    mem, other = busy, tenant_like(busy, "other")
    cities = ["Oslo", "Rome", "Bergen"]
    # caller-chosen IDs: any field may change, the filtered city included
    live = [mem.create("Poi", {"name": f"cafe {i}", "city": cities[i % 3], "cost": float(i)},
                       id=f"poi-{i}").id for i in range(30)]
    gone: list[str] = []
    # the same ID in two tenants, with other content
    live.append(mem.create("Poi", {"name": "cafe 1", "city": "Rome"}, id="shared").id)
    theirs = [other.create("Poi", {"name": "cafe 1", "city": "Oslo"}, id="shared").id]
    trips = [mem.create("Trip", {"destination": "Rome"}).id]
    filters: list[dict[str, Any] | None] = [
        None, {"city": "Oslo"}, {"cost": {"$lt": 12.0}}, {"city": {"$in": ["Rome", "Bergen"]}}]
    for step in range(70):
        op = rng.choice(["update", "update", "move", "delete", "restore", "create", "erase",
                         "other", "trip", "link"])
        if op == "update" and live:
            mem.update(rng.choice(live), {"cost": float(rng.randrange(30))})
        elif op == "move" and live:  # the filter stops (or starts) holding
            mem.update(rng.choice(live), {"city": rng.choice(cities)})
        elif op == "delete" and live:
            gone.append(live.pop(rng.randrange(len(live))))
            mem.delete(gone[-1])
        elif op == "restore" and gone:
            live.append(gone.pop(rng.randrange(len(gone))))
            mem.restore(live[-1])
        elif op == "create":
            live.append(mem.create("Poi", {"name": f"cafe {step}", "city": rng.choice(cities),
                                           "cost": float(step % 30)}, id=f"new-{step}").id)
        elif op == "erase" and live:
            mem.erase(live.pop(rng.randrange(len(live))))
        elif op == "other":
            other.update(theirs[0], {"cost": float(step)})
        elif op == "trip":
            trips.append(mem.create("Trip", {"destination": f"Oslo {step}"}).id)
        elif op == "link" and live:
            mem.link(rng.choice(trips), "includes", rng.choice(live))
        for _ in range(2):
            where = rng.choice(filters)
            mode = rng.choice(MODES)
            text = f"cafe {rng.randrange(40)}"
            for _ in range(2):  # the second answer comes from the caches
                assert _answer(mem, text, where, mode) == _uncached(mem, text, where, mode), (
                    step, op, where, mode)
    assert patched  # candidate lists were patched, not only listed again
