"""The lifecycle over HTTP: POST /context, POST /summaries, GET /constraints, the tool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from dmf_hybrid import Memory, Settings
from dmf_hybrid._internal.api import create_app
from tests.lifecycle import open_travel, poi, trip

KEYS = "key-writer:default:writer,key-reader:default:reader,key-other:other:admin"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Memory, TestClient]]:
    mem = open_travel(tmp_path / "mem")
    settings = Settings(data_dir=tmp_path / "unused", embedder="hash", api_keys=KEYS,
                        load_examples=False)
    with TestClient(create_app(settings, mem)) as client:
        yield mem, client
    mem.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_context_over_http_equals_the_sdk(served: tuple[Memory, TestClient]) -> None:
    mem, client = served
    t = trip(mem, budget=10)
    mem.link(t.id, "includes", poi(mem, "Tower", 60).id)
    body = {"focus_ids": [t.id], "query": "tower", "budget_tokens": 400}
    response = client.post("/context", json=body, headers=auth("key-reader"))
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["text"] == mem.context([t.id], "tower", 400).text
    assert t.id in data["ids"] and data["as_of_seq"] == mem.last_seq()
    bad = client.post("/context", json={"budget_tokens": 1}, headers=auth("key-reader"))
    assert bad.status_code == 422
    missing = client.post("/context", json={"focus_ids": ["Trip_00000000000000000000"]},
                          headers=auth("key-reader"))
    assert missing.status_code == 404
    other = client.post("/context", json={"focus_ids": [t.id]}, headers=auth("key-other"))
    assert other.status_code == 404  # another tenant's ID does not exist there
    tool = client.post("/tools/context", json={"focus_ids": [t.id], "budget_tokens": 400},
                       headers=auth("key-reader"))
    assert tool.status_code == 200 and tool.json()["text"] == mem.context([t.id],
                                                                          budget_tokens=400).text


def test_summaries_and_constraints_over_http(served: tuple[Memory, TestClient]) -> None:
    mem, client = served
    t = trip(mem, budget=10)
    mem.link(t.id, "includes", poi(mem, "Tower", 60).id)
    assert client.post("/summaries", json={"scope": t.id},
                       headers=auth("key-reader")).status_code == 403
    response = client.post("/summaries", json={"scope": t.id},
                           headers={**auth("key-writer"), "X-Actor": "planner"})
    assert response.status_code == 201, response.text
    summary = response.json()
    assert not summary["empty"] and summary["summary"]["type"] == "MemorySummary"
    assert mem.history(summary["summary"]["id"])[0].actor == "planner"
    empty = client.post("/summaries", json={"since_seq": mem.last_seq()},
                        headers=auth("key-writer")).json()
    assert empty["empty"] and empty["summary"] is None

    queue = client.get("/constraints", params={"subject": t.id}, headers=auth("key-reader"))
    assert queue.status_code == 200
    items = queue.json()["items"]
    assert [i["data"]["rule"] for i in items] == ["trip_over_budget"]
    assert client.get("/constraints", params={"kind": "weather"},
                      headers=auth("key-reader")).status_code == 422
