"""One behavioural suite through Memory, MemoryClient in-process, MemoryClient over uvicorn."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from dmf_hybrid import (
    AuditEvent,
    AuditReport,
    Entity,
    EntityType,
    FilterError,
    NotFound,
    Page,
    Related,
    RelationError,
    SchemaError,
    SearchResult,
    ValidationError,
    VersionConflict,
)
from tests.api import wrong_error
from tests.doors import Front

POIS = [
    {"name": "The Bund", "city": "Shanghai", "cost": 0, "rating": 5},
    {"name": "Yu Garden", "city": "Shanghai", "cost": 40, "rating": 4},
    {"name": "Shanghai Museum", "city": "Shanghai", "cost": 0, "rating": 5},
    {"name": "Jade Buddha Temple", "city": "Shanghai", "cost": 20, "rating": 4},
    {"name": "West Lake", "city": "Hangzhou", "cost": 0, "rating": 5},
]


def seed(mem: Any) -> list[Entity]:
    return [mem.create("Poi", p) for p in POIS]


def test_create_get_and_identity(api: Front) -> None:
    bund = api.mem.create("Poi", POIS[0], actor="tester", reason="first")
    assert isinstance(bund, Entity) and bund.created and bund.version == 1
    assert bund.data.name == "The Bund" and bund.data.cost == 0.0
    assert bund.tenant == "default" and bund.type == "Poi"
    again = api.mem.create("Poi", POIS[0])
    assert again.id == bund.id and not again.created
    got = api.mem.get(bund.id)
    assert got.data.city == "Shanghai" and got.version == 1
    assert got.created_at == bund.created_at and got.created_at.tzinfo is not None
    own = api.mem.create("Poi", {"name": "Custom", "city": "X"}, id="poi-custom-1")
    assert own.id == "poi-custom-1"


def test_dates_and_lists_round_trip(api: Front) -> None:
    trip = api.mem.create("Trip", {"destination": "Shanghai", "start": "2025-05-01",
                                   "tags": ["food"], "budget": 3000})
    assert trip.data.start == dt.date(2025, 5, 1)
    assert trip.data.tags == ["food"] and trip.data.status == "planned"
    assert api.mem.get(trip.id).data.start == dt.date(2025, 5, 1)


def test_create_many_and_count(api: Front) -> None:
    created = api.mem.create_many("Poi", POIS)
    assert [e.data.name for e in created] == [p["name"] for p in POIS]
    assert api.mem.count("Poi") == 5
    assert api.mem.count("Poi", {"city": "Shanghai"}) == 4


def test_query_cursor_pages(api: Front) -> None:
    seed(api.mem)
    page = api.mem.query("Poi", {"city": "Shanghai"}, order_by=["-cost", "name"], limit=3)
    assert isinstance(page, Page)
    assert [e.data.name for e in page.items] == ["Yu Garden", "Jade Buddha Temple",
                                                 "Shanghai Museum"]
    assert page.next_cursor is not None
    rest = api.mem.query("Poi", {"city": "Shanghai"}, order_by=["-cost", "name"], limit=3,
                         cursor=page.next_cursor)
    assert [e.data.name for e in rest.items] == ["The Bund"] and rest.next_cursor is None
    names = [e.data.name for e in api.mem.query("Poi", {"cost": {"$lt": 10}}, order_by="name",
                                                 limit=10).items]
    assert names == ["Shanghai Museum", "The Bund", "West Lake"]


def test_update_with_if_match_and_412(api: Front) -> None:
    bund = api.mem.create("Poi", POIS[0])
    v2 = api.mem.update(bund.id, {"cost": 10}, expected_version=1, actor="alice")
    assert v2.version == 2 and v2.data.cost == 10.0
    with pytest.raises(VersionConflict) as err:
        api.mem.update(bund.id, {"cost": 20}, expected_version=1)
    assert err.value.details["current_version"] == 2
    assert api.mem.get(bund.id).data.cost == 10.0
    v3 = api.mem.update(bund.id, {"rating": 3})
    assert v3.version == 3


def test_append(api: Front) -> None:
    trip = api.mem.create("Trip", {"destination": "Hangzhou", "tags": ["tea"]})
    after = api.mem.append(trip.id, "tags", ["lake", "bikes"], expected_version=1)
    assert after.data.tags == ["tea", "lake", "bikes"] and after.version == 2
    with pytest.raises(VersionConflict):
        api.mem.append(trip.id, "tags", ["x"], expected_version=1)


def test_delete_restore_and_as_of(api: Front) -> None:
    bund = api.mem.create("Poi", POIS[0])
    seq_alive = api.mem.last_seq()
    deleted = api.mem.delete(bund.id, expected_version=1)
    assert deleted.deleted_at is not None
    with pytest.raises(NotFound):
        api.mem.get(bund.id)
    assert api.mem.get(bund.id, as_of=seq_alive).data.name == "The Bund"
    assert api.mem.query("Poi", as_of=seq_alive).items[0].id == bund.id
    assert api.mem.count("Poi") == 0
    restored = api.mem.restore(bund.id)
    assert restored.deleted_at is None and api.mem.get(bund.id).id == bund.id
    when = dt.datetime.now(dt.UTC)
    assert api.mem.get(bund.id, as_of=when).id == bund.id
    with pytest.raises(ValidationError, match="future"):  # not pinned: it would change later
        api.mem.get(bund.id, as_of=when + dt.timedelta(days=1))


def test_erase(api: Front) -> None:
    bund = api.mem.create("Poi", POIS[0])
    seq = api.mem.erase(bund.id, reason="right to be forgotten")
    assert isinstance(seq, int) and seq > 0
    with pytest.raises(NotFound):
        api.mem.get(bund.id)
    report = api.mem.verify_audit()
    assert isinstance(report, AuditReport) and report.ok


def test_link_unlink_related(api: Front) -> None:
    trip = api.mem.create("Trip", {"destination": "Shanghai"})
    bund, garden = api.mem.create("Poi", POIS[0]), api.mem.create("Poi", POIS[1])
    assert api.mem.link(trip.id, "includes", bund.id) is True
    assert api.mem.link(trip.id, "includes", bund.id) is False
    assert api.mem.link(trip.id, "includes", garden.id) is True
    related = api.mem.related(trip.id, "includes")
    assert all(isinstance(r, Related) for r in related)
    assert [r.entity.id for r in related] == sorted([bund.id, garden.id])
    assert related[0].entity.data.city == "Shanghai"
    back = api.mem.related(bund.id, direction="in")
    assert [(r.relation, r.entity.id) for r in back] == [("includes", trip.id)]
    seq = api.mem.unlink(trip.id, "includes", bund.id)
    assert isinstance(seq, int)
    assert [r.entity.id for r in api.mem.related(trip.id)] == [garden.id]
    with pytest.raises(NotFound):
        api.mem.unlink(trip.id, "includes", bund.id)
    with pytest.raises(RelationError):
        api.mem.link(trip.id, "no_such_relation", bund.id)


def test_history_events_verify(api: Front) -> None:
    start = api.mem.last_seq()
    bund = api.mem.create("Poi", POIS[0], actor="ann", reason="réservé 上海", trace_id="t-1")
    api.mem.update(bund.id, {"cost": 5}, actor="bob")
    history = api.mem.history(bund.id)
    assert all(isinstance(e, AuditEvent) for e in history)
    assert [e.op for e in history] == ["create", "update"]
    assert (history[0].actor, history[0].reason, history[0].trace_id) == ("ann", "réservé 上海",
                                                                          "t-1")
    assert history[1].actor == "bob" and history[1].version_after == 2
    events = api.mem.events(since_seq=start)
    assert [e.seq for e in events] == [e.seq for e in history]
    assert [e.seq for e in api.mem.events(since_seq=start, until_seq=start + 1)] == [start + 1]
    assert len(api.mem.events(since_seq=start, limit=1)) == 1
    report = api.mem.verify_audit()  # every tenant's chain: the store's last position
    assert report.ok and report.last_seq == report.events_checked >= api.mem.last_seq()


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_search_modes(api: Front, mode: str) -> None:
    seed(api.mem)
    result = api.mem.search("Poi", "Jade Buddha Temple Shanghai", k=3, mode=mode)
    assert isinstance(result, SearchResult)
    assert result.hits[0].entity.data.name == "Jade Buddha Temple"
    assert len(result.hits) == 3 and result.receipt.mode == mode and result.receipt.k == 3
    # the query names the temple (its name and city, whole): hybrid's exact leg found it too
    legs = {"hybrid": {"vector", "keyword", "exact"}, "vector": {"vector"},
            "keyword": {"keyword"}}[mode]
    assert set(result.hits[0].legs) == legs
    scores = [(-h.score, h.entity.id) for h in result.hits]
    assert scores == sorted(scores)
    again = api.mem.search("Poi", "Jade Buddha Temple Shanghai", k=3, mode=mode)
    assert [h.entity.id for h in again.hits] == [h.entity.id for h in result.hits]


def test_search_filters_and_receipt_replay(api: Front) -> None:
    seed(api.mem)
    result = api.mem.search("Poi", "lake garden", where={"city": "Hangzhou"}, k=5)
    assert [h.entity.data.name for h in result.hits] == ["West Lake"]
    assert result.receipt.candidates == 1 and result.receipt.plan == "exact"
    seq = result.receipt.resolved_at_seq
    api.mem.create("Poi", {"name": "Lingyin Temple", "city": "Hangzhou"})
    replay = api.mem.search("Poi", "lake garden", where={"city": "Hangzhou"}, k=5, as_of=seq)
    assert [h.entity.id for h in replay.hits] == [h.entity.id for h in result.hits]


def test_define_through_the_front(api: Front) -> None:
    class Note(BaseModel):
        """A short note."""

        title: str
        body: str | None = None

    etype = api.mem.define(Note, identity=["title"], embed="{title}: {body}")
    assert isinstance(etype, EntityType) and etype.name == "Note" and etype.version == 1
    note = api.mem.create("Note", Note(title="Visa", body="apply early"))
    assert isinstance(note.data, Note) and note.data.body == "apply early"
    assert "Note" in [t.name for t in api.mem.types()]
    assert api.mem.get_type("Note").typedef.identity == ("title",)
    v2 = api.mem.define_type({"name": "Note", "identity": ["title"], "embed": "{title}: {body}",
                              "fields": {"title": {"type": "str", "required": True},
                                         "body": {"type": "str"},
                                         "tag": {"type": "str", "default": "misc"}}})
    assert v2.version == 2
    assert api.mem.get(note.id).data.tag == "misc"


ERROR_CASES: list[tuple[str, type[Exception], str | None]] = [
    ("unknown_type", NotFound, "type"),
    ("unknown_field", ValidationError, "data.nope"),
    ("wrong_value", ValidationError, "changes.cost"),
    ("missing_id", NotFound, None),
    ("malformed_id", ValidationError, "entity_id"),
    ("bad_filter_field", FilterError, "where.nope"),
    ("bad_filter_op", FilterError, "where.cost.$near"),
    ("bad_order", FilterError, "order_by"),
    ("k_too_large", ValidationError, "k"),
    ("bad_mode", ValidationError, "mode"),
    ("empty_text", ValidationError, "text"),
    ("page_too_large", ValidationError, "limit"),
    ("negative_as_of", ValidationError, "as_of"),
    ("bad_cursor", FilterError, None),
    ("relation_target", RelationError, None),
    ("bad_type_def", SchemaError, None),
    ("bad_direction", ValidationError, "direction"),
]


def _actions(mem: Any) -> dict[str, Callable[[], object]]:
    bund = mem.create("Poi", POIS[0])
    trip = mem.create("Trip", {"destination": "Shanghai"})
    return {
        "unknown_type": lambda: mem.create("Nope", {"a": 1}),
        "unknown_field": lambda: mem.create("Poi", {"name": "A", "city": "B", "nope": 1}),
        "wrong_value": lambda: mem.update(bund.id, {"cost": "lots"}),
        "missing_id": lambda: mem.get("Poi_00000000000000000000"),
        "malformed_id": lambda: mem.get("bad id!"),
        "bad_filter_field": lambda: mem.query("Poi", {"nope": 1}),
        "bad_filter_op": lambda: mem.query("Poi", {"cost": {"$near": 1}}),
        "bad_order": lambda: mem.query("Poi", order_by="nope"),
        "k_too_large": lambda: mem.search("Poi", "x", k=100_000),
        "bad_mode": lambda: mem.search("Poi", "x", mode="psychic"),
        "empty_text": lambda: mem.search("Poi", "  "),
        "page_too_large": lambda: mem.query("Poi", limit=10**6),
        "negative_as_of": lambda: mem.get(bund.id, as_of=-1),
        "bad_cursor": lambda: mem.query("Poi", cursor="not-a-cursor"),
        "relation_target": lambda: mem.link(trip.id, "includes", trip.id),
        "bad_type_def": lambda: mem.define_type({"name": "lower", "fields": {}}),
        "bad_direction": lambda: mem.related(trip.id, direction="sideways"),
    }


def test_same_exceptions(api: Front) -> None:
    actions = _actions(api.mem)
    problems = []
    for case, exc_class, field in ERROR_CASES:
        problem = wrong_error(case, actions[case], exc_class, field)
        if problem is not None:
            problems.append(problem)
    assert not problems, "\n".join(problems)


def test_tenant_isolation(api: Front) -> None:
    bund = api.mem.create("Poi", POIS[0])
    trip = api.mem.create("Trip", {"destination": "Shanghai"})
    api.mem.link(trip.id, "includes", bund.id)
    missing = "Poi_0123456789abcdef0123"
    errors = []
    for eid in (bund.id, missing):
        with pytest.raises(NotFound) as err:
            api.other.get(eid)
        errors.append((str(err.value).replace(eid, "<id>"),
                       {k: (v if v != eid else "<id>") for k, v in err.value.details.items()}))
    assert errors[0] == errors[1], "another tenant's ID must look exactly like a missing one"
    for attempt in (lambda: api.other.update(bund.id, {"cost": 1}),
                    lambda: api.other.delete(bund.id), lambda: api.other.history(bund.id),
                    lambda: api.other.related(trip.id), lambda: api.other.erase(bund.id)):
        with pytest.raises(NotFound):
            attempt()
    link_errors = []
    for eid in (trip.id, missing):
        with pytest.raises(RelationError) as rel_err:
            api.other.link(eid, "includes", bund.id)
        link_errors.append(str(rel_err.value).replace(eid, "<id>"))
    assert link_errors[0] == link_errors[1]
    assert api.other.query("Poi").items == [] and api.other.count("Poi") == 0
    assert api.other.search("Poi", "The Bund", k=5).hits == []
    assert [e.op for e in api.other.events()] == ["define", "define"]  # its own types only
    other_poi = api.other.create("Poi", {"name": "Oriental Pearl Tower", "city": "Shanghai"})
    assert other_poi.tenant == "other" and other_poi.created
    assert api.mem.get(bund.id).version == 1
    assert [h.entity.tenant for h in api.mem.search("Poi", "Shanghai", k=5).hits] == ["default"]
    with pytest.raises(NotFound):
        api.mem.get(other_poi.id)


def test_same_identity_in_two_tenants(api: Front) -> None:
    api.mem.create("Poi", POIS[0])
    assert api.other.create("Poi", POIS[0]).created
