"""The MCP server: the memory tools over the official ``mcp`` client (stdio and in-process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from dmf_hybrid import HashEmbedder, Memory
from dmf_hybrid._internal.mcp_server import build_server
from dmf_hybrid._internal.vector.exact import ExactIndex

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def _define(path: Path) -> None:
    with Memory.open(path, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        m.load_definitions(ROOT / "indexes" / "travel.toml")


async def _session(client: Client) -> dict[str, Any]:
    tools = await client.list_tools()
    created = await client.call_tool("create", {"type": "PointOfInterest", "data": {
        "name": "Shanghai Museum", "city": "Shanghai", "category": "museum"}})
    found = await client.call_tool("search", {"type": "PointOfInterest", "text": "museum",
                                              "k": 1})
    bad = await client.call_tool("create", {"type": "PointOfInterest", "data": {"nam": "x"}})
    return {"tools": tools.tools, "created": created, "found": found, "bad": bad}


def _check(out: dict[str, Any]) -> None:
    names = {t.name for t in out["tools"]}
    assert {"create", "search", "link", "execute_plan", "list_types", "define_type"} <= names
    create = next(t for t in out["tools"] if t.name == "create")
    assert "PointOfInterest" in create.description and "city" in create.description
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
    assert {p["field"] for p in body["details"]["problems"]} == {"data.nam", "data.name",
                                                                 "data.city"}


def test_mcp_over_stdio_with_the_official_client(tmp_path: Path) -> None:
    data = tmp_path / "mem"
    _define(data)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "dmf_hybrid._internal.cli", "mcp", "--data", str(data)],
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


def test_mcp_from_an_empty_directory_over_stdio(tmp_path: Path) -> None:
    """Define a type, create, search across types: nothing prepared beforehand."""
    data = tmp_path / "empty"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "dmf_hybrid._internal.cli", "mcp", "--data", str(data)],
        env={"DMF_EMBEDDER": "hash", "DMF_LOAD_EXAMPLES": "false"}, cwd=str(ROOT))
    note = {"name": "Note", "identity": ["title"], "embed": "{title}: {body}",
            "fields": {"title": {"type": "str", "required": True, "nullable": False},
                       "body": {"type": "str"}}}

    async def main() -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT):
            async with Client(params, read_timeout_seconds=60) as client:
                empty = await client.call_tool("list_types", {})
                defined = await client.call_tool("define_type", note)
                tools = await client.list_tools()
                made = await client.call_tool("create", {"type": "Note", "data": {
                    "title": "tea", "body": "Longjing tea from Hangzhou"}})
                found = await client.call_tool("search", {"text": "Longjing tea"})
                described = await client.call_tool("describe_type", {"name": "Note"})
                unknown = await client.call_tool("describe_type", {"name": "Nope"})
                return {"empty": empty, "defined": defined, "tools": tools, "made": made,
                        "found": found, "described": described, "unknown": unknown}

    out = anyio.run(main)
    assert not out["empty"].is_error
    assert "Note" not in {t["name"] for t in out["empty"].structured_content["types"]}
    assert out["defined"].structured_content["identity"] == ["title"]
    create = next(t for t in out["tools"].tools if t.name == "create")
    assert "Note" in create.input_schema["properties"]["type"]["enum"]
    assert out["made"].structured_content["created"] is True
    hits = out["found"].structured_content["hits"]
    assert hits[0]["entity"]["id"] == out["made"].structured_content["id"]
    assert out["described"].structured_content["definition"]["embed"] == "{title}: {body}"
    assert out["unknown"].is_error


def test_the_model_loads_when_the_server_starts() -> None:
    from dmf_hybrid._internal.mcp_server import start_model_load
    from tests.conftest import LoadsOnFirstUse, host_of

    embedder = LoadsOnFirstUse()
    said: list[str] = []
    thread = start_model_load(host_of(embedder), said.append)
    assert thread is not None
    thread.join(TIMEOUT)
    assert embedder.loaded
    assert said[0].startswith(f"dmf-hybrid: loading the embedding model {embedder.model_id}")
    assert said[1].startswith("dmf-hybrid: embedding model ready after")
    assert start_model_load(host_of(embedder), said.append) is None  # nothing to wait for
