"""The MCP server: the memory tools over the official ``mcp`` client (stdio and in-process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid.mcp_server import build_server
from dmf_hybrid.vector.exact import ExactIndex

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def _define(path: Path) -> None:
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        m.load_definitions(ROOT / "indexes" / "travel.toml")


async def _session(client: Client) -> dict[str, Any]:
    tools = await client.list_tools()
    created = await client.call_tool("create_PointOfInterest", {
        "name": "Shanghai Museum", "city": "Shanghai", "category": "museum"})
    found = await client.call_tool("search_PointOfInterest", {"text": "museum", "k": 1})
    bad = await client.call_tool("create_PointOfInterest", {"nam": "x"})
    return {"tools": tools.tools, "created": created, "found": found, "bad": bad}


def _check(out: dict[str, Any]) -> None:
    names = {t.name for t in out["tools"]}
    assert {"create_Trip", "search_PointOfInterest", "link", "execute_plan"} <= names
    trip = next(t for t in out["tools"] if t.name == "create_Trip")
    assert "destination" in trip.input_schema["required"]
    created = out["created"]
    assert not created.is_error
    assert created.structured_content["created"] is True
    assert json.loads(created.content[0].text)["id"] == created.structured_content["id"]
    hits = out["found"].structured_content["hits"]
    assert hits[0]["entity"]["id"] == created.structured_content["id"]
    bad = out["bad"]
    assert bad.is_error
    body = json.loads(bad.content[0].text)
    assert body["error"] == "plan_error"
    assert {p["field"] for p in body["details"]["problems"]} == {"nam", "name", "city"}


def test_mcp_over_stdio_with_the_official_client(tmp_path: Path) -> None:
    data = tmp_path / "mem"
    _define(data)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "dmf_hybrid.cli", "mcp", "--data", str(data)],
        env={"DMF_EMBEDDER": "hash"}, cwd=str(ROOT))

    async def main() -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            async with Client(params, read_timeout_seconds=60) as client:
                return await _session(client)

    _check(anyio.run(main))
    with Memory.open(data, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        assert m.count("PointOfInterest") == 1  # the server closed the store cleanly
        assert m.verify_audit().ok


def test_mcp_in_process(mem: Memory) -> None:
    mem.define_type({"name": "PointOfInterest", "identity": ["name", "city"],
                     "embed": "{name} ({category}) in {city}",
                     "fields": {"name": {"type": "str", "required": True, "nullable": False},
                                "city": {"type": "str", "required": True, "nullable": False},
                                "category": {"type": "str"}}})

    async def main() -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            async with Client(build_server(mem)) as client:
                out = await _session(client)
                plan = await client.call_tool("execute_plan", {"ops": [
                    {"op": "search", "type": "PointOfInterest", "text": "museum", "k": 1},
                    {"op": "delete", "id": "$0.hits[0].entity.id"}], "dry_run": True})
                out["plan"] = plan
                return out

    out = anyio.run(main)
    _check(out)
    assert out["plan"].structured_content["committed"] is False
    assert [d["op"] for d in out["plan"].structured_content["diff"]] == ["delete"]
