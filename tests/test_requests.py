"""One request model per operation: the protocol's arguments, each door's check and the
route's body are the same model (``dmf_hybrid._internal.operations.REQUESTS``)."""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmf_hybrid import DMFError, MemoryAPI, MemoryClient, PlanError, Settings
from dmf_hybrid._internal import requests as requests_module
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.checks import MAX_ORDER_FIELDS
from dmf_hybrid._internal.operations import PROFILES, REQUESTS
from dmf_hybrid._internal.plans import OPERATIONS
from dmf_hybrid._internal.plans.ops import MODEL
from dmf_hybrid._internal.requests import Request
from dmf_hybrid._internal.tool_schemas import model_args
from dmf_hybrid._internal.tools import tool_operation
from tests.store import behind, open_door

#: A MemoryAPI parameter by the name of the model field it fills (where the names differ).
PARAMETER = {"type": "type_name"}
#: ... and where an operation names it otherwise.
PARAMETER_OF = {("update", "data"): "changes"}
#: Each operation's route (method, path) and a call of it with good arguments.
ROUTES = {
    "query": ("POST", "/entities/{type_name}/query"),
    "count": ("POST", "/entities/{type_name}/count"),
    "search": ("POST", "/search"),
    "context": ("POST", "/context"),
    "open_constraints": ("POST", "/constraints/query"),
    "create": ("POST", "/entities/{type_name}"),
    "create_many": ("POST", "/entities/{type_name}/batch"),
    "update": ("PATCH", "/entities/{entity_id}"),
    "append": ("POST", "/entities/{entity_id}/append"),
    "add_messages": ("POST", "/conversations/{conversation}/messages"),
    "summarize": ("POST", "/summaries"),
    "link": ("POST", "/relations"),
    "unlink": ("DELETE", "/relations"),
    "get": ("GET", "/entities/{entity_id}"),
    "related": ("GET", "/entities/{entity_id}/related"),
    "events": ("GET", "/audit/events"),
    "execute_plan": ("POST", "/plans/execute"),
    "tools": ("GET", "/tools"),
    "call_tool": ("POST", "/tools/{name}"),  # the body is the model's arguments
    "archive_events": ("POST", "/admin/archive"),
}
#: Each operation's call with good arguments, made after what it needs exists.
GOOD: dict[str, Callable[[MemoryAPI], Callable[[], Any]]] = {
    "query": lambda m: lambda: m.query("Poi", {"city": "Rome"}, order_by=["-rating", "name"],
                                       limit=5),
    "count": lambda m: lambda: m.count("Poi", {"city": "Rome"}),
    "search": lambda m: lambda: m.search("Poi", "old bridge", where={"city": "Rome"}, k=3,
                                         mode="keyword"),
    "context": lambda m: lambda: m.context(query="old bridge", budget_tokens=200, k=2),
    "open_constraints": lambda m: lambda: m.open_constraints(limit=5),
    "create": lambda m: lambda: m.create("Poi", {"name": "Colosseum", "city": "Rome"}, ttl=60),
    "create_many": lambda m: lambda: m.create_many("Poi", [{"name": "Pantheon", "city": "Rome"}]),
    "update": lambda m: partial(m.update, m.query("Poi").items[0].id, {"rating": 5}),
    "add_messages": lambda m: lambda: m.add_messages("chat-1", [{"role": "user",
                                                               "content": "hello"}]),
    "summarize": lambda m: lambda: m.summarize("Poi", since_seq=0),
    "append": lambda m: partial(m.append, m.create("Trip", {"destination": "Rome"}).id, "tags",
                                ["art"]),
    "link": lambda m: partial(m.link, m.create("Trip", {"destination": "Rome"}).id, "includes",
                              m.query("Poi").items[0].id),
    "unlink": lambda m: partial(m.unlink, *_linked(m)),
    "get": lambda m: partial(m.get, m.query("Poi").items[0].id, as_of=m.last_seq()),
    "related": lambda m: partial(m.related, _linked(m)[0], "includes", "out", 1),
    "events": lambda m: lambda: m.events(since_seq=1, limit=5),
    "execute_plan": lambda m: lambda: m.execute_plan([{"op": "query", "type": "Poi"}],
                                                     dry_run=True),
    "tools": lambda m: lambda: m.tools("json_schema", profile="per_type"),
    "call_tool": lambda m: lambda: m.call_tool("query", {"type": "Poi", "limit": 2}),
    # (over HTTP a directory name under the server's; in process a path: a new one)
    "archive_events": lambda m: lambda: m.archive_events(
        1, "arch" if isinstance(m, MemoryClient) else Path(tempfile.mkdtemp()) / "arch"),
}
#: A bad argument of each operation that the model itself refuses, and the field it names.
BAD: dict[str, tuple[Callable[[MemoryAPI], Any], str]] = {
    "query": (lambda m: m.query("Poi", limit=0), "limit"),
    "count": (lambda m: m.count("Poi", [1]), "where"),  # type: ignore[arg-type]
    "search": (lambda m: m.search("Poi", "x", mode="fuzzy"), "mode"),
    "context": (lambda m: m.context(budget_tokens=1), "budget_tokens"),
    "open_constraints": (lambda m: m.open_constraints(cursor=5), "cursor"),  # type: ignore[arg-type]
    "create": (lambda m: m.create("Poi", {"name": "Forum", "city": "Rome"}, ttl=1,
                                  expires_at="2999-01-01T00:00:00Z"), "ttl"),
    "create_many": (lambda m: m.create_many("Poi", {"name": "Forum"}), "rows"),  # type: ignore[arg-type]
    "update": (lambda m: m.update(m.query("Poi").items[0].id, {}), "changes"),
    "append": (lambda m: m.append(m.query("Poi").items[0].id, "tags", []), "values"),
    "add_messages": (lambda m: m.add_messages("chat-1", []), "messages"),
    "summarize": (lambda m: m.summarize(since_seq=-1), "since_seq"),
    "link": (lambda m: m.link("Trip_x", 5, "Poi_y"), "relation"),  # type: ignore[arg-type]
    "unlink": (lambda m: m.unlink("Trip_x", "includes", "no such id"), "to_id"),
    "get": (lambda m: m.get("Poi_x", as_of=-1), "as_of"),
    "related": (lambda m: m.related("Trip_x", direction="sideways"), "direction"),
    "events": (lambda m: m.events(limit=0), "limit"),
    "execute_plan": (lambda m: m.execute_plan([], dry_run="yes"), "dry_run"),  # type: ignore[arg-type]
    "tools": (lambda m: m.tools("xml"), "format"),
    "call_tool": (lambda m: m.call_tool("", {}), "name"),
    "archive_events": (lambda m: m.archive_events(0, "arch"), "before_seq"),
}


def _linked(mem: MemoryAPI) -> tuple[str, str, str]:
    """A link made first (unlink's good arguments)."""
    trip = mem.create("Trip", {"destination": "Oslo"}).id
    poi = mem.query("Poi").items[0].id
    mem.link(trip, "includes", poi)
    return trip, "includes", poi


#: What every write takes besides its arguments (its audit headers; the version If-Match
#: carries) and what names the entity: checked by the shared checks, not a model.
NOT_ARGUMENTS = {"entity_id", "expected_version", "actor", "reason", "trace_id"}
#: The operations whose arguments are not a request model's, and why.
OWN_ARGUMENTS = {
    # a definition that is a model of its own (TypeDef, RuleDef), a pydantic class, a file
    "define": "a pydantic class", "define_type": "TypeDef", "define_rule": "RuleDef",
    "load_definitions": "a TOML file",
    "get_type": "a type name in the route's path",
    # a path in process, a directory name under the server's over HTTP
    "snapshot": "a destination", "export": "a destination",
}


def test_every_operation_with_arguments_has_a_model() -> None:
    """Walking the protocol: an operation that takes more than an entity ID and its audit
    headers has a request model (or is one of the few whose argument is a model or a path)."""
    for name, member in inspect.getmembers(MemoryAPI, inspect.isfunction):
        if name.startswith("_"):
            continue
        params = set(inspect.signature(member).parameters) - {"self"} - NOT_ARGUMENTS
        assert not params or name in REQUESTS or name in OWN_ARGUMENTS, (name, params)
        assert not (name in REQUESTS and name in OWN_ARGUMENTS), name


def test_every_operation_with_a_model_is_walked_here() -> None:
    assert set(REQUESTS) == set(ROUTES) == set(GOOD) == set(BAD)


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_the_model_states_the_operations_arguments(op: str) -> None:
    params = inspect.signature(getattr(MemoryAPI, op)).parameters
    for name, field in REQUESTS[op].model_fields.items():
        param = params[PARAMETER_OF.get((op, name), PARAMETER.get(name, name))]
        if param.default is not inspect.Parameter.empty:
            assert field.default == param.default, f"{op}.{name}: the defaults differ"


def test_each_route_parses_the_operations_model(tmp_path: Path) -> None:
    """A body route's body is the model; a GET route's query takes the model's fields, with
    its defaults (the memory behind it checks them with the model)."""
    app = create_app(Settings(data_dir=tmp_path / "d", embedder="hash", load_examples=False))
    paths = app.openapi()["paths"]
    for op, (method, path) in ROUTES.items():
        route = paths[path][method.lower()]
        if method == "GET":
            query = {p["name"]: p["schema"].get("default") for p in route["parameters"]
                     if p["in"] == "query"}
            assert query == {name: field.default
                             for name, field in REQUESTS[op].model_fields.items()}, op
            continue
        body = route["requestBody"]["content"]["application/json"]
        if op == "call_tool":  # the path names the tool, the body is the arguments
            field = REQUESTS[op].model_fields["arguments"]
            assert body["schema"]["description"] == field.description
            assert body["schema"]["type"] == "object"
            continue
        assert body["schema"]["$ref"] == f"#/components/schemas/{REQUESTS[op].__name__}", op


@pytest.fixture(params=["memory", "http"])
def door(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryAPI]:
    with open_door(request.param, tmp_path / "mem") as mem:
        mem.create("Poi", {"name": "Ponte Vecchio", "city": "Rome", "rating": 4})
        yield mem


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_each_door_checks_the_arguments_with_the_operations_model(
        op: str, door: MemoryAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[type[Request]] = []
    of = Request.of.__func__  # type: ignore[attr-defined]

    def spy(cls: type[Request], **arguments: Any) -> Any:
        used.append(cls)
        return of(cls, **arguments)

    call = GOOD[op](door)
    monkeypatch.setattr(requests_module.Request, "of", classmethod(spy))
    call()
    # in process the memory checks them first; over HTTP the client, then the server's
    # memory (what either does next, such as the queries of a context, comes after)
    first = 2 if isinstance(door, MemoryClient) else 1
    assert used[:first] == [REQUESTS[op]] * first


@pytest.mark.parametrize("op", sorted(REQUESTS))
def test_a_bad_argument_is_the_same_error_on_every_door(op: str, door: MemoryAPI) -> None:
    call, field = BAD[op]
    with pytest.raises(DMFError) as raised:
        call(door)
    assert raised.value.details.get("field") == field
    embedded = behind(door)
    with pytest.raises(type(raised.value)) as again:
        call(embedded)
    assert again.value.message == raised.value.message
    assert again.value.details.get("field") == field


def test_the_server_answers_a_bad_body_as_the_memory_raises_it(tmp_path: Path) -> None:
    """Past the client (a plain HTTP body), the route's model raises the memory's error."""
    with open_door("http", tmp_path / "mem") as client:
        assert isinstance(client, MemoryClient)
        with pytest.raises(DMFError) as raised:
            behind(client).search("Poi", "x", mode="fuzzy")
        answer = httpx.post(f"{client.base_url}/search",
                            json={"type": "Poi", "text": "x", "mode": "fuzzy"})
    assert answer.status_code == raised.value.status_code
    assert answer.json() == raised.value.to_payload()


@pytest.mark.parametrize("profile", PROFILES)
def test_each_tool_takes_its_operations_model_fields_with_their_defaults(
        profile: str, tmp_path: Path) -> None:
    """A tool of an operation with a model takes only that model's arguments (and what the
    route's path names: the type, the entity, the conversation; and the version If-Match
    carries), with its defaults."""
    outside = {"type", "id", "conversation", "expected_version"}
    with open_door("memory", tmp_path / "mem") as mem:
        tools = mem.tools("json_schema", profile=profile)
    checked = 0
    for tool in tools:
        op = "context" if tool["name"] == "context" else tool_operation(tool["name"])
        if op not in REQUESTS:
            continue
        fields = REQUESTS[op].model_fields
        props = tool["parameters"]["properties"]
        assert set(props) <= set(fields) | outside, tool["name"]
        for name, schema in props.items():
            # (a model default of None leaves the default to the operation, as turns does)
            if "default" in schema and name in fields and fields[name].default is not None:
                assert schema["default"] == fields[name].default, f"{tool['name']}.{name}"
        checked += 1
    assert checked >= 6


# ---------------------------------------------------------------- plans and tools

#: Per operation with a model: a plan step (tool call) with a bad argument, the direct call
#: with the same bad argument, and the argument the step names.
BAD_STEPS: dict[str, tuple[dict[str, Any], Callable[[MemoryAPI], Any], str]] = {
    "query": ({"type": "Poi", "limit": 0}, lambda m: m.query("Poi", limit=0), "limit"),
    "search": ({"type": "Poi", "text": "x", "mode": "fuzzy"},
               lambda m: m.search("Poi", "x", mode="fuzzy"), "mode"),
    "create": ({"type": "Poi", "data": {"name": "Forum", "city": "Rome"}, "ttl": -1},
               lambda m: m.create("Poi", {"name": "Forum", "city": "Rome"}, ttl=-1), "ttl"),
    "update": ({"id": "Poi_x", "data": [1]},
               lambda m: m.update("Poi_x", [1]), "data"),  # type: ignore[arg-type]
    "append": ({"id": "Poi_x", "field": "tags", "values": []},
               lambda m: m.append("Poi_x", "tags", []), "values"),
    "link": ({"from_id": "Trip_x", "relation": 5, "to_id": "Poi_y"},
             lambda m: m.link("Trip_x", 5, "Poi_y"), "relation"),  # type: ignore[arg-type]
    "unlink": ({"from_id": "Trip_x", "relation": "includes", "to_id": "no such id"},
               lambda m: m.unlink("Trip_x", "includes", "no such id"), "to_id"),
    "add_messages": ({"conversation": "chat-1", "messages": []},
                     lambda m: m.add_messages("chat-1", []), "messages"),
    "related": ({"id": "Trip_x", "depth": 9}, lambda m: m.related("Trip_x", depth=9), "depth"),
    "get": ({"id": "Poi_x", "as_of": 1.5}, lambda m: m.get("Poi_x", as_of=1.5), "as_of"),
}


def test_every_plan_operation_with_a_model_is_walked_here() -> None:
    assert set(BAD_STEPS) == {name for name, op in OPERATIONS.items()
                              if any(a.model is not None for a in op.args)}


@pytest.mark.parametrize("name", sorted(BAD_STEPS))
def test_a_plan_operation_takes_its_models_fields(name: str) -> None:
    """The plan's arguments are the model's fields (with its defaults), after what the route's
    path carries and before the version If-Match carries; each is checked by the model."""
    op = OPERATIONS[name]
    model = REQUESTS[name]
    modelled = [a for a in op.args if a.model is not None]
    assert {a.name for a in modelled} == set(model.model_fields)
    assert all(a.model is model and a.kind == MODEL for a in modelled)
    for arg in modelled:
        field = model.model_fields[arg.name]
        assert arg.default == (None if field.is_required() else field.default), arg.name
    assert {a.name for a in op.args if a.model is None} <= {"type", "id", "conversation",
                                                            "expected_version"}


@pytest.mark.parametrize("name", sorted(BAD_STEPS))
def test_a_plan_step_and_a_tool_call_refuse_a_bad_argument_as_the_method_does(
        name: str, door: MemoryAPI) -> None:
    step, call, field = BAD_STEPS[name]
    with pytest.raises(DMFError) as direct:
        call(door)
    expected = direct.value.message
    if name == "update":  # the method's parameter is changes, the plan's argument data
        expected = expected.replace("changes", "data", 1)
    before = door.last_seq()
    for run in (lambda: door.execute_plan([{"op": name, **step}]),
                lambda: door.call_tool(name, step)):
        with pytest.raises(PlanError) as refused:
            run()
        problem = refused.value.details["problems"][0]
        assert (problem["field"], problem["problem"]) == (field, expected)
    assert door.last_seq() == before


@pytest.mark.parametrize("profile", PROFILES)
def test_each_tool_argument_is_the_models_schema(profile: str, tmp_path: Path) -> None:
    """A tool's argument of an operation's model has the model's JSON Schema (its type,
    pattern, bounds, enum); a tool only adds to it (a type's names and fields, the settings'
    maximum, a description)."""
    keys = ("type", "anyOf", "pattern", "minimum", "exclusiveMinimum", "minItems", "maxItems",
            "minLength", "enum", "format")
    with open_door("memory", tmp_path / "mem") as mem:
        tools = mem.tools("json_schema", profile=profile)
    checked = 0
    for tool in tools:
        op = tool_operation(tool["name"])
        if op not in REQUESTS:
            continue
        model = model_args(op, *REQUESTS[op].model_fields)
        for name, schema in tool["parameters"]["properties"].items():
            typed = profile == "per_type" and name in ("where", "order_by")  # the type's own
            if name not in model or name == "type" or typed:
                continue
            if name == "order_by":  # the compact profile: any field name
                assert schema["anyOf"][1]["maxItems"] == MAX_ORDER_FIELDS
            for key in keys:
                if key in model[name]:
                    assert schema.get(key) == model[name][key], (tool["name"], name, key)
            checked += 1
    assert checked >= 20
