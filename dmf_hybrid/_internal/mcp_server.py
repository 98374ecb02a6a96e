"""An MCP server on stdio exposing the memory tools: ``dmf mcp``.

Also ``python -m dmf_hybrid._internal.mcp_server --data DIR``.

It lists the compact tool profile (``mem.tools("json_schema")``) plus ``list_types``,
``describe_type`` and ``define_type``, so an agent can start from an empty directory: define a
type, create, search across every searchable type. A call runs with ``mem.call_tool``; a call
that fails (an invalid plan, an unknown ID, ...) comes back as a tool result with ``is_error``
set and the error's JSON body, so the model can read the problems and retry. A local memory
loads its embedding model when the server starts (in the background; the time it took is
logged to stderr, and a call that needs it waits for it). Works with any
:class:`~dmf_hybrid._internal.protocol.MemoryAPI`: a local ``Memory`` or a ``MemoryClient``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from .config import Settings
from .errors import DMFError, StoreLocked, ValidationError
from .memory import Memory
from .protocol import MemoryAPI
from .version import __version__

log = logging.getLogger(__name__)

SERVER_NAME = "dmf-hybrid"
INSTRUCTIONS = (
    "A deterministic memory: typed entities (create, get, update, delete), relations "
    "(link, related), exact queries (query), similarity search (search, across every "
    "searchable type unless given a type) and atomic multi-step plans (execute_plan, where "
    "\"$0.id\" refers to step 0's result). list_types / describe_type show the types; "
    "define_type adds one. Invalid calls change nothing and return the problems with hints."
)
FIELD_KINDS = ["str", "int", "float", "bool", "date", "datetime", "enum", "list"]
TYPE_TOOLS: list[dict[str, Any]] = [
    {"name": "list_types", "description": "The entity types: name, identity, fields, "
     "relations, searchable. Returns {types: [...]}.",
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "describe_type", "description": "One entity type's full definition.",
     "parameters": {"type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"name": {"type": "string"}}}},
    {"name": "define_type", "description": (
        "Register an entity type (or a compatible new version of one). Example: {\"name\": "
        "\"Note\", \"identity\": [\"title\"], \"embed\": \"{title}: {body}\", \"fields\": "
        "{\"title\": {\"type\": \"str\", \"required\": true, \"nullable\": false}, \"body\": "
        "{\"type\": \"str\"}}}. The ID of an entity derives from its identity fields; embed "
        "(a template of fields) makes the type searchable."),
     "parameters": {"type": "object", "required": ["name", "fields"], "properties": {
         "name": {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]{0,63}$"},
         "description": {"type": "string"},
         "identity": {"type": "array", "items": {"type": "string"}},
         "embed": {"type": "string"},
         "fields": {"type": "object", "additionalProperties": {
             "type": "object", "properties": {
                 "type": {"type": "string", "enum": FIELD_KINDS},
                 "item": {"type": "string"}, "values": {"type": "array"},
                 "required": {"type": "boolean"}, "nullable": {"type": "boolean"},
                 "default": {}, "description": {"type": "string"}}}},
         "relations": {"type": "object", "additionalProperties": {
             "type": "object", "required": ["target"], "properties": {
                 "target": {"type": "string"},
                 "cardinality": {"type": "string", "enum": ["one", "many"]}}}}}}},
]


def _type_json(etype: Any) -> dict[str, Any]:
    td = etype.typedef
    return {"name": td.name, "version": etype.version, "description": td.description,
            "identity": list(td.identity or ()), "fields": list(td.fields),
            "relations": {r: s.target for r, s in td.relations.items()},
            "searchable": td.embed is not None}


def call_type_tool(mem: MemoryAPI, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run ``list_types``, ``describe_type`` or ``define_type``."""
    if name == "list_types":
        return {"types": [_type_json(t) for t in mem.types()]}
    if name == "describe_type":
        if not isinstance(arguments.get("name"), str):
            raise ValidationError("describe_type takes a type name", field="name")
        etype = mem.get_type(arguments["name"])
        return {**_type_json(etype), "definition": etype.typedef.model_dump(mode="json")}
    return _type_json(mem.define_type(arguments, reason="define_type tool"))


def start_model_load(mem: MemoryAPI, report: Callable[[str], None]) -> threading.Thread | None:
    """Load a local memory's embedding model in the background, reporting how long it took."""
    embedder = getattr(getattr(mem, "engine", None), "embedder", None)
    if embedder is None or getattr(embedder, "loaded", True):
        return None

    def load() -> None:
        start = time.perf_counter()
        report(f"dmf-hybrid: loading the embedding model {embedder.model_id} ...")
        try:
            embedder.embed(["warm-up"])
        except Exception as exc:  # the first call that needs it will fail with the reason
            report(f"dmf-hybrid: the embedding model did not load: {exc}")
            return
        report(f"dmf-hybrid: embedding model ready after {time.perf_counter() - start:.1f} s")

    thread = threading.Thread(target=load, name="dmf-model-load", daemon=True)
    thread.start()
    return thread


def build_server(mem: MemoryAPI, loading: threading.Thread | None = None) -> Server[Any]:
    """An ``mcp`` low-level Server whose tools are the memory's tools (compact profile) and
    the type tools; ``loading``: the model load that calls wait for."""
    type_tools = {t["name"] for t in TYPE_TOOLS}

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        defs = await anyio.to_thread.run_sync(mem.tools, "json_schema")
        return types.ListToolsResult(tools=[
            types.Tool(name=d["name"], description=d["description"],
                       input_schema=d["parameters"]) for d in [*defs, *TYPE_TOOLS]])

    def run(name: str, arguments: dict[str, Any]) -> Any:
        if name in type_tools:
            return call_type_tool(mem, name, arguments)
        if loading is not None:
            loading.join()
        return mem.call_tool(name, arguments)

    async def call_tool(_ctx: Any, params: Any) -> Any:
        arguments = dict(params.arguments or {})
        try:
            result = await anyio.to_thread.run_sync(run, params.name, arguments)
        except DMFError as exc:
            body = exc.to_payload()
            return types.CallToolResult(
                content=[types.TextContent(text=json.dumps(body, ensure_ascii=False,
                                                           default=str))],
                structured_content=body, is_error=True)
        structured = result if isinstance(result, dict) else {"result": result}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, ensure_ascii=False,
                                                       default=str))],
            structured_content=structured)

    return Server(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


async def run_stdio(mem: MemoryAPI) -> None:
    """Serve the memory's tools over this process's stdin/stdout until the client leaves."""
    server = build_server(mem, start_model_load(mem, _stderr))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(mem: MemoryAPI) -> None:
    """Blocking: serve over stdio (logs go to stderr; stdout carries the protocol)."""
    anyio.run(run_stdio, mem)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dmf_hybrid._internal.mcp_server [--data DIR]``: serve a local memory over stdio.
    """
    parser = argparse.ArgumentParser(prog="python -m dmf_hybrid._internal.mcp_server",
                                     description="Serve the dmf-hybrid memory tools over MCP "
                                                 "(stdio).")
    parser.add_argument("--data", help="Memory directory (default: DMF_DATA_DIR).")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    settings = Settings(data_dir=args.data) if args.data else Settings()
    try:
        mem = Memory.open(settings.data_dir, settings=settings)
    except StoreLocked as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        return 2
    with mem:
        serve_stdio(mem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
