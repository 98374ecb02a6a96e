"""Agent tools: definitions are valid JSON Schema for every type; calls round-trip; HTTP routes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from dmf_hybrid import HashEmbedder, Memory, PlanError, Settings, ValidationError
from dmf_hybrid._internal.vector.exact import ExactIndex

INDEXES = Path(__file__).resolve().parent.parent / "indexes"
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Draft 7 meta-validation is ~5x faster than 2020-12; the keywords used are valid in both
# (test_parameters_come_from_the_models checks a few tools against 2020-12 as well).
META = jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA)


@pytest.fixture
def domains(tmp_path: Path) -> Iterator[Memory]:
    """A memory with every bundled example domain defined."""
    m = Memory.open(tmp_path / "domains", embedder=HashEmbedder(), vector_index=ExactIndex())
    for path in sorted(INDEXES.glob("*.toml")):
        m.load_definitions(path)
    yield m
    m.close()


def by_name(mem: Memory) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in mem.tools("json_schema", profile="per_type")}


@pytest.mark.parametrize("fixture", ["mem", "domains"])
def test_definitions_are_valid_json_schema_for_every_type(fixture: str,
                                                          request: pytest.FixtureRequest) -> None:
    mem: Memory = request.getfixturevalue(fixture)
    tools = mem.tools(profile="per_type")
    names = [t["function"]["name"] for t in tools]
    assert len(names) == len(set(names))
    for tool in tools:
        assert tool["type"] == "function"
        fn = tool["function"]
        assert set(fn) == {"name", "description", "parameters"}
        META.validate(fn["parameters"])
        assert fn["parameters"]["type"] == "object"
        assert "$ref" not in json.dumps(fn["parameters"])
        assert fn["description"]
        assert NAME_RE.match(fn["name"])
    for etype in mem.types():
        if etype.name == "MemorySummary":  # internal: only with internal=True
            assert f"create_{etype.name}" not in names
            continue
        assert f"create_{etype.name}" in names and f"query_{etype.name}" in names
        assert (f"search_{etype.name}" in names) == (etype.typedef.embed is not None)
    assert mem.tools("json_schema", profile="per_type") == [t["function"] for t in tools]
    json.dumps(tools)


def test_parameters_come_from_the_models(domains: Memory) -> None:
    tools = by_name(domains)
    for name in ("create_Trip", "query_Trip", "search_PointOfInterest", "execute_plan"):
        jsonschema.Draft202012Validator.check_schema(tools[name]["parameters"])
    assert tools["create_Trip"]["parameters"]["required"] == ["data"]
    trip = tools["create_Trip"]["parameters"]["properties"]["data"]
    assert trip["required"] == ["user", "destination"]
    assert trip["additionalProperties"] is False
    status = trip["properties"]["status"]
    assert ["idea", "planned", "booked", "done", "cancelled"] in [
        o.get("enum") for o in status["anyOf"]]
    assert trip["properties"]["budget"]["description"] == "Total budget in the trip currency."
    assert "A trip with a destination" in tools["create_Trip"]["description"]
    validator = jsonschema.Draft202012Validator(trip)
    assert validator.is_valid({"user": "ana", "destination": "Shanghai", "budget": 5000,
                               "status": "planned", "start_date": "2025-05-01"})
    assert not validator.is_valid({"user": "ana"})
    assert not validator.is_valid({"user": "ana", "destination": "X", "status": "maybe"})
    assert not validator.is_valid({"user": "ana", "destination": "X", "colour": "red"})
    query = jsonschema.Draft202012Validator(tools["query_Trip"]["parameters"])
    assert query.is_valid({"where": {"budget": {"$lte": 5000}, "status": "planned",
                                     "$or": [{"user": "a"}, {"user": "b"}]},
                           "order_by": ["-budget", "destination"], "limit": 10})
    assert not query.is_valid({"where": {"budgett": 1}})
    assert not query.is_valid({"where": {"budget": {"$near": 1}}})
    assert not query.is_valid({"order_by": "colour"})
    search = tools["search_PointOfInterest"]["parameters"]
    assert search["required"] == ["text"]
    assert search["properties"]["mode"]["enum"] == ["hybrid", "vector", "keyword"]
    link = tools["link"]["parameters"]["properties"]["relation"]
    assert {"plans", "includes", "has"} <= set(link["enum"])


def test_call_tool_round_trip(mem: Memory) -> None:
    poi = mem.call_tool("create_Poi", {"data": {"name": "Shanghai Museum", "city": "Shanghai"}})
    assert poi["created"] is True and poi["version"] == 1 and poi["type"] == "Poi"
    assert mem.call_tool("create_Poi", {"data": {"name": "Shanghai Museum",
                                                 "city": "Shanghai"}}) == {**poi, "created": False}
    trip = mem.call_tool("create_Trip", {"data": {"destination": "Shanghai", "budget": 5000,
                                                  "start": "2025-05-01"}})
    assert trip["data"]["start"] == "2025-05-01"
    assert mem.call_tool("get", {"id": poi["id"]}) == {k: v for k, v in poi.items()
                                                        if k != "created"}
    updated = mem.call_tool("update", {"id": trip["id"], "data": {"budget": 4500},
                                       "expected_version": 1})
    assert updated["version"] == 2 and updated["data"]["budget"] == 4500
    appended = mem.call_tool("append", {"id": trip["id"], "field": "tags",
                                        "values": ["museum"]})
    assert appended["data"]["tags"] == ["museum"]
    assert mem.call_tool("link", {"from_id": trip["id"], "relation": "includes",
                                  "to_id": poi["id"]})["linked"] is True
    related = mem.call_tool("related", {"id": trip["id"]})
    assert [r["entity"]["id"] for r in related] == [poi["id"]]
    page = mem.call_tool("query_Trip", {"where": {"budget": {"$lt": 5000}}})
    assert [e["id"] for e in page["items"]] == [trip["id"]]
    hits = mem.call_tool("search_Poi", {"text": "museum in Shanghai", "k": 1})["hits"]
    assert hits[0]["entity"]["id"] == poi["id"]
    assert mem.call_tool("unlink", {"from_id": trip["id"], "relation": "includes",
                                    "to_id": poi["id"]})["unlinked"] is True
    assert mem.call_tool("delete", {"id": poi["id"]})["deleted"] is True
    assert mem.call_tool("restore", {"id": poi["id"]})["version"] == 3
    history = mem.call_tool("history", {"id": poi["id"]})
    assert [e["op"] for e in history] == ["create", "link", "unlink", "delete", "restore"]
    plan = mem.call_tool("execute_plan", {"ops": [
        {"op": "create", "type": "Poi", "data": {"name": "Yu Garden", "city": "Shanghai"}},
        {"op": "link", "from_id": trip["id"], "relation": "includes", "to_id": "$0.id"}],
        "dry_run": True})
    assert plan["committed"] is False and len(plan["diff"]) == 2
    json.dumps([poi, trip, related, page, hits, history, plan])


def test_bad_calls_say_what_to_fix(mem: Memory) -> None:
    before = mem.last_seq()
    with pytest.raises(PlanError) as exc:
        mem.call_tool("create_Pio", {"data": {"name": "x"}})
    problem = exc.value.details["problems"][0]
    assert problem["field"] == "name" and "create_Poi" in problem["hint"]
    with pytest.raises(PlanError) as exc:
        mem.call_tool("create_Poi", {"data": {"name": "x", "citty": "y", "cost": "free"}})
    fields = {p["field"] for p in exc.value.details["problems"]}
    assert fields == {"data.citty", "data.city", "data.cost"}
    assert exc.value.message.startswith("create_Poi call is invalid and changed nothing")
    assert "did you mean city" in exc.value.message
    with pytest.raises(PlanError) as exc:
        mem.call_tool("get", {"id": "Poi_nope"})
    assert exc.value.details["problems"][0]["field"] == "id"
    with pytest.raises(PlanError):
        mem.call_tool("get", "Poi_nope")  # type: ignore[arg-type]
    with pytest.raises(PlanError):
        mem.call_tool("get", {"id": "x", "op": "delete"})
    with pytest.raises(PlanError):
        mem.call_tool("search_Poi", {"text": "x", "k": 0})
    with pytest.raises(PlanError):
        mem.call_tool("execute_plan", {"ops": [], "dry_run": "yes"})
    with pytest.raises(ValidationError):
        mem.tools("xml")
    assert mem.last_seq() == before


# ---------------------------------------------------------------- HTTP


@pytest.fixture
def client(mem: Memory) -> Iterator[TestClient]:
    from dmf_hybrid._internal.api.app import create_app

    with TestClient(create_app(Settings(load_examples=False), mem)) as c:
        yield c


def test_http_tools_and_plans(client: TestClient, mem: Memory) -> None:
    tools = client.get("/tools").json()
    assert tools == mem.tools()
    assert client.get("/tools", params={"format": "json_schema"}).json() == mem.tools(
        "json_schema")
    r = client.post("/tools/create_Poi", json={"data": {"name": "Bund", "city": "Shanghai"}},
                    headers={"X-Actor": "bot"})
    assert r.status_code == 200 and r.json()["created"] is True
    assert mem.history(r.json()["id"])[0].actor == "bot"
    r = client.post("/tools/create_Poi", json={"data": {"name": "Bund"}})
    assert r.status_code == 422 and r.json()["error"] == "plan_error"
    assert r.json()["details"]["problems"][0]["field"] == "data.city"
    ops: list[dict[str, Any]] = [{"op": "create", "type": "Trip",
                                  "data": {"destination": "Shanghai"}},
           {"op": "link", "from_id": "$0.id", "relation": "includes", "to_id": "nope"}]
    r = client.post("/plans/validate", json={"ops": ops})
    assert r.status_code == 200 and r.json()["valid"] is False
    assert r.json()["problems"][0]["step"] == 1
    r = client.post("/plans/execute", json={"ops": ops})
    assert r.status_code == 422 and r.json()["error"] == "plan_error"
    ops[1]["to_id"] = mem.query("Poi").items[0].id
    dry = client.post("/plans/dry-run", json={"ops": ops}).json()
    real = client.post("/plans/execute", json={"ops": ops}).json()
    assert dry["committed"] is False and real["committed"] is True
    assert dry["diff"] == real["diff"]
    r = client.post("/plans/execute", json={"ops": [ops[0]] * 500})
    assert r.status_code == 422 and r.json()["error"] == "limit_exceeded"
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/tools", "/tools/{name}", "/plans/validate", "/plans/dry-run",
            "/plans/execute"} <= set(paths)


def test_tool_names_match_the_definitions(domains: Memory) -> None:
    from dmf_hybrid._internal.tools import tool_names

    for profile in ("compact", "per_type"):
        listed = [t["name"] for t in domains.tools("json_schema", profile=profile)]
        assert set(listed) <= set(tool_names(domains))
