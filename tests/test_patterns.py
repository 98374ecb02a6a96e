"""Every name, ID and key pattern is matched whole, through every entry point.

``$`` in a Python regex also matches before a final newline, so ``re.match(r"^[a-z]+$",
"abc\\n")`` succeeds. The package matches names only through ``checks.full_match``; these tests
check each pattern, the source (no prefix matching of a name pattern anywhere), and a name
ending in a newline through the SDK, HTTP (every route with a path parameter, read from the
app), plans and tools (every operation and tool with an ID argument, read from their tables),
TOML, MCP and the CLI (every command with an ID argument, read from the typer app).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from typer.testing import CliRunner

import dmf_hybrid
from dmf_hybrid import DMFError, HashEmbedder, Memory, MemoryAPI, Settings, ValidationError
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.checks import ID_PATTERN, NAME_PATTERNS, full_match
from dmf_hybrid._internal.cli import app as cli_app
from dmf_hybrid._internal.mcp_server import build_server
from dmf_hybrid._internal.plans.ops import OPERATIONS
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.store import assert_unchanged, both_doors, dump

PACKAGE = Path(dmf_hybrid.__file__).parent
#: A well-formed name that fits every pattern's alphabet, and what a hostile client adds to it.
ENDINGS = ("\n", "\r\n", "\n\n", " \n")

mem = both_doors()


@pytest.mark.parametrize("kind", sorted(NAME_PATTERNS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_pattern_accepts_its_names_and_refuses_them_with_a_newline(
        kind: str, data: st.DataObject) -> None:
    pattern = NAME_PATTERNS[kind]
    name = data.draw(st.from_regex(pattern, fullmatch=True))
    assert full_match(pattern, name)
    for ending in ENDINGS:
        assert not full_match(pattern, name + ending)
    assert not full_match(pattern, None)


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_module_matches_a_name_pattern_by_prefix() -> None:
    """``re.match``, ``re.search`` and ``pattern.match(value)`` (without a start position, the
    one use a tokenizer has) are never used: names go through ``full_match``."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            func = node.func
            module_call = isinstance(func.value, ast.Name) and func.value.id == "re"
            if module_call and func.attr in ("match", "search"):
                found.append(f"{path.name}:{node.lineno} re.{func.attr}")
            elif (not module_call and func.attr == "match" and len(node.args) == 1
                  and isinstance(func.value, ast.Name) and func.value.id.isupper()):
                found.append(f"{path.name}:{node.lineno} {func.value.id}.match")
    assert found == []


def test_every_anchored_module_pattern_is_a_registered_name_pattern() -> None:
    """A module-level ``^...$`` pattern named like a name/ID check is one of NAME_PATTERNS (or
    a derived-ID shape matched through full_match), so the property test above covers it."""
    registered = {p.pattern for p in NAME_PATTERNS.values()}
    strays = []
    for path, tree in _modules():
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "attr", "") == "compile" and node.value.args):
                continue
            arg = node.value.args[0]
            text = arg.value if isinstance(arg, ast.Constant) else None
            if isinstance(text, str) and text.startswith("^") and text.endswith("$") and \
                    text not in registered:
                strays.append(f"{path.name}:{node.lineno}")
    assert strays == []


# ---------------------------------------------------------------- SDK, both doors

BAD_ID = "abc\n"


def test_sdk_refuses_ids_and_names_ending_in_a_newline(mem: MemoryAPI) -> None:
    poi = mem.create("Poi", {"name": "Louvre", "city": "Paris"})
    trip = mem.create("Trip", {"destination": "Paris"})
    calls = {
        "create id": lambda: mem.create("Poi", {"name": "a", "city": "b"}, id=BAD_ID),
        "get": lambda: mem.get(BAD_ID),
        "update": lambda: mem.update(poi.id + "\n", {"cost": 1.0}),
        "delete": lambda: mem.delete(poi.id + "\n"),
        "link from": lambda: mem.link(trip.id + "\n", "includes", poi.id),
        "link to": lambda: mem.link(trip.id, "includes", poi.id + "\n"),
        "history": lambda: mem.history(poi.id + "\n"),
        "type name": lambda: mem.define_type({"name": "Evilnl\n", "fields": {"a": {}}}),
        "field name": lambda: mem.define_type({"name": "Evil", "fields": {"a\n": {}}}),
        "relation name": lambda: mem.define_type(
            {"name": "Evil", "fields": {"a": {}}, "relations": {"r\n": {"target": "Poi"}}}),
        "relation target": lambda: mem.define_type(
            {"name": "Evil", "fields": {"a": {}}, "relations": {"r": {"target": "Poi\n"}}}),
        "rule name": lambda: mem.define_rule({
            "name": "over\n", "condition": "budget > 1", "trigger": {"type": "Trip"},
            "action": {"kind": "budget", "message": "m"}}),
    }
    for call in calls.values():
        assert_unchanged(mem, call, DMFError)
    assert_unchanged(mem, lambda: mem.get(poi.id + "\n"), ValidationError)


def test_a_tenant_name_ending_in_a_newline_is_refused(memory: Memory) -> None:
    with pytest.raises(ValidationError):
        memory.for_tenant("acme\n")


# ---------------------------------------------------------------- HTTP, every route


def _route_probes(app: Any) -> list[tuple[str, str, str]]:
    """(method, path with each parameter "ok\\n", template) of every route of the app's
    OpenAPI document that has a path parameter."""
    probes = []
    for template, methods in sorted(app.openapi()["paths"].items()):
        if "{" not in template:
            continue
        path = re.sub(r"\{[^}]+\}", "ok%0A", template)
        probes += [(method.upper(), path, template) for method in sorted(methods)]
    return probes


def test_every_route_refuses_a_path_name_ending_in_a_newline(memory: Memory,
                                                              tmp_path: Path) -> None:
    poi = memory.create("Poi", {"name": "Louvre", "city": "Paris"})
    app = create_app(Settings(data_dir=tmp_path / "srv", embedder="hash", load_examples=False),
                     memory)
    probes = _route_probes(app)
    assert len(probes) >= 10  # the app's own routes, whoever added them
    before = dump(memory)
    with serve_in_thread(app, timeout=10) as url, httpx.Client(base_url=url) as http:
        for method, path, template in probes:
            body = {"data": {"name": "x", "city": "y"}} if method != "GET" else None
            response = http.request(method, path, json=body)
            assert 400 <= response.status_code < 500, (template, response.text)
            assert "error" in response.json(), template
        created = http.post("/entities/Poi", json={"id": BAD_ID,
                                                   "data": {"name": "n", "city": "c"}})
        assert created.status_code == 422 and created.json()["details"]["field"] == "id"
        for body in ({"name": "Evilnl\n", "fields": {"a": {}}},
                     {"name": "Evil", "fields": {"a\n": {}}}):
            assert http.post("/types", json=body).status_code == 422
        assert http.post("/admin/snapshot", json={"name": "x\n"}).status_code == 422
        assert http.post("/admin/archive", json={"before_seq": 2, "dest": "x\n"}
                         ).status_code == 422
        plan = http.post("/plans/execute", json={"ops": [
            {"op": "update", "id": poi.id + "\n", "changes": {"cost": 2.0}}]})
        assert plan.status_code == 422
        assert dump(memory) == before
        fine = http.post("/entities/Poi", json={"id": "okay.1", "data": {"name": "n",
                                                                         "city": "c"}})
        assert fine.status_code == 201 and fine.headers["location"] == "/entities/okay.1"


# ---------------------------------------------------------------- plans, tools, MCP


def _id_args() -> list[tuple[str, str]]:
    return [(name, arg.name) for name, op in OPERATIONS.items() for arg in op.args
            if arg.kind == "id"]


def _fill(op_name: str, bad_arg: str, poi_id: str, trip_id: str) -> dict[str, Any]:
    step: dict[str, Any] = {"op": op_name}
    for arg in OPERATIONS[op_name].args:
        if arg.name == bad_arg:
            step[arg.name] = (trip_id if arg.name == "from_id" else poi_id) + "\n"
        elif arg.required:
            step[arg.name] = {"type": "Poi", "data": {"name": "p", "city": "q"},
                              "messages": [{"role": "user", "content": "hi"}],
                              "field": "tags", "values": ["x"],
                              "relation": "includes", "text": "museum", "from_id": trip_id,
                              "to_id": poi_id, "id": poi_id}[arg.name]
    if op_name == "append":
        step.update(id=trip_id + ("\n" if bad_arg == "id" else ""))
    return step


@pytest.mark.parametrize(("op_name", "arg"), _id_args())
def test_every_plan_operation_refuses_an_id_ending_in_a_newline(
        memory: Memory, op_name: str, arg: str) -> None:
    poi = memory.create("Poi", {"name": "Louvre", "city": "Paris"})
    trip = memory.create("Trip", {"destination": "Paris"})
    step = _fill(op_name, arg, poi.id, trip.id)
    if op_name == "create":
        step["id"] = BAD_ID
    assert_unchanged(memory, lambda: memory.execute_plan([step]), DMFError)


def _bad_tool_calls(memory: Memory) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for tool in memory.tools("json_schema"):
        props = tool["parameters"].get("properties", {})
        ids = [p for p, spec in props.items() if spec.get("pattern") == ID_PATTERN]
        if not ids:
            continue
        args: dict[str, Any] = {}
        for prop in tool["parameters"].get("required", []):
            kind = props[prop].get("type")
            args[prop] = {"string": "x", "number": 1, "integer": 1, "object": {}, "array": [],
                          "boolean": False}.get(kind, "x")
        args.update({p: BAD_ID for p in ids})
        calls.append((tool["name"], args))
    return calls


def test_every_tool_refuses_an_id_ending_in_a_newline(memory: Memory) -> None:
    memory.create("Poi", {"name": "Louvre", "city": "Paris"})
    calls = _bad_tool_calls(memory)
    assert len(calls) >= 5
    for name, args in calls:
        assert_unchanged(memory, lambda n=name, a=args: memory.call_tool(n, a), DMFError)


def test_mcp_refuses_an_id_ending_in_a_newline(memory: Memory) -> None:
    calls = _bad_tool_calls(memory)
    before = dump(memory)

    async def main() -> list[Any]:
        with anyio.fail_after(60):
            async with Client(build_server(memory)) as client:
                return [await client.call_tool(n, a) for n, a in calls]

    results = anyio.run(main)
    assert results and all(r.is_error for r in results)
    assert {json.loads(r.content[0].text)["error"] for r in results} <= {
        "plan_error", "validation_error", "not_found"}
    assert dump(memory) == before


# ---------------------------------------------------------------- TOML, CLI


def test_toml_refuses_names_ending_in_a_newline(memory: Memory, tmp_path: Path) -> None:
    texts = {
        "type": '[types."Evilnl\\n"]\n[types."Evilnl\\n".fields]\na = { type = "str" }\n',
        "field": '[types.Evil]\n[types.Evil.fields]\n"a\\n" = { type = "str" }\n',
        "relation": ('[types.Evil]\n[types.Evil.fields]\na = { type = "str" }\n'
                     '[types.Evil.relations]\n"r\\n" = { target = "Poi" }\n'),
    }
    for name, text in texts.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        assert_unchanged(memory, lambda p=path: memory.load_definitions(p), DMFError)


def _cli_id_commands() -> list[str]:
    """The CLI commands whose first argument is an entity ID (read from the typer app)."""
    names = []
    for command in typer.main.get_command(cli_app).commands.values():  # type: ignore[attr-defined]
        first = next((p for p in command.params if p.param_type_name == "argument"), None)
        if first is not None and first.name in ("entity_id", "id"):
            names.append(command.name)
    return sorted(names)


@pytest.mark.parametrize("command", _cli_id_commands())
def test_cli_refuses_an_id_ending_in_a_newline(command: str, tmp_path: Path) -> None:
    data = tmp_path / "mem"
    with Memory.open(data, embedder=HashEmbedder(), vector_index=ExactIndex()) as m:
        m.define_type({"name": "Poi", "fields": {"name": {}, "city": {}}})
        m.create("Poi", {"name": "a", "city": "b"}, id="abc")
    result = CliRunner().invoke(cli_app, [command, BAD_ID, "--data", str(data)],
                                env={"DMF_EMBEDDER": "hash", "DMF_DATA_DIR": None})
    assert result.exit_code != 0
    assert "id" in result.output.lower()


def test_the_cli_has_id_commands() -> None:
    assert {"get", "history"} <= set(_cli_id_commands())
