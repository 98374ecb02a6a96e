"""Every bad input raises a typed error naming the problem and changes nothing at all."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import (
    Conflict,
    DMFError,
    FilterError,
    Memory,
    MemoryAPI,
    NotFound,
    RelationError,
    SchemaError,
    ValidationError,
)
from dmf_hybrid._internal.checks import MAX_VALUE_BYTES
from tests.store import DOORS, assert_unchanged, both_doors, open_door

mem = both_doors()


@pytest.fixture(scope="module", params=DOORS)
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[MemoryAPI, dict[str, str]]]:
    """One memory with a trip, a poi and a deleted poi, through each front door; every case
    must leave it as it is."""
    with open_door(request.param, Path(tmp_path_factory.mktemp("bad")) / "mem") as mem:
        ids = {
            "trip": mem.create("Trip", {"destination": "Paris", "tags": ["art"]}).id,
            "poi": mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id,
            "gone": mem.create("Poi", {"name": "Gone", "city": "Paris"}).id,
        }
        mem.delete(ids["gone"])
        yield mem, ids


Case = Callable[[Memory, dict[str, str]], Any]
NAN, INF = float("nan"), float("inf")

CASES: list[tuple[str, Case, type[DMFError], str | None]] = [
    # create: the data
    ("unknown type", lambda m, i: m.create("Nope", {"a": 1}), NotFound, "unknown entity type"),
    ("type as SQL", lambda m, i: m.create('Trip"; DROP TABLE events; --', {}), NotFound, None),
    ("type not a string", lambda m, i: m.create(5, {}), ValidationError, "type"),  # type: ignore[arg-type]
    ("data not an object", lambda m, i: m.create("Trip", ["Paris"]), ValidationError,  # type: ignore[arg-type]
     "must be an object"),
    ("data is a string", lambda m, i: m.create("Trip", "Paris"), ValidationError, None),  # type: ignore[arg-type]
    ("unknown field", lambda m, i: m.create("Trip", {"destination": "X", "colour": "red"}),
     ValidationError, "no field 'colour'"),
    ("field named as SQL", lambda m, i: m.create("Trip", {"destination": "X",
                                                          "a; DROP TABLE events": 1}),
     ValidationError, "no field"),
    ("missing required", lambda m, i: m.create("Trip", {"budget": 3}), ValidationError,
     "destination"),
    ("required is null", lambda m, i: m.create("Trip", {"destination": None}), ValidationError,
     "destination"),
    ("wrong type", lambda m, i: m.create("Trip", {"destination": "X", "budget": "lots"}),
     ValidationError, "budget"),
    ("wrong type: dict", lambda m, i: m.create("Trip", {"destination": {"a": 1}}),
     ValidationError, "destination"),
    ("NaN", lambda m, i: m.create("Trip", {"destination": "X", "budget": NAN}), ValidationError,
     "budget"),
    ("inf", lambda m, i: m.create("Trip", {"destination": "X", "budget": INF}), ValidationError,
     "budget"),
    ("-inf", lambda m, i: m.create("Trip", {"destination": "X", "budget": -INF}),
     ValidationError, "budget"),
    ("NaN as text", lambda m, i: m.create("Trip", {"destination": "X", "budget": "nan"}),
     ValidationError, "budget"),
    ("int beyond 64 bits", lambda m, i: m.create("Poi", {"name": "x", "city": "y",
                                                         "rating": 2**63}),
     ValidationError, "rating"),
    ("negative int beyond 64 bits", lambda m, i: m.create("Poi", {"name": "x", "city": "y",
                                                                  "rating": -(2**63) - 1}),
     ValidationError, "rating"),
    ("bad enum", lambda m, i: m.create("Trip", {"destination": "X", "status": "maybe"}),
     ValidationError, "status"),
    ("bad date", lambda m, i: m.create("Trip", {"destination": "X", "start": "2025-02-30"}),
     ValidationError, "start"),
    ("list of wrong items", lambda m, i: m.create("Trip", {"destination": "X", "tags": [1, {}]}),
     ValidationError, "tags"),
    ("list given a string", lambda m, i: m.create("Trip", {"destination": "X", "tags": "a,b"}),
     ValidationError, "tags"),
    ("bad caller id", lambda m, i: m.create("Trip", {"destination": "X"}, id="a b"),
     ValidationError, "id"),
    ("caller id of another type", lambda m, i: m.create("Trip", {"destination": "X"},
                                                        id=i["poi"]), Conflict, "belongs to"),
    ("caller id that is deleted", lambda m, i: m.create("Poi", {"name": "X", "city": "Y"},
                                                        id=i["gone"]), Conflict, "deleted"),
    ("actor not a string", lambda m, i: m.create("Trip", {"destination": "X"}, actor=5),  # type: ignore[arg-type]
     ValidationError, "actor"),
    ("reason too long", lambda m, i: m.create("Trip", {"destination": "X"},
                                              reason="r" * 10_001), ValidationError, "reason"),
    ("trace id not a string", lambda m, i: m.create("Trip", {"destination": "X"},
                                                    trace_id=["t"]),  # type: ignore[arg-type]
     ValidationError, "trace_id"),
    ("create_many with one bad row", lambda m, i: m.create_many(
        "Trip", [{"destination": "A"}, {"destination": "B", "budget": NAN}]),
     ValidationError, "row 1"),
    ("create_many not a list", lambda m, i: m.create_many("Trip", {"destination": "A"}),  # type: ignore[arg-type]
     ValidationError, "rows"),
    # get / ids
    ("get unknown id", lambda m, i: m.get("Trip_00000000000000000000"), NotFound, None),
    ("get id as SQL", lambda m, i: m.get("x' OR '1'='1"), ValidationError, "entity_id"),
    ("get empty id", lambda m, i: m.get(""), ValidationError, None),
    ("get huge id", lambda m, i: m.get("T" * 129), ValidationError, None),
    ("get id not a string", lambda m, i: m.get(12), ValidationError, None),  # type: ignore[arg-type]
    ("get deleted", lambda m, i: m.get(i["gone"]), NotFound, "deleted at seq"),
    ("get bad as_of", lambda m, i: m.get(i["trip"], as_of="now"), ValidationError, "as_of"),  # type: ignore[arg-type]
    ("get negative as_of", lambda m, i: m.get(i["trip"], as_of=-3), ValidationError, "as_of"),
    ("get float as_of", lambda m, i: m.get(i["trip"], as_of=2.0), ValidationError, "as_of"),  # type: ignore[arg-type]
    ("get bool as_of", lambda m, i: m.get(i["trip"], as_of=True), ValidationError, "as_of"),
    # past the head, a read is not pinned: it would change as the log grows
    ("get as_of past the head", lambda m, i: m.get(i["trip"], as_of=m.last_seq() + 1),
     ValidationError, "past the newest event"),
    ("query as_of in the future", lambda m, i: m.query(
        "Trip", as_of=dt.datetime(2999, 1, 1, tzinfo=dt.UTC)), ValidationError, "future"),
    ("search as_of past the head", lambda m, i: m.search("Poi", "museum", as_of=10**12),
     ValidationError, "as_of"),
    ("related as_of past the head", lambda m, i: m.related(i["trip"], as_of=10**12),
     ValidationError, "as_of"),
    # update / append
    ("update unknown", lambda m, i: m.update("Trip_00000000000000000000", {"budget": 1}),
     NotFound, None),
    ("update deleted", lambda m, i: m.update(i["gone"], {"cost": 1}), NotFound, "deleted"),
    ("update no changes", lambda m, i: m.update(i["trip"], {}), ValidationError, "changes"),
    ("update changes not an object", lambda m, i: m.update(i["trip"], [("budget", 1)]),  # type: ignore[arg-type]
     ValidationError, "changes"),
    ("update unknown field", lambda m, i: m.update(i["trip"], {"colour": "red"}),
     ValidationError, "colour"),
    ("update wrong type", lambda m, i: m.update(i["trip"], {"budget": "x"}), ValidationError,
     "budget"),
    ("update required to null", lambda m, i: m.update(i["trip"], {"destination": None}),
     ValidationError, "destination"),
    ("update NaN", lambda m, i: m.update(i["trip"], {"budget": NAN}), ValidationError,
     "budget"),
    ("update huge int", lambda m, i: m.update(i["poi"], {"rating": 10**30}), ValidationError,
     "rating"),
    ("update version as text", lambda m, i: m.update(i["trip"], {"budget": 1},
                                                     expected_version="1"),  # type: ignore[arg-type]
     ValidationError, "expected_version"),
    ("append to scalar", lambda m, i: m.append(i["trip"], "budget", [1]), ValidationError,
     "not a list"),
    ("append NaN-free but wrong", lambda m, i: m.append(i["trip"], "tags", [None]),
     ValidationError, None),
    ("append field as SQL", lambda m, i: m.append(i["trip"], "tags; DROP TABLE x", ["a"]),
     ValidationError, "field"),
    # delete / restore / erase
    ("restore live", lambda m, i: m.restore(i["trip"]), Conflict, "not deleted"),
    ("delete deleted", lambda m, i: m.delete(i["gone"]), NotFound, "deleted"),
    ("erase unknown", lambda m, i: m.erase("Trip_00000000000000000000"), NotFound, None),
    ("erase bad id", lambda m, i: m.erase(None), ValidationError, None),  # type: ignore[arg-type]
    # relations
    ("link unknown relation", lambda m, i: m.link(i["trip"], "owns", i["poi"]), RelationError,
     "no relation"),
    ("link to deleted", lambda m, i: m.link(i["trip"], "includes", i["gone"]), RelationError,
     "deleted"),
    ("unlink missing", lambda m, i: m.unlink(i["trip"], "includes", i["poi"]), NotFound, None),
    ("unlink bad id", lambda m, i: m.unlink(i["trip"], "includes", "a b"), ValidationError,
     None),
    # query
    ("query unknown type", lambda m, i: m.query("Nope"), NotFound, None),
    ("query where not an object", lambda m, i: m.query("Trip", "budget > 1"), FilterError,  # type: ignore[arg-type]
     None),
    ("query unknown field", lambda m, i: m.query("Trip", {"colour": "red"}), FilterError,
     "no field 'colour'"),
    ("query NaN", lambda m, i: m.query("Trip", {"budget": {"$gt": NAN}}), FilterError,
     "finite"),
    ("query limit 0", lambda m, i: m.query("Trip", limit=0), ValidationError, "limit"),
    ("query limit too big", lambda m, i: m.query("Trip", limit=10_001), ValidationError,
     "limit"),
    ("query limit as text", lambda m, i: m.query("Trip", limit="5"), ValidationError, "limit"),  # type: ignore[arg-type]
    ("query cursor garbage", lambda m, i: m.query("Trip", cursor="%%%"), FilterError,
     "cursor"),
    ("query bad as_of", lambda m, i: m.query("Trip", as_of=dt.date(2025, 1, 1)),  # type: ignore[arg-type]
     ValidationError, "as_of"),
    ("count unknown field", lambda m, i: m.count("Trip", {"x": 1}), FilterError, None),
    # schema
    ("define not a model", lambda m, i: m.define(dict), SchemaError, None),  # type: ignore[arg-type]
    ("define_type garbage", lambda m, i: m.define_type({"name": "T"}), SchemaError, None),
    ("history bad id", lambda m, i: m.history("a b"), ValidationError, None),
    ("events negative", lambda m, i: m.events(since_seq=-1), ValidationError, "since_seq"),
    ("events limit text", lambda m, i: m.events(limit="9"), ValidationError, "limit"),  # type: ignore[arg-type]
    ("tenant empty", lambda m, i: m.for_tenant(""), ValidationError, "tenant"),
]


@pytest.mark.parametrize(("label", "call", "error", "match"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_input_raises_and_changes_nothing(
        shared: tuple[Memory, dict[str, str]], label: str, call: Case,
        error: type[DMFError], match: str | None) -> None:
    mem, ids = shared
    if label == "tenant empty" and not isinstance(mem, Memory):
        pytest.skip("for_tenant is embedded only: over HTTP the API key decides the tenant")
    info = assert_unchanged(mem, lambda: call(mem, ids), error)
    err = info.value
    assert isinstance(err, DMFError)
    assert err.code and 400 <= err.status_code < 500
    if match is not None:
        text = f"{err.message} {err.details}"
        assert match in text, text
    if isinstance(err, ValidationError) and not isinstance(err, FilterError | SchemaError):
        assert err.field, f"{label}: a ValidationError must name the field"


def test_huge_and_odd_strings_are_stored_faithfully(mem: Memory) -> None:
    """Text up to the field value limit (checks.MAX_VALUE_BYTES) round-trips exactly (control
    characters are refused, and invisible ones dropped from identity fields:
    tests/store/test_unicode.py)."""
    odd = ["x" * (MAX_VALUE_BYTES - 3), "tab\tand\r\nbreaks", "emoji 🧭 and RTL \u202e",
           "' OR 1=1 --", "\\", " "]
    for i, text in enumerate(odd):
        trip = mem.create("Trip", {"destination": f"d{i}", "tags": [text]})
        assert mem.get(trip.id).data.tags == [text]
        assert [e.id for e in mem.query("Trip", {"tags": {"$contains": text}}).items] == [trip.id]
        if "\u202e" in text:
            continue  # not in an identity field (Poi.name)
        poi = mem.create("Poi", {"name": text, "city": "c"})
        assert mem.get(poi.id).data.name == text
        assert mem.get(poi.id, as_of=mem.last_seq()).data.name == text
    assert mem.verify_audit().ok
