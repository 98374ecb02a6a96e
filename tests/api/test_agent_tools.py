"""Agent tools and plans behave the same through Memory and MemoryClient."""

from __future__ import annotations

import pytest

from dmf_hybrid import PlanError
from tests.doors import Front


def test_tools_match_across_front_doors(api: Front) -> None:
    for profile, expected in (("compact", {"create", "search", "execute_plan"}),
                              ("per_type", {"create_Poi", "search_Poi", "execute_plan"})):
        names = {t["function"]["name"] for t in api.mem.tools(profile=profile)}
        assert expected <= names
        plain = api.mem.tools(format="json_schema", profile=profile)
        assert {t["name"] for t in plain} == names


def test_call_tool_and_plan(api: Front) -> None:
    created = api.mem.call_tool("create_Poi", {"data": {"name": "Yu Garden",
                                                          "city": "Shanghai"}})
    poi_id = created["id"]
    assert poi_id.startswith("Poi_")
    plan = [
        {"op": "create", "type": "Trip", "data": {"destination": "Shanghai"}},
        {"op": "link", "from_id": "$0.id", "relation": "includes", "to_id": poi_id},
    ]
    dry = api.mem.execute_plan(plan, dry_run=True)
    assert dry.committed is False
    with pytest.raises(Exception):  # noqa: B017 - nothing was written by the dry run
        api.mem.get(dry.results[0]["id"])
    done = api.mem.execute_plan(plan)
    assert done.committed is True
    assert [r.entity.id for r in api.mem.related(done.results[0]["id"])] == [poi_id]


def test_bad_tool_call_raises_plan_error(api: Front) -> None:
    before = api.mem.last_seq()
    with pytest.raises(PlanError) as info:
        api.mem.call_tool("create_Poi", {"data": {"name": 5}})
    assert info.value.details["problems"]
    assert api.mem.last_seq() == before
