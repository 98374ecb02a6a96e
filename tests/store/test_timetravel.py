"""Time travel: get/query with as_of (seq or datetime) equal a Python model of every past state."""

from __future__ import annotations

import copy
import datetime as dt
import random
from functools import partial
from typing import Any

import pytest

from dmf_hybrid import Conflict, Memory, NotFound, ValidationError
from dmf_hybrid._internal.ids import entity_id
from tests.store import assert_unchanged, evaluate, ticking_clock

DESTINATIONS = ["Paris", "Rome", "Oslo", "Lima", "Kyoto", "Quito"]
POIS = [("Louvre", "Paris"), ("Forum", "Rome"), ("Fram", "Oslo"), ("Inca", "Lima")]
FILTERS: list[dict[str, Any]] = [
    {"budget": {"$gte": 50}},
    {"$or": [{"status": "booked"}, {"tags": {"$contains": "food"}}]},
    {"start": None},
    {"rating": {"$nin": [3]}},
]

State = dict[str, tuple[str, int, dict[str, Any], bool]]  # id -> (type, version, data, deleted)


def _trip_data(rng: random.Random) -> dict[str, Any]:
    return {"destination": rng.choice(DESTINATIONS), "budget": float(rng.randrange(0, 100, 10)),
            "status": rng.choice(["planned", "booked", "done"]),
            "tags": rng.sample(["food", "art", "hiking"], rng.randint(0, 2)),
            "start": rng.choice([None, dt.date(2025, 5, rng.randint(1, 28))])}


def _poi_data(rng: random.Random) -> dict[str, Any]:
    name, city = rng.choice(POIS)
    return {"name": name, "city": city, "cost": float(rng.randint(0, 3)),
            "rating": rng.choice([None, 1, 3, 5])}


def _run_random_operations(mem: Memory, rng: random.Random, steps: int
                           ) -> tuple[dict[int, State], set[str]]:
    """Apply random operations, keeping the model state after every audit seq."""
    state: State = {}
    erased: set[str] = set()
    states: dict[int, State] = {mem.last_seq(): {}}
    links: set[tuple[str, str]] = set()
    defaults = {"Trip": mem.get_type("Trip").model, "Poi": mem.get_type("Poi").model}

    def live(type_name: str | None = None) -> list[str]:
        return sorted(i for i, (t, _, _, deleted) in state.items()
                      if not deleted and (type_name is None or t == type_name))

    for _ in range(steps):
        op = rng.choice(["create", "create", "update", "update", "append", "delete", "restore",
                         "link", "unlink", "erase"] if state else ["create"])
        before = mem.last_seq()
        if op == "create":
            type_name = rng.choice(["Trip", "Poi"])
            data = _trip_data(rng) if type_name == "Trip" else _poi_data(rng)
            identity = ({"destination": data["destination"]} if type_name == "Trip"
                        else {"name": data["name"], "city": data["city"]})
            eid = entity_id(type_name, identity)
            if eid in erased or (eid in state and state[eid][3]):
                with pytest.raises(Conflict):
                    mem.create(type_name, data)
            else:
                entity = mem.create(type_name, data)
                assert entity.id == eid and entity.created == (eid not in state)
                if entity.created:
                    state[eid] = (type_name, 1, defaults[type_name](**data).model_dump(), False)
        elif op in ("update", "append") and live():
            eid = rng.choice(live())
            type_name, version, data, _ = state[eid]
            if op == "append" and type_name == "Trip":
                extra = [rng.choice(["food", "art", "x"])]
                mem.append(eid, "tags", extra, expected_version=version)
                state[eid] = (type_name, version + 1, {**data, "tags": data["tags"] + extra},
                              False)
            else:
                new = _trip_data(rng) if type_name == "Trip" else _poi_data(rng)
                changes = {k: v for k, v in new.items()
                           if k not in ("destination", "name", "city") and rng.random() < 0.5}
                merged = {**data, **changes}
                mem.update(eid, changes or {"cost" if type_name == "Poi" else "budget": 1.5})
                if not changes:
                    merged = {**data, ("cost" if type_name == "Poi" else "budget"): 1.5}
                if merged != data:
                    state[eid] = (type_name, version + 1, merged, False)
        elif op == "delete" and live():
            eid = rng.choice(live())
            mem.delete(eid)
            type_name, version, data, _ = state[eid]
            state[eid] = (type_name, version + 1, data, True)
        elif op == "restore":
            dead = sorted(i for i, s in state.items() if s[3])
            if dead:
                eid = rng.choice(dead)
                mem.restore(eid)
                type_name, version, data, _ = state[eid]
                state[eid] = (type_name, version + 1, data, False)
        elif op == "link" and live("Trip") and live("Poi"):
            trip, poi = rng.choice(live("Trip")), rng.choice(live("Poi"))
            assert mem.link(trip, "includes", poi) == ((trip, poi) not in links)
            links.add((trip, poi))
        elif op == "unlink" and links:
            trip, poi = sorted(links)[rng.randrange(len(links))]
            if not state[trip][3]:
                mem.unlink(trip, "includes", poi)
                links.discard((trip, poi))
        elif op == "erase" and rng.random() < 0.3 and state:
            eid = rng.choice(sorted(state))
            mem.erase(eid)
            erased.add(eid)
            del state[eid]
            links = {(a, b) for a, b in links if eid not in (a, b)}
        assert mem.last_seq() - before in (0, 1)
        states[mem.last_seq()] = copy.deepcopy(state)
    return states, erased


def _visible(state: State, erased: set[str], type_name: str
             ) -> dict[str, tuple[int, dict[str, Any]]]:
    return {i: (v, d) for i, (t, v, d, deleted) in state.items()
            if t == type_name and not deleted and i not in erased}


@pytest.mark.parametrize("seed", [2, 4])  # seeds whose runs include every operation
def test_as_of_equals_the_state_at_every_seq(mem: Memory, seed: int) -> None:
    rng = random.Random(seed)
    start = mem.last_seq()
    with ticking_clock():
        states, erased = _run_random_operations(mem, rng, steps=36)
    ever = sorted(set().union(*states.values()) | erased)
    ts = {e.seq: e.ts for e in mem.events()}
    state: State = {}
    for seq in range(start, mem.last_seq() + 1):
        state = states.get(seq, state)
        for type_name in ("Trip", "Poi"):
            expected = _visible(state, erased, type_name)
            page = mem.query(type_name, limit=1000, as_of=seq)
            assert page.as_of_seq == seq
            got = {e.id: (e.version, e.fields()) for e in page.items}
            assert got == expected, f"{type_name} at seq {seq}"
            assert [e.id for e in page.items] == sorted(expected)
            at_time = mem.query(type_name, limit=1000, as_of=ts[seq])
            assert {e.id: (e.version, e.fields()) for e in at_time.items} == expected
            for where in FILTERS if seq % 5 == 0 else []:
                if type_name == "Trip" and "rating" in str(where) or (
                        type_name == "Poi" and "rating" not in str(where)):
                    continue
                got_ids = [e.id for e in mem.query(type_name, where, limit=1000,
                                                   as_of=seq).items]
                assert got_ids == sorted(i for i, (_, d) in expected.items()
                                         if evaluate(where, d)), (seq, where)
                assert mem.count(type_name, where, as_of=seq) == len(got_ids)
        if seq % 5 == 0 or seq == mem.last_seq():
            for eid in ever:
                visible = {**_visible(state, erased, "Trip"), **_visible(state, erased, "Poi")}
                if eid in visible:
                    entity = mem.get(eid, as_of=seq)
                    assert (entity.version, entity.fields()) == visible[eid]
                else:
                    with pytest.raises(NotFound):
                        mem.get(eid, as_of=seq)
    # the live view is the last state, and a datetime between two events means the earlier
    final = states[mem.last_seq()]
    assert {e.id: (e.version, e.fields()) for e in mem.query("Trip", limit=1000).items} == \
        _visible(final, erased, "Trip")
    mid = ts[start + 1] + (ts[start + 2] - ts[start + 1]) / 2
    assert mem._store.timetravel.resolve_as_of(mem.tenant, mid) == start + 1
    assert mem.verify_audit().ok


def test_as_of_bounds(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris"}).id
    assert mem.get(trip, as_of=mem.last_seq()).id == trip
    assert mem.query("Trip", as_of=0).items == []
    with pytest.raises(NotFound):
        mem.get(trip, as_of=0)
    long_ago = dt.datetime(1999, 1, 1, tzinfo=dt.UTC)
    assert mem.query("Trip", as_of=long_ago).as_of_seq == 0
    now = dt.datetime.now(dt.UTC)
    assert mem.get(trip, as_of=now).id == trip
    assert mem.get(trip, as_of=now.replace(tzinfo=None)).id == trip  # naive: read as UTC
    # past the head: a pinned read there could change later
    bads: list[Any] = [-1, "3", 1.5, True, dt.date(2025, 1, 1), [3], mem.last_seq() + 1, 10**9,
                       dt.datetime(2999, 1, 1, tzinfo=dt.UTC), dt.datetime(2999, 1, 1)]
    for bad in bads:
        assert_unchanged(mem, partial(mem.get, trip, as_of=bad), ValidationError, match="as_of")
        assert_unchanged(mem, partial(mem.query, "Trip", as_of=bad), ValidationError,
                         match="as_of")
