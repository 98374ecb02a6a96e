"""Relations: link rules, idempotence, unlink, traversal by depth, direction and time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import Memory, MemoryAPI, NotFound, RelationError, ValidationError
from tests.store import DOORS, assert_unchanged, both_doors, dump, open_door

mem = both_doors()


@pytest.fixture
def graph(mem: Memory) -> dict[str, str]:
    """Two trips chained by ``next``, each including Pois; maps short names to IDs."""
    return _build_graph(mem)


@pytest.fixture(scope="module", params=DOORS)
def shared_graph(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[MemoryAPI, dict[str, str]]]:
    """The same graph in a memory shared by read-only tests, through each front door."""
    with open_door(request.param, Path(tmp_path_factory.mktemp("graph")) / "mem") as mem:
        yield mem, _build_graph(mem)


def _build_graph(mem: Memory) -> dict[str, str]:
    ids = {
        "paris": mem.create("Trip", {"destination": "Paris"}).id,
        "rome": mem.create("Trip", {"destination": "Rome"}).id,
        "louvre": mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id,
        "orsay": mem.create("Poi", {"name": "Orsay", "city": "Paris"}).id,
        "forum": mem.create("Poi", {"name": "Forum", "city": "Rome"}).id,
    }
    mem.link(ids["paris"], "includes", ids["louvre"])
    mem.link(ids["paris"], "includes", ids["orsay"])
    mem.link(ids["rome"], "includes", ids["forum"])
    mem.link(ids["paris"], "next", ids["rome"])
    return ids


def _view(related: list[Any], names: dict[str, str]) -> list[tuple[int, str, str, str, str]]:
    back = {v: k for k, v in names.items()}
    return [(r.depth, r.relation, r.direction, back[r.from_id], back[r.entity.id])
            for r in related]


def test_link_is_audited_and_idempotent(mem: Memory, graph: dict[str, str]) -> None:
    seq = mem.last_seq()
    (event,) = mem.events(since_seq=seq - 1)
    assert (event.op, event.entity_id, event.type) == ("link", graph["paris"], "Trip")
    assert event.meta == {"from": graph["paris"], "relation": "next", "to": graph["rome"]}
    before = dump(mem)
    assert mem.link(graph["paris"], "includes", graph["louvre"]) is False
    assert dump(mem) == before  # no event, no row
    assert [e.op for e in mem.history(graph["louvre"])] == ["create", "link"]


def test_link_refusals_change_nothing(mem: Memory, graph: dict[str, str]) -> None:
    paris, rome, louvre = graph["paris"], graph["rome"], graph["louvre"]
    other = mem.create("Trip", {"destination": "Oslo"}).id
    gone = mem.create("Poi", {"name": "Gone", "city": "Paris"}).id
    mem.delete(gone)
    cases: list[tuple[Any, str]] = [
        (lambda: mem.link(paris, "visits", louvre), "no relation 'visits'"),
        (lambda: mem.link(paris, "includes", rome), "links to Poi, not Trip"),
        (lambda: mem.link(paris, "next", louvre), "links to Trip, not Poi"),
        (lambda: mem.link(louvre, "includes", louvre), "no relation 'includes'"),
        (lambda: mem.link(paris, "includes", "Poi_00000000000000000000"), "cannot link to"),
        (lambda: mem.link("Trip_00000000000000000000", "includes", louvre), "cannot link from"),
        (lambda: mem.link(paris, "includes", gone), "deleted"),
        (lambda: mem.link(paris, "next", other), "one-relation"),
    ]
    for call, match in cases:
        assert_unchanged(mem, call, RelationError, match=match)
    # a relation that is no string: Memory says the type has no such relation, HTTP refuses
    # the body; both are validation errors naming the relation
    assert_unchanged(mem, lambda: mem.link(paris, None, louvre),  # type: ignore[arg-type]
                     ValidationError, match="relation")
    mem.delete(paris)
    assert_unchanged(mem, lambda: mem.link(paris, "includes", louvre), RelationError,
                     match="deleted")
    assert_unchanged(mem, lambda: mem.link(paris, "includes", "not an id!"), ValidationError)
    # a deleted entity keeps its links (a restore brings them back) and cannot lose them
    linked = {r.entity.id for r in mem.related(rome, "next", direction="in")}
    assert_unchanged(mem, lambda: mem.unlink(paris, "next", rome), RelationError,
                     match=r"cannot unlink from .* deleted")
    mem.restore(paris)
    assert {r.entity.id for r in mem.related(rome, "next", direction="in")} == linked | {paris}
    mem.unlink(paris, "next", rome)


def test_one_relation_can_be_relinked_after_unlink(mem: Memory, graph: dict[str, str]) -> None:
    other = mem.create("Trip", {"destination": "Oslo"}).id
    seq = mem.unlink(graph["paris"], "next", graph["rome"])
    assert seq == mem.last_seq()
    (event,) = mem.events(since_seq=seq - 1)
    assert (event.op, event.before, event.after) == (
        "unlink", {"from": graph["paris"], "relation": "next", "to": graph["rome"]}, None)
    assert mem.link(graph["paris"], "next", other) is True
    assert [r.entity.id for r in mem.related(graph["paris"], "next")] == [other]
    assert_unchanged(mem, lambda: mem.unlink(graph["paris"], "next", graph["rome"]), NotFound)
    assert_unchanged(mem, lambda: mem.unlink(graph["paris"], "nope", other), RelationError)


def test_related_by_depth_direction_and_relation(mem: Memory, graph: dict[str, str]) -> None:
    assert _view(mem.related(graph["paris"]), graph) == [
        (1, "includes", "out", "paris", "louvre"),
        (1, "includes", "out", "paris", "orsay"),
        (1, "next", "out", "paris", "rome"),
    ] if graph["louvre"] < graph["orsay"] else [
        (1, "includes", "out", "paris", "orsay"),
        (1, "includes", "out", "paris", "louvre"),
        (1, "next", "out", "paris", "rome"),
    ]
    deep = _view(mem.related(graph["paris"], depth=2), graph)
    assert deep[-1] == (2, "includes", "out", "rome", "forum")
    assert len(deep) == 4
    assert _view(mem.related(graph["paris"], "next", depth=3), graph) == [
        (1, "next", "out", "paris", "rome")]
    assert _view(mem.related(graph["forum"], direction="in"), graph) == [
        (1, "includes", "in", "forum", "rome")]
    assert _view(mem.related(graph["forum"], direction="in", depth=2), graph) == [
        (1, "includes", "in", "forum", "rome"), (2, "next", "in", "rome", "paris")]
    both = _view(mem.related(graph["rome"], direction="both"), graph)
    assert sorted(both) == sorted([(1, "includes", "out", "rome", "forum"),
                                   (1, "next", "in", "rome", "paris")])
    assert mem.related(graph["louvre"]) == []
    # results are deterministic: the same call gives the same list
    assert mem.related(graph["paris"], depth=3, direction="both") == mem.related(
        graph["paris"], depth=3, direction="both")


def test_deleted_and_erased_ends_disappear_from_related(mem: Memory,
                                                       graph: dict[str, str]) -> None:
    mem.delete(graph["louvre"])
    assert graph["louvre"] not in {r.entity.id for r in mem.related(graph["paris"])}
    mem.restore(graph["louvre"])
    assert graph["louvre"] in {r.entity.id for r in mem.related(graph["paris"])}
    mem.erase(graph["orsay"])
    assert graph["orsay"] not in {r.entity.id for r in mem.related(graph["paris"])}
    mem.delete(graph["paris"])
    assert_unchanged(mem, lambda: mem.related(graph["paris"]), NotFound, match="deleted")
    assert [r.entity.id for r in mem.related(graph["rome"], direction="in")] == []


def test_related_as_of(mem: Memory, graph: dict[str, str]) -> None:
    linked = mem.last_seq()
    mem.unlink(graph["paris"], "includes", graph["louvre"])
    mem.update(graph["orsay"], {"cost": 16})
    mem.delete(graph["rome"])
    now = {r.entity.id for r in mem.related(graph["paris"])}
    assert now == {graph["orsay"]}
    then = mem.related(graph["paris"], as_of=linked)
    assert {r.entity.id for r in then} == {graph["louvre"], graph["orsay"], graph["rome"]}
    orsay_then = next(r.entity for r in then if r.entity.id == graph["orsay"])
    assert (orsay_then.version, orsay_then.data.cost) == (1, 0)
    # before the links existed
    first_link = min(e.seq for e in mem.events() if e.op == "link")
    assert mem.related(graph["paris"], as_of=first_link - 1) == []
    assert_unchanged(mem, lambda: mem.related(graph["paris"], as_of=0), NotFound)


def test_wildcard_relation_targets_any_type(mem: Memory) -> None:
    mem.define_type({"name": "Note", "fields": {"text": {"required": True, "nullable": False}},
                     "identity": ["text"], "relations": {"about": {"target": "*"}}})
    note = mem.create("Note", {"text": "remember"}).id
    trip = mem.create("Trip", {"destination": "Paris"}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    assert mem.link(note, "about", trip) and mem.link(note, "about", poi)
    assert {r.entity.type for r in mem.related(note)} == {"Trip", "Poi"}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"direction": "sideways"}, "direction"),
    ({"direction": None}, "direction"),
    ({"depth": 0}, "depth"),
    ({"depth": 6}, "depth"),
    ({"depth": True}, "depth"),
    ({"depth": "2"}, "depth"),
    ({"relation": 5}, "relation"),
    ({"as_of": -1}, "as_of"),
    ({"as_of": "yesterday"}, "as_of"),
])
def test_bad_related_arguments(shared_graph: tuple[Memory, dict[str, str]],
                               kwargs: dict[str, Any], field: str) -> None:
    mem, graph = shared_graph
    info = assert_unchanged(mem, lambda: mem.related(graph["paris"], **kwargs),
                            ValidationError)
    assert info.value.details["field"] == field  # type: ignore[attr-defined]
