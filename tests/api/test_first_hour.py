"""HTTP details of identity integrity and on_conflict, and what /openapi.json teaches."""

from __future__ import annotations

from typing import Any

from dmf_hybrid._internal.filters import FILTER_OPS
from tests.doors import Front

POI = {"name": "Yu Garden", "city": "Shanghai", "cost": 40}


def test_on_conflict_and_identity_over_raw_http(http_api: Front) -> None:
    with http_api.raw() as raw:
        first = raw.post("/entities/Poi", json={"data": POI})
        assert first.status_code == 201
        eid = first.json()["id"]
        kept = raw.post("/entities/Poi", json={"data": {**POI, "cost": 50}})
        assert kept.status_code == 200 and kept.json()["differs"] == ["cost"]
        assert kept.json()["version"] == 1
        refused = raw.post("/entities/Poi", json={"data": {**POI, "cost": 50},
                                                  "on_conflict": "raise"})
        assert refused.status_code == 409 and refused.json()["error"] == "conflict"
        assert refused.json()["details"]["differs"] == ["cost"]
        changed = raw.post("/entities/Poi", json={"data": {**POI, "cost": 50},
                                                  "on_conflict": "update"})
        assert changed.status_code == 200 and changed.json()["version"] == 2
        assert changed.headers["etag"] == '"2"'
        bad = raw.post("/entities/Poi", json={"data": POI, "on_conflict": "merge"})
        assert bad.status_code == 422 and bad.json()["details"]["field"] == "on_conflict"
        batch = raw.post("/entities/Poi/batch", json={"rows": [{**POI, "cost": 60}],
                                                      "on_conflict": "update"})
        assert batch.status_code == 201 and batch.json()[0]["version"] == 3
        rename = raw.patch(f"/entities/{eid}", json={"data": {"name": "Yu Yuan"}})
        assert rename.status_code == 422
        assert rename.json()["details"]["field"] == "changes.name"
        assert raw.get(f"/entities/{eid}").json()["data"]["name"] == "Yu Garden"


def _schema(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(doc["components"]["schemas"][name])


def test_openapi_has_examples_enums_and_the_filter_language(http_api: Front) -> None:
    with http_api.raw() as raw:
        doc = raw.get("/openapi.json").json()
        example = _schema(doc, "PlanRequest")["examples"][0]
        checked = raw.post("/plans/validate", json={"ops": example["ops"]})
    assert checked.status_code == 200 and "problems" in checked.json()
    for name in ("SearchRequest", "EntityCreate", "EntityQuery", "PlanRequest", "PlanSteps",
                 "ContextRequest"):
        assert _schema(doc, name).get("examples"), f"{name} has no examples"
    search = _schema(doc, "SearchRequest")["properties"]
    assert search["mode"]["enum"] == ["hybrid", "vector", "keyword"]
    create = _schema(doc, "EntityCreate")["properties"]
    assert create["on_conflict"]["enum"] == ["return", "raise", "update"]
    where = _schema(doc, "EntityQuery")["properties"]["where"]
    text = str(where)
    for op in (*FILTER_OPS, "$and", "$or"):
        assert op in text, f"the filter description lacks {op}"
    tools = next(p for p in doc["paths"]["/tools"]["get"]["parameters"]
                 if p["name"] == "profile")
    assert tools["schema"]["enum"] == ["compact", "per_type"]


def test_the_plan_example_is_a_valid_plan_for_the_travel_domain() -> None:
    from dmf_hybrid import HashEmbedder, Memory
    from dmf_hybrid._internal.operations import PLAN_EXAMPLES
    from tests.conftest import INDEXES

    with Memory.open(None, embedder=HashEmbedder()) as mem:
        mem.load_definitions(INDEXES / "travel.toml")
        out = mem.execute_plan(PLAN_EXAMPLES["examples"][0]["ops"], dry_run=True)
    assert [d["op"] for d in out.diff] == ["create", "create", "link", "update"]
