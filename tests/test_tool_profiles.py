"""The compact tool profile: its size for the travel domain, one `data` shape, search across
types, internal types hidden; through both doors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dmf_hybrid import Memory, PlanError, ValidationError
from tests.conftest import INDEXES
from tests.store import both_doors

travel = both_doors(
    "travel", lambda door: door.load_definitions(INDEXES / "travel.toml"))
#: The compact profile for the travel domain must fit in this many characters (OpenAI format);
#: 12,000 until the conversation log's tools (add_messages, the context tool's conversation
#: and turns: 1,023 characters) came with every memory.
COMPACT_BUDGET = 12_500
AGENTS_DOC = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text(
    encoding="utf-8")


def size(tools: list[dict[str, Any]]) -> int:
    """Characters of the tool list as sent to a chat API (compact JSON)."""
    return len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))


def test_compact_profile_fits_and_describes_every_type_once(travel: Memory) -> None:
    tools = travel.tools("openai")
    assert size(tools) <= COMPACT_BUDGET
    names = [t["function"]["name"] for t in tools]
    assert {"create", "query", "search", "get", "update", "execute_plan", "context"} <= set(names)
    assert not any(n.startswith(("create_", "query_", "search_")) for n in names)
    meta = jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA)
    for tool in tools:
        meta.validate(tool["function"]["parameters"])
    create = next(t["function"] for t in tools if t["function"]["name"] == "create")
    for etype in travel.types():
        if etype.name == "MemorySummary":
            assert etype.name not in create["description"]
            continue
        assert create["description"].count(f"\n{etype.name}") == 1
        assert all(f in create["description"] for f in etype.typedef.fields)
    assert create["parameters"]["properties"]["on_conflict"]["enum"] == ["return", "raise",
                                                                         "update"]
    per_type = travel.tools("openai", profile="per_type")
    assert size(per_type) > size(tools)
    internal = travel.tools("json_schema", internal=True)
    assert "MemorySummary" in json.dumps(internal)
    assert "MemorySummary" not in json.dumps(travel.tools("json_schema"))


def test_the_docs_report_the_sizes_of_both_profiles(travel: Memory) -> None:
    for profile in ("compact", "per_type"):
        chars = size(travel.tools("openai", profile=profile))
        row = re.search(rf"^\| `{profile}` \| (\d+) \| ([\d,]+) \|", AGENTS_DOC, flags=re.M)
        assert row, f"docs/agents.md lacks the size row of the {profile} profile"
        assert int(row.group(1)) == len(travel.tools("openai", profile=profile))
        assert abs(int(row.group(2).replace(",", "")) - chars) <= chars * 0.02, (profile, chars)


def test_create_and_update_take_data_in_both_profiles(travel: Memory) -> None:
    poi = {"name": "Yu Garden", "city": "Shanghai", "category": "park"}
    made = travel.call_tool("create", {"type": "PointOfInterest", "data": poi})
    assert made["created"] is True
    same = travel.call_tool("create_PointOfInterest", {"data": {**poi, "rating": 4.5}})
    assert same["id"] == made["id"] and same["differs"] == ["rating"]
    changed = travel.call_tool("update", {"id": made["id"], "data": {"rating": 4.7}})
    assert changed["version"] == 2 and changed["data"]["rating"] == 4.7
    with pytest.raises(PlanError) as err:
        travel.call_tool("create", {"type": "PointOfInterest", "data": {"name": "x"}})
    assert "data.city" in {p["field"] for p in err.value.details["problems"]}
    with pytest.raises(PlanError):
        travel.call_tool("create_PointOfInterest", {"type": "Trip", "data": poi})
    with pytest.raises(PlanError) as err:  # the flat per-type shape is gone, with a hint
        travel.call_tool("create_PointOfInterest", poi)
    assert err.value.details["problems"][0]["field"] == "data"
    assert "data" in err.value.details["problems"][0]["hint"]


def test_search_without_a_type_searches_every_searchable_type(travel: Memory) -> None:
    travel.create("PointOfInterest", {"name": "Shanghai Museum", "city": "Shanghai",
                                      "category": "museum"})
    travel.create("User", {"handle": "ana", "name": "Ana", "interests": ["museums"]})
    out = travel.call_tool("search", {"text": "museum", "k": 5})
    assert {h["entity"]["type"] for h in out["hits"]} == {"PointOfInterest", "User"}
    scores = [(-h["score"], h["entity"]["id"]) for h in out["hits"]]
    assert scores == sorted(scores)
    assert "MemorySummary" not in out["types"]
    one = travel.call_tool("search", {"text": "museum", "type": "User"})
    assert {h["entity"]["type"] for h in one["hits"]} == {"User"}
    with pytest.raises(PlanError):
        travel.call_tool("search", {"text": "museum", "where": {"city": "Shanghai"}})
    with pytest.raises(PlanError):
        travel.call_tool("search", {"text": "", "k": 3})


def test_bad_profile_is_refused(travel: Memory) -> None:
    with pytest.raises(ValidationError):
        travel.tools("openai", profile="tiny")
