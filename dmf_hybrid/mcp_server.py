"""An MCP server on stdio exposing the memory tools: ``dmf mcp``.

Also ``python -m dmf_hybrid.mcp_server --data DIR``.

It lists ``mem.tools("json_schema")`` as MCP tools and runs a call with ``mem.call_tool``; a
call that fails (an invalid plan, an unknown ID, ...) comes back as a tool result with
``is_error`` set and the error's JSON body, so the model can read the problems and retry.
Works with any :class:`~dmf_hybrid.protocol.MemoryAPI`: a local ``Memory`` or a
``MemoryClient``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from .config import Settings
from .errors import DMFError, StoreLocked
from .memory import Memory
from .protocol import MemoryAPI
from .version import __version__

log = logging.getLogger(__name__)

SERVER_NAME = "dmf-hybrid"
INSTRUCTIONS = (
    "A deterministic memory: typed entities (create_<Type>, get, update, delete), relations "
    "(link, related), exact queries (query_<Type>), similarity search (search_<Type>) and "
    "atomic multi-step plans (execute_plan, where \"$0.id\" refers to step 0's result). "
    "Invalid calls change nothing and return the problems with hints."
)


def build_server(mem: MemoryAPI) -> Server[Any]:
    """An ``mcp`` low-level Server whose tools are the memory's tools."""

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        defs = await anyio.to_thread.run_sync(mem.tools, "json_schema")
        return types.ListToolsResult(tools=[
            types.Tool(name=d["name"], description=d["description"],
                       input_schema=d["parameters"]) for d in defs])

    async def call_tool(_ctx: Any, params: Any) -> Any:
        arguments = dict(params.arguments or {})
        try:
            result = await anyio.to_thread.run_sync(mem.call_tool, params.name, arguments)
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


async def run_stdio(mem: MemoryAPI) -> None:
    """Serve the memory's tools over this process's stdin/stdout until the client leaves."""
    server = build_server(mem)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(mem: MemoryAPI) -> None:
    """Blocking: serve over stdio (logs go to stderr; stdout carries the protocol)."""
    anyio.run(run_stdio, mem)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dmf_hybrid.mcp_server [--data DIR]``: serve a local memory over stdio."""
    parser = argparse.ArgumentParser(prog="python -m dmf_hybrid.mcp_server",
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
