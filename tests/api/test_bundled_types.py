"""The bundled types (``dmf_hybrid/_internal/bundled.toml``) on a memory with nothing defined: the
conversation log works at once through every door (Python, HTTP, the tool, MCP), in any
tenant; a log type of one's own is kept and ``context`` works with it; an unknown type's error
says how to define one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from dmf_hybrid import HashEmbedder, Memory, MemoryAPI, MemoryClient, NotFound, Settings
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.api.server import serve_in_thread
from dmf_hybrid._internal.bundled import BUNDLED_ACTOR, bundled_types
from dmf_hybrid._internal.mcp_server import build_server
from dmf_hybrid._internal.schema import load_toml
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.conftest import INDEXES

KEYS = "key-a:default:admin,key-b:other:admin"
TIMEOUT = 10.0
CHAT = [{"role": "user", "content": "My blue shirt has not arrived yet."},
        {"role": "assistant", "content": "Let me check the order."},
        {"role": "user", "content": "我的蓝色衬衫到哪了"}]


@dataclass
class Door:
    """One front door onto a fresh ``Memory.open(None)``: tenant "default" and "other"."""

    kind: str
    mem: MemoryAPI
    other: MemoryAPI
    memory: Memory
    base_url: str | None = None


@pytest.fixture(params=["memory", "http"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Door]:
    """A memory with no type defined, embedded or behind a fresh uvicorn server."""
    memory = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        if request.param == "memory":
            yield Door("memory", memory, memory.for_tenant("other"), memory)
            return
        settings = Settings(data_dir=tmp_path / "srv", embedder="hash", api_keys=KEYS)
        with serve_in_thread(create_app(settings, memory), timeout=TIMEOUT) as url, \
                MemoryClient(url, api_key="key-a", timeout=TIMEOUT) as a, \
                MemoryClient(url, api_key="key-b", timeout=TIMEOUT) as b:
            yield Door("http", a, b, memory, url)
    finally:
        memory.close()


def test_nothing_is_defined_before_the_first_use(fresh: Door) -> None:
    assert fresh.mem.types() == [] and fresh.memory.last_seq() == 0


def test_the_conversation_log_works_on_a_fresh_memory(fresh: Door) -> None:
    added = fresh.mem.add_messages("c1", CHAT, actor="agent")
    assert [m.data.turn for m in added] == [0, 1, 2]
    hits = fresh.mem.search("Message", "blue shirt", conversation="c1").hits
    assert hits and {h.entity.data.conversation for h in hits} == {"c1"}
    ctx = fresh.mem.context(conversation="c1", turns=2)
    assert [t.turn for t in ctx.turns] == [1, 2] and "我的蓝色衬衫到哪了" in ctx.text
    defined = [e for e in fresh.memory.events() if e.op == "define"]
    assert [(e.type, e.actor) for e in defined] == [("Message", BUNDLED_ACTOR)]
    assert fresh.mem.get_type("Message").typedef == bundled_types()["Message"]


def test_every_tenant_has_the_log(fresh: Door) -> None:
    fresh.other.add_messages("c1", CHAT[:1])
    fresh.mem.add_messages("c1", CHAT)
    assert len(fresh.other.query("Message").items) == 1
    assert len(fresh.mem.query("Message").items) == 3
    assert [t.turn for t in fresh.other.context(conversation="c1").turns] == [0]


def test_the_tool_door_and_the_work_queue_need_no_definitions(fresh: Door) -> None:
    out: Any = fresh.mem.call_tool("add_messages", {"conversation": "c9", "messages": CHAT})
    assert [m["data"]["turn"] for m in out] == [0, 1, 2]
    assert fresh.mem.open_constraints().items == []


@pytest.mark.parametrize("fresh", ["http"], indirect=True)
def test_the_http_routes_need_no_definitions(fresh: Door) -> None:
    assert fresh.base_url is not None
    with httpx.Client(base_url=fresh.base_url, timeout=TIMEOUT,
                      headers={"Authorization": "Bearer key-b"}) as raw:
        answer = raw.post("/conversations/c1/messages", json={"messages": CHAT})
        assert answer.status_code == 201 and len(answer.json()) == 3
        found = raw.post("/search", json={"type": "Message", "text": "衬衫",
                                          "conversation": "c1"})
        assert found.status_code == 200 and found.json()["hits"]
        ctx = raw.post("/context", json={"conversation": "c1", "turns": 3})
        assert ctx.status_code == 200 and len(ctx.json()["turns"]) == 3


def test_mcp_needs_no_definitions() -> None:
    with Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex()) as memory:
        async def main() -> Any:
            with anyio.fail_after(60):
                async with Client(build_server(memory)) as client:
                    await client.call_tool("add_messages", {"conversation": "c1",
                                                            "messages": CHAT})
                    return await client.call_tool("context", {"conversation": "c1"})

        ctx = anyio.run(main)
        assert "我的蓝色衬衫到哪了" in ctx.structured_content["text"]
        assert len(memory.query("Message").items) == 3


def test_a_log_type_of_ones_own_is_kept_and_has_a_context(fresh: Door) -> None:
    # no time field: context must not need one
    fresh.mem.define_type({"name": "Message", "embed": "{role}: {text}", "identity":
                           ["conversation", "turn"],
                           "fields": {"conversation": {"type": "str"}, "turn": {"type": "int"},
                                      "role": {"type": "str"}, "text": {"type": "str"}}})
    fresh.mem.add_messages("c1", CHAT)
    assert "time" not in fresh.mem.get_type("Message").fields  # still one's own
    assert fresh.mem.search("Message", "shirt", conversation="c1").hits
    ctx = fresh.mem.context(conversation="c1", turns=3, query="shirt")
    assert [t.time for t in ctx.turns] == [None, None, None] and "衬衫" in ctx.text


def test_an_unknown_type_says_how_to_define_one(fresh: Door) -> None:
    before = fresh.memory.last_seq()
    for call in (lambda: fresh.mem.create("Order", {"item": "blue shirt"}),
                 lambda: fresh.mem.query("Order"),
                 lambda: fresh.mem.add_messages("c1", CHAT, type_name="Chat")):
        with pytest.raises(NotFound) as info:
            call()
        assert "define it first" in info.value.message and "POST /types" in info.value.message
        assert info.value.details["field"] == "type"
    assert fresh.memory.last_seq() == before


def test_example_domains_declare_the_bundled_types_as_bundled() -> None:
    bundled = bundled_types()
    assert set(bundled) == {"Message", "Constraint", "MemorySummary"}
    for path in sorted(INDEXES.glob("*.toml")):
        for typedef in load_toml(path):
            if typedef.name in bundled:
                assert typedef == bundled[typedef.name], f"{path.name}: {typedef.name}"
