"""Soft delete and restore: hidden from reads, visible to time travel before the deletion."""

from __future__ import annotations

import pytest

from dmf_hybrid import Conflict, Memory, NotFound
from tests.store import assert_unchanged


def test_deleted_entities_disappear_from_reads(mem: Memory) -> None:
    trip = mem.create("Trip", {"destination": "Paris", "budget": 10}).id
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"}).id
    mem.link(trip, "includes", poi)
    alive = mem.last_seq()
    deleted = mem.delete(poi, actor="ana")
    assert deleted.deleted_at is not None and deleted.version == 2
    deleted_seq = mem.last_seq()
    with pytest.raises(NotFound, match=f"deleted at seq {deleted_seq}") as info:
        mem.get(poi)
    assert info.value.details["deleted_seq"] == deleted_seq  # type: ignore[attr-defined]
    assert mem.query("Poi").items == []
    assert mem.count("Poi") == 0
    assert mem.query("Poi", {"name": "Louvre"}).items == []
    assert mem.related(trip) == []
    # time travel before the deletion still reads it
    then = mem.get(poi, as_of=alive)
    assert (then.version, then.deleted_at, then.data.name) == (1, None, "Louvre")
    assert [e.id for e in mem.query("Poi", as_of=alive).items] == [poi]
    assert [r.entity.id for r in mem.related(trip, as_of=alive)] == [poi]
    with pytest.raises(NotFound, match="deleted"):
        mem.get(poi, as_of=deleted_seq)
    # the same identity cannot be silently re-created while deleted
    assert_unchanged(mem, lambda: mem.create("Poi", {"name": "Louvre", "city": "Paris"}),
                     Conflict, match="restore")
    # updates and deletes of a deleted entity are refused
    assert_unchanged(mem, lambda: mem.update(poi, {"cost": 3}), NotFound, match="deleted")
    assert_unchanged(mem, lambda: mem.delete(poi), NotFound, match="deleted")
    assert_unchanged(mem, lambda: mem.append(poi, "tags", ["x"]), NotFound)


def test_restore_brings_it_back(mem: Memory) -> None:
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris", "cost": 17}).id
    mem.delete(poi)
    restored = mem.restore(poi, reason="mistake")
    assert (restored.version, restored.deleted_at, restored.data.cost) == (3, None, 17)
    assert mem.get(poi) == restored
    assert [e.id for e in mem.query("Poi", {"cost": 17}).items] == [poi]
    assert mem.create("Poi", {"name": "Louvre", "city": "Paris"}).created is False
    assert_unchanged(mem, lambda: mem.restore(poi), Conflict, match="not deleted")
    assert [e.op for e in mem.history(poi)] == ["create", "delete", "restore"]
    assert mem.verify_audit().ok


def test_delete_of_unknown_ids(mem: Memory) -> None:
    assert_unchanged(mem, lambda: mem.delete("Poi_00000000000000000000"), NotFound)
    assert_unchanged(mem, lambda: mem.restore("Poi_00000000000000000000"), NotFound)
    assert_unchanged(mem, lambda: mem.erase("Poi_00000000000000000000"), NotFound)
