"""Identity integrity on every write path, and honest idempotent creates (``on_conflict``)."""

from __future__ import annotations

from typing import Any

import pytest

from dmf_hybrid import Conflict, Memory, PlanError, ValidationError
from tests.store import assert_unchanged, both_doors, dump

mem = both_doors()


def _garden(mem: Any) -> str:
    return str(mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai", "cost": 40}).id)


def test_update_cannot_change_an_identity_field(mem: Memory) -> None:
    gid = _garden(mem)
    err = assert_unchanged(mem, lambda: mem.update(gid, {"name": "Yu Yuan"}), ValidationError)
    assert err.value.details["field"] == "changes.name"
    assert "identity" in err.value.message and "delete" in err.value.message
    # the same value is no change; a non-identity field still changes
    assert mem.update(gid, {"name": "Yu Garden", "cost": 45}).version == 2
    again = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"})
    assert again.id == gid and not again.created


def test_plans_and_tools_cannot_change_an_identity_field(mem: Memory) -> None:
    gid = _garden(mem)
    before = dump(mem)
    with pytest.raises(PlanError) as err:
        mem.execute_plan([{"op": "update", "id": gid, "data": {"city": "Suzhou"}}])
    assert "identity" in str(err.value.details["problems"])
    with pytest.raises(PlanError):
        mem.call_tool("update", {"id": gid, "data": {"city": "Suzhou"}})
    assert dump(mem) == before


def test_append_cannot_change_an_identity_list(tmp_path: Any) -> None:
    from tests.store import open_memory

    memory = open_memory(tmp_path / "m")
    memory.define_type({"name": "Tagged", "identity": ["tags"],
                        "fields": {"tags": {"type": "list", "item": "str"}}})
    tid = memory.create("Tagged", {"tags": ["a"]}).id
    with pytest.raises(ValidationError) as err:
        memory.append(tid, "tags", ["b"])
    assert err.value.details["field"] == "values.tags"
    memory.close()


def test_create_default_returns_the_stored_entity_and_names_what_differs(mem: Memory) -> None:
    gid = _garden(mem)
    before = dump(mem)
    again = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai", "cost": 50})
    assert dump(mem) == before
    assert again.id == gid and not again.created and again.version == 1
    assert again.differs == ["cost"] and again.fields()["cost"] == 40
    # fields left out are not "different": only what the caller gave is compared
    same = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"})
    assert same.differs == []


def test_create_on_conflict_raise(mem: Memory) -> None:
    gid = _garden(mem)
    assert mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai", "cost": 40},
                      on_conflict="raise").id == gid
    err = assert_unchanged(mem, lambda: mem.create(
        "Poi", {"name": "Yu Garden", "city": "Shanghai", "rating": 5}, on_conflict="raise"),
        Conflict)
    assert err.value.details["differs"] == ["rating"]


def test_create_on_conflict_update_is_one_audited_update(mem: Memory) -> None:
    gid = _garden(mem)
    updated = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai", "cost": 50},
                         on_conflict="update", reason="new price")
    assert updated.id == gid and not updated.created
    assert updated.version == 2 and updated.fields()["cost"] == 50
    assert updated.differs == ["cost"]
    last = mem.history(gid)[-1]
    assert (last.op, last.reason) == ("update", "new price")
    rows = mem.create_many("Poi", [{"name": "Yu Garden", "city": "Shanghai", "cost": 60},
                                   {"name": "Bund", "city": "Shanghai"}], on_conflict="update")
    assert [r.created for r in rows] == [False, True]
    assert mem.get(gid).fields()["cost"] == 60


def test_bad_on_conflict_is_refused(mem: Memory) -> None:
    err = assert_unchanged(mem, lambda: mem.create(
        "Poi", {"name": "Bund", "city": "Shanghai"}, on_conflict="merge"), ValidationError)
    assert err.value.details["field"] == "on_conflict"


def test_plans_and_tools_take_on_conflict(mem: Memory) -> None:
    gid = _garden(mem)
    out = mem.execute_plan([{"op": "create", "type": "Poi", "on_conflict": "update",
                             "data": {"name": "Yu Garden", "city": "Shanghai", "cost": 41}}])
    assert out.results[0]["differs"] == ["cost"] and out.results[0]["version"] == 2
    with pytest.raises(PlanError):
        mem.call_tool("create", {"type": "Poi", "on_conflict": "raise",
                                 "data": {"name": "Yu Garden", "city": "Shanghai", "cost": 1}})
    with pytest.raises(PlanError) as err:
        mem.execute_plan([{"op": "create", "type": "Poi", "on_conflict": "merge",
                           "data": {"name": "Bund", "city": "Shanghai"}}])
    assert err.value.details["problems"][0]["field"] == "on_conflict"
    assert mem.get(gid).fields()["cost"] == 41


def test_a_caller_chosen_id_names_no_fact_and_may_change_its_identity(mem: Memory) -> None:
    chosen = mem.create("Poi", {"name": "Yu Garden", "city": "Shanghai"}, id="garden-1")
    renamed = mem.update(chosen.id, {"name": "Yu Yuan"})
    assert renamed.version == 2 and renamed.fields()["name"] == "Yu Yuan"
