"""Create, read, update, append; deterministic IDs."""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import re
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dmf_hybrid import Conflict, Entity, Memory, NotFound, ValidationError
from dmf_hybrid._internal.ids import ID_HASH_HEX, canonical_json, entity_id
from tests.conftest import Poi, Trip
from tests.store import assert_unchanged, audit_seqs, both_doors, dump

mem = both_doors()

ROOT = Path(__file__).resolve().parents[2]
# Golden IDs: if these change, every stored ID in every deployment changes with them.
PARIS_TRIP_ID = "Trip_553bfb0714443032ab13"
LOUVRE_ID = "Poi_eded6a877899d097d58b"


def test_ids_are_content_derived_and_at_least_64_bits(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "budget": 900})
    assert trip.id == PARIS_TRIP_ID
    assert re.fullmatch(rf"Trip_[0-9a-f]{{{ID_HASH_HEX}}}", trip.id)
    assert ID_HASH_HEX * 4 >= 64
    assert mem.create("Poi", {"city": "Paris", "name": "Louvre", "cost": 17}).id == LOUVRE_ID
    assert entity_id("Trip", {"destination": "Paris"}) == trip.id


def test_same_identity_returns_the_existing_entity_and_writes_nothing(mem: Memory) -> None:
    first = mem.create("Trip", {"destination": "Paris", "budget": 900, "tags": ["art"]})
    assert first.created and first.version == 1
    before = dump(mem)
    again = mem.create("Trip", {"destination": "Paris", "budget": 5, "tags": []})
    assert again.id == first.id
    assert not again.created
    assert again.fields() == first.fields()  # the existing entity, not the new data
    assert dump(mem) == before  # no row, no event, no outbox entry
    # the same holds for an entity that was updated since
    mem.update(first.id, {"budget": 1000})
    before = dump(mem)
    third = mem.create("Trip", Trip(destination="Paris"))
    assert (third.created, third.version, third.data.budget) == (False, 2, 1000)
    assert dump(mem) == before


def test_identity_default_is_the_fields_given(mem: Memory) -> None:
    class Note(BaseModel):
        text: str
        lang: str | None = None
        score: float = 0

    mem.define(Note)  # no identity: the ID comes from the fields the caller gave
    a = mem.create("Note", {"text": "hi"})
    b = mem.create("Note", {"text": "hi", "lang": "en"})
    c = mem.create("Note", {"lang": "en", "text": "hi"})  # key order does not matter
    d = mem.create("Note", {"text": "hi", "lang": None})
    assert a.id != b.id
    assert b.id == c.id and not c.created
    assert d.id not in (a.id, b.id)
    assert a.id == entity_id("Note", {"text": "hi"})
    assert b.id == entity_id("Note", {"lang": "en", "text": "hi"})
    # values are canonicalised after validation: 1 and 1.0 are the same float score
    assert mem.create("Note", {"text": "x", "score": 1}).id == \
        mem.create("Note", {"text": "x", "score": 1.0}).id


def test_caller_provided_ids(mem: Memory) -> None:
    mine = mem.create("Trip", {"destination": "Rome"}, id="trip-rome.2025:v1")
    assert mine.id == "trip-rome.2025:v1" and mine.created
    assert mem.get("trip-rome.2025:v1").data.destination == "Rome"
    # the derived ID of the same identity is a different entity
    derived = mem.create("Trip", {"destination": "Rome"})
    assert derived.id != mine.id and derived.created
    again = mem.create("Trip", {"destination": "Rome", "budget": 3}, id="trip-rome.2025:v1")
    assert not again.created and again.data.budget == 0
    assert_unchanged(mem, lambda: mem.create("Poi", {"name": "x", "city": "y"},
                                             id="trip-rome.2025:v1"),
                     Conflict, match="belongs to a Trip")
    bads: list[Any] = ["", "has space", "-leading", "x" * 200, "quote'd", 42, None.__class__]
    for bad in bads:
        assert_unchanged(mem, partial(mem.create, "Trip", {"destination": "Oslo"}, id=bad),
                         ValidationError)


def test_ids_are_stable_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """A child with a fixed hash seed derives the IDs this process (random seed) derives."""
    script = textwrap.dedent(f"""
        import datetime as dt, json, sys
        from dmf_hybrid import HashEmbedder, Memory
        from dmf_hybrid._internal.vector.exact import ExactIndex
        from tests.conftest import define_travel
        mem = Memory.open({str(tmp_path / "m")!r}, embedder=HashEmbedder(),
                          vector_index=ExactIndex())
        define_travel(mem)
        ids = [
            mem.create("Trip", {{"destination": "Paris", "budget": 900}}).id,
            mem.create("Trip", {{"tags": ["b", "a"], "destination": "Zürich",
                                "start": dt.date(2025, 1, 2)}}).id,
            mem.create("Poi", {{"name": "Louvre", "city": "Paris"}}).id,
        ]
        mem.close()
        print(json.dumps(ids))
    """)
    seed = "4242" if os.environ.get("PYTHONHASHSEED") != "4242" else "7"
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=120)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    assert ids == [PARIS_TRIP_ID, entity_id("Trip", {"destination": "Zürich"}), LOUVRE_ID]


def test_get_recovers_the_type_from_the_id(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "start": "2025-06-01"})
    poi = mem.create("Poi", Poi(name="Louvre", city="Paris", rating=5))
    got_trip, got_poi = mem.get(trip.id), mem.get(poi.id)
    assert (got_trip.type, got_poi.type) == ("Trip", "Poi")
    assert got_trip.data.start == dt.date(2025, 6, 1)
    assert got_poi.data.rating == 5
    assert not got_trip.created
    assert got_trip.model_dump(exclude={"created"}) == trip.model_dump(exclude={"created"})
    assert_unchanged(mem, lambda: mem.get("Trip_0000000000000000dead"), NotFound)


def test_lists_of_datetimes_and_json_fields_read_back_typed(mem: Memory) -> None:
    """Every read path decodes a row alike: datetimes in lists aware UTC, json fields as their
    values, the other fields untouched."""

    class Log(BaseModel):
        title: str
        seen: list[dt.datetime] = []
        extra: dict[str, Any] | None = None
        note: str = ""

    mem.define(Log, identity=["title"], embed="{title} {note}")
    cet = dt.timezone(dt.timedelta(hours=1))
    made = mem.create("Log", {"title": "visits 访问", "note": "lobby",
                              "seen": [dt.datetime(2025, 1, 1, 10, tzinfo=cet),
                                       dt.datetime(2025, 7, 1, 12, tzinfo=dt.UTC)],
                              "extra": {"n": 2, "tags": ["a", "b"]}})
    reads = [mem.get(made.id), mem.get(made.id, as_of=mem.last_seq()),
             mem.query("Log").items[0]]
    reads += [h.entity for m in ("vector", "keyword", "hybrid")
              for h in mem.search("Log", "visits lobby", k=1, mode=m).hits]
    assert len(reads) == 6
    for got in reads:
        assert got.data.seen == [dt.datetime(2025, 1, 1, 9, tzinfo=dt.UTC),
                                 dt.datetime(2025, 7, 1, 12, tzinfo=dt.UTC)]
        assert all(t.tzinfo is not None for t in got.data.seen)
        assert got.data.extra == {"n": 2, "tags": ["a", "b"]}
        assert (got.data.title, got.data.note) == ("visits 访问", "lobby")
        assert got.created_at.tzinfo is not None and got.deleted_at is None


def test_datetimes_round_trip_as_utc(mem: Memory) -> None:
    class Meeting(BaseModel):
        title: str
        at: dt.datetime | None = None

    mem.define(Meeting, identity=["title"])
    cet = dt.timezone(dt.timedelta(hours=1))
    m = mem.create("Meeting", {"title": "kickoff", "at": dt.datetime(2025, 1, 1, 10, tzinfo=cet)})
    got = mem.get(m.id).data.at
    assert got == dt.datetime(2025, 1, 1, 9, tzinfo=dt.UTC)
    assert got.tzinfo is not None
    assert mem.get(m.id, as_of=mem.last_seq()).data.at == got
    assert mem.get(m.id, as_of=mem.last_seq()).data.at.tzinfo is not None
    (queried,) = mem.query("Meeting", as_of=mem.last_seq()).items
    assert queried.data.at == got


def test_update_bumps_the_version_and_keeps_other_fields(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "budget": 900, "tags": ["art"]})
    updated = mem.update(trip.id, {"budget": 950, "status": "booked"}, actor="agent-1")
    assert updated.version == 2
    assert updated.fields() == {**trip.fields(), "budget": 950, "status": "booked"}
    assert updated.updated_at > trip.updated_at
    assert updated.created_at == trip.created_at
    assert mem.get(trip.id) == updated.model_copy(update={"created": False})
    seq = mem.last_seq()
    same = mem.update(trip.id, {"budget": 950})  # no change: no new version, no event
    assert same.version == 2 and mem.last_seq() == seq
    cleared = mem.update(trip.id, {"start": None, "tags": []})  # start was None already
    assert (cleared.version, cleared.data.tags, cleared.data.start) == (3, [], None)


def test_update_to_null_and_back(mem: Memory) -> None:
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris", "rating": 4})
    assert mem.update(poi.id, {"rating": None}).data.rating is None
    assert mem.query("Poi", {"rating": None}).items[0].id == poi.id
    assert mem.update(poi.id, {"rating": 5}).version == 3


def test_append_is_atomic_and_versioned(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "tags": ["art"]})
    appended = mem.append(trip.id, "tags", ["food", "art"])
    assert appended.data.tags == ["art", "food", "art"]
    assert appended.version == 2
    (event,) = mem.events(since_seq=mem.last_seq() - 1)
    assert event.op == "append"
    assert event.before is not None and event.after is not None
    assert event.before["data"]["tags"] == ["art"]
    assert event.after["data"]["tags"] == ["art", "food", "art"]
    assert_unchanged(mem, lambda: mem.append(trip.id, "budget", [1]), ValidationError,
                     match="not a list field")
    assert_unchanged(mem, lambda: mem.append(trip.id, "nope", ["x"]), ValidationError)
    assert_unchanged(mem, lambda: mem.append(trip.id, "tags", []), ValidationError)
    assert_unchanged(mem, lambda: mem.append(trip.id, "tags", "abc"),  # type: ignore[arg-type]
                     ValidationError)
    assert_unchanged(mem, lambda: mem.append(trip.id, "tags", [{"x": 1}]), ValidationError)


def test_create_many_matches_single_creates(mem: Memory) -> None:
    rows = [{"name": f"p{i % 7}", "city": "Paris", "cost": i} for i in range(20)]
    seq = mem.last_seq()
    created = mem.create_many("Poi", rows)
    assert [e.created for e in created] == [True] * 7 + [False] * 13
    assert [e.id for e in created] == [entity_id("Poi", {"name": r["name"], "city": "Paris"})
                                       for r in rows]
    assert mem.last_seq() == seq + 7
    assert audit_seqs(mem) == list(range(1, seq + 8))
    assert mem.count("Poi") == 7
    # duplicates within a batch resolve to the first occurrence's data
    assert created[7].data.cost == 0
    again = mem.create_many("Poi", rows[:3])
    assert [e.created for e in again] == [False, False, False]
    assert mem.last_seq() == seq + 7
    bad: list[dict[str, Any]] = [*rows, {"name": "x", "city": "y", "cost": "lots"}]
    info = assert_unchanged(mem, lambda: mem.create_many("Poi", bad), ValidationError)
    assert info.value.details["row"] == 20  # type: ignore[attr-defined]
    assert mem.verify_audit().ok


def test_create_many_in_chunks_is_gap_free(memory: Memory) -> None:
    mem = memory  # the store's chunking is embedded by nature
    rows = [{"name": f"p{i}", "city": "c"} for i in range(130)]
    seen: list[int] = []
    # Memory.create_many writes 2000 rows per transaction; a small chunk exercises the same path
    entities = mem._store.bulk.create_many(mem.tenant, "Poi", rows, chunk=50, progress=seen.append)
    assert seen == [50, 50, 30]  # three write transactions
    assert len({e.id for e in entities}) == 130
    assert audit_seqs(mem) == list(range(1, mem.last_seq() + 1))
    assert mem.count("Poi") == 130
    assert mem.verify_audit().events_checked == mem.last_seq()


def test_entities_serialise_to_json(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "start": dt.date(2025, 1, 1)})
    payload = json.loads(trip.model_dump_json())
    assert payload["data"] == {"destination": "Paris", "budget": 0.0, "status": "planned",
                               "tags": [], "start": "2025-01-01"}
    assert isinstance(trip, Entity)
    assert canonical_json({"b": 1, "a": [dt.date(2025, 1, 1)]}) == '{"a":["2025-01-01"],"b":1}'


class Colour(enum.Enum):
    """A model's own Enum (stored as its values, an enum field of the type)."""

    BLUE = "blue"
    RED = "red"


class Shirt(BaseModel):
    name: str
    colour: Colour = Colour.BLUE


def test_a_model_with_an_enum_field_stores_its_values(mem: Any) -> None:
    """Enum members are written as their values: create, update, filter, search, history."""
    mem.define(Shirt, identity=["name"], embed="{name}, {colour}")
    red = mem.create("Shirt", {"name": "oxford", "colour": Colour.RED})
    plain = mem.create("Shirt", Shirt(name="linen"))
    assert red.data.colour is Colour.RED and plain.data.colour is Colour.BLUE
    assert mem.update(plain.id, {"colour": Colour.RED}).data.colour is Colour.RED
    assert sorted(e.id for e in mem.query("Shirt", {"colour": "red"}).items) == sorted(
        [red.id, plain.id])
    assert {h.entity.id for h in mem.search("Shirt", "oxford red", k=2).hits} == {
        red.id, plain.id}
    assert mem.history(plain.id)[-1].after["data"]["colour"] == "red"
    assert mem.verify_audit().ok
