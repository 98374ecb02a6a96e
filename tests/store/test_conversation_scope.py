"""A conversation's scope: ``search(..., conversation=id)`` and ``context(conversation=id,
turns=n)`` through both doors, their agent tools (both profiles, plans, MCP) and their errors,
which change nothing."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import httpx
from mcp import Client

from dmf_hybrid import Memory, MemoryAPI, MemoryClient, PlanError, SchemaError, ValidationError
from dmf_hybrid._internal.mcp_server import build_server
from tests.conftest import define_travel
from tests.store import assert_unchanged, both_doors

log = both_doors("log", define_travel)  # the bundled Message type: defined on first use

#: chat-1: eight timed turns about a cat (turn 5 is the assistant's); chat-2: one.
CHAT_1 = [{"role": "assistant" if i == 5 else "user",
           "content": f"turn {i}: my cat Miso did thing number {i}",
           "time": f"2024-05-01T10:0{i}:00Z"} for i in range(8)]
CHAT_2 = [{"role": "user", "content": "Our cat is grey and sleeps all day."}]
NO_FIELD = "Poi has no field 'conversation', so it cannot be scoped to a conversation"


def seed(mem: MemoryAPI) -> dict[str, list[str]]:
    """Both conversations; the message IDs of each, in turn order."""
    return {"chat-1": [e.id for e in mem.add_messages("chat-1", CHAT_1)],
            "chat-2": [e.id for e in mem.add_messages("chat-2", CHAT_2)]}


def hit_ids(result: Any) -> list[str]:
    return [h.entity.id for h in result.hits]


# ---------------------------------------------------------------- search


def test_search_is_scoped_by_a_filter_term_anded_with_where(log: MemoryAPI) -> None:
    ids = seed(log)
    everyone = log.search("Message", "cat", k=20)
    assert set(hit_ids(everyone)) == set(ids["chat-1"]) | set(ids["chat-2"])
    scoped = log.search("Message", "cat", k=20, conversation="chat-1")
    assert set(hit_ids(scoped)) == set(ids["chat-1"])
    # counted in DuckDB before any vector work: the scope is part of the filter
    assert scoped.receipt.candidates == 8 and scoped.receipt.plan == "exact"
    assert hit_ids(scoped) == hit_ids(log.search("Message", "cat", k=20,
                                                 where={"conversation": "chat-1"}))
    both = log.search("Message", "cat", k=20, conversation="chat-1",
                      where={"role": "assistant"})
    assert hit_ids(both) == [ids["chat-1"][5]] and both.receipt.candidates == 1
    assert log.search("Message", "cat", conversation="chat-2", where={"role": "assistant"}
                      ).hits == []
    unknown = log.search("Message", "cat", conversation="nobody")
    assert unknown.hits == [] and unknown.receipt.candidates == 0
    at = scoped.receipt.resolved_at_seq
    log.add_messages("chat-1", [{"role": "user", "content": "one more cat story"}])
    past = log.search("Message", "cat", k=20, conversation="chat-1", as_of=at)
    assert hit_ids(past) == hit_ids(scoped) and past.receipt.candidates == 8
    assert len(log.search("Message", "cat", k=20, conversation="chat-1").hits) == 9


def test_bad_conversation_scopes_are_refused_and_change_nothing(log: MemoryAPI) -> None:
    seed(log)
    for conversation in ("bad id!", "", 5, ["chat-1"]):
        info = assert_unchanged(log, partial(log.search, "Message", "cat",
                                             conversation=conversation), ValidationError)
        assert info.value.field == "conversation", conversation  # type: ignore[attr-defined]
    info = assert_unchanged(log, partial(log.search, "Poi", "cat", conversation="chat-1"),
                            SchemaError)
    assert info.value.field == "conversation"  # type: ignore[attr-defined]
    assert info.value.message == NO_FIELD  # type: ignore[attr-defined]


# ---------------------------------------------------------------- context


def test_context_shows_the_last_turns_oldest_first(log: MemoryAPI) -> None:
    ids = seed(log)
    ctx = log.context(conversation="chat-1")
    assert [t.turn for t in ctx.turns] == [2, 3, 4, 5, 6, 7]  # six by default
    assert [t.id for t in ctx.turns] == ids["chat-1"][2:]
    assert ctx.turns[3].role == "assistant" and ctx.turns[0].time is not None
    section = ctx.text.split("## Conversation chat-1\n")[1].splitlines()
    assert section[0] == (f"- {ids['chat-1'][2]} turn 2 (2024-05-01T10:02:00+00:00) user: "
                          '"turn 2: my cat Miso did thing number 2"')
    assert section[3].startswith(f"- {ids['chat-1'][5]} turn 5 (2024-05-01T10:05:00+00:00) "
                                 "assistant: ")
    assert set(ids["chat-1"][2:]) <= set(ctx.ids)
    assert log.context(conversation="chat-1") == ctx  # the same text for the same state
    two = log.context(conversation="chat-1", turns=2)
    assert [t.turn for t in two.turns] == [6, 7]
    untimed = log.context(conversation="chat-2").text
    assert f"- {ids['chat-2'][0]} turn 0 user: " in untimed
    unknown = log.context(conversation="nobody")
    assert unknown.turns == [] and "## Conversation" not in unknown.text
    assert log.context().turns == [] and "## Conversation" not in log.context().text
    at = log.last_seq()
    later = log.add_messages("chat-1", [{"role": "user", "content": "and one more"}])
    assert log.context(conversation="chat-1", turns=1).turns[0].id == later[0].id
    assert log.context(conversation="chat-1", as_of=at).turns == ctx.turns


def test_context_drops_the_oldest_turns_first_for_the_budget(log: MemoryAPI) -> None:
    seed(log)
    ctx = log.context(conversation="chat-1", turns=8, budget_tokens=120)
    kept = [t.turn for t in ctx.turns]
    assert 0 < len(kept) < 8 and kept == list(range(8 - len(kept), 8))
    assert ctx.truncated and ctx.omitted >= 8 - len(kept) and ctx.tokens <= 120
    assert ctx.text.endswith(f"({ctx.omitted} more items left out for the token budget)\n")
    assert ctx.text.count(" turn ") == len(kept)


def test_context_scopes_the_query_to_the_conversation(log: MemoryAPI) -> None:
    ids = seed(log)
    everyone = log.context(query="cat", k=10)
    assert {h.id for h in everyone.hits if h.type == "Message"} & set(ids["chat-1"])
    scoped = log.context(query="cat", k=10, conversation="chat-2", turns=1)
    assert [h.id for h in scoped.hits if h.type == "Message"] == ids["chat-2"]
    assert [t.id for t in scoped.turns] == ids["chat-2"]


BAD_CONTEXT = [
    ({"conversation": "chat-1", "turns": 0}, "turns"),
    ({"conversation": "chat-1", "turns": 51}, "turns"),
    ({"conversation": "chat-1", "turns": True}, "turns"),
    ({"conversation": "chat-1", "turns": "3"}, "turns"),
    ({"turns": 3}, "turns"),
    ({"conversation": "bad id!"}, "conversation"),
    ({"conversation": 7, "turns": 2}, "conversation"),
]


def test_bad_context_arguments_are_refused_and_change_nothing(log: MemoryAPI) -> None:
    seed(log)
    messages = set()
    for kwargs, field in BAD_CONTEXT:
        info = assert_unchanged(log, partial(log.context, **kwargs), ValidationError)
        assert info.value.field == field, kwargs  # type: ignore[attr-defined]
        messages.add(info.value.message)  # type: ignore[attr-defined]
    assert "turns must be an integer from 1 to 50" in messages
    assert "turns needs a conversation" in messages
    if isinstance(log, MemoryClient):  # the route itself names the field too
        for body in ({"conversation": "chat-1", "turns": 0}, {"turns": 2}):
            answer = httpx.post(f"{log.base_url}/context", json=body)
            assert answer.status_code == 422 and answer.json()["details"]["field"] == "turns"
        answer = httpx.post(f"{log.base_url}/search", json={
            "type": "Poi", "text": "cat", "conversation": "chat-1"})
        assert answer.status_code == 422 and answer.json()["message"] == NO_FIELD


def define_travel_and_a_bare_log(door: MemoryAPI) -> None:
    define_travel(door)
    door.define_type({"name": "Message", "fields": {"conversation": {"type": "str"},
                                                   "turn": {"type": "int"}}})


bare = both_doors("bare", define_travel_and_a_bare_log)


def test_a_message_type_that_is_not_a_log_is_a_clear_error(bare: MemoryAPI) -> None:
    bare.create("Message", {"conversation": "chat-1", "turn": 0})
    for call in (partial(bare.context, conversation="chat-1"),
                 partial(bare.add_messages, "chat-1", CHAT_2)):
        info = assert_unchanged(bare, call, SchemaError)
        assert info.value.message == "Message is not a conversation log: no field 'role'"


# ---------------------------------------------------------------- agent tools


def test_the_tools_take_the_scope_in_both_profiles(log: MemoryAPI) -> None:
    ids = seed(log)
    compact = {t["function"]["name"]: t["function"] for t in log.tools()}
    assert "conversation" in compact["search"]["parameters"]["properties"]
    assert {"conversation", "turns"} <= set(compact["context"]["parameters"]["properties"])
    per_type = {t["name"]: t for t in log.tools("json_schema", profile="per_type")}
    assert "conversation" in per_type["search_Message"]["parameters"]["properties"]
    assert "conversation" not in per_type["search_Poi"]["parameters"]["properties"]
    for name, args in (("search", {"type": "Message"}), ("search_Message", {}),
                       ("search", {})):
        out: Any = log.call_tool(name, {**args, "text": "cat", "k": 20,
                                        "conversation": "chat-2"})
        assert [h["entity"]["id"] for h in out["hits"]] == ids["chat-2"], name
    plan = log.execute_plan([{"op": "search", "type": "Message", "text": "cat", "k": 20,
                              "conversation": "chat-1"}])
    assert {h["entity"]["id"] for h in plan.results[0]["hits"]} == set(ids["chat-1"])
    ctx: Any = log.call_tool("context", {"conversation": "chat-1", "turns": 2})
    assert ctx["text"] == log.context(conversation="chat-1", turns=2).text


def test_bad_tool_calls_are_refused_and_change_nothing(log: MemoryAPI) -> None:
    seed(log)
    for name, args in (("search", {"type": "Poi"}), ("search_Poi", {}),
                       ("search", {"type": "Message", "conversation": "bad id!"})):
        call = partial(log.call_tool, name, {"text": "cat", "conversation": "chat-1", **args})
        info = assert_unchanged(log, call, PlanError)
        problems = info.value.details["problems"]  # type: ignore[attr-defined]
        assert [p["field"] for p in problems] == ["conversation"], name
    info = assert_unchanged(log, partial(log.call_tool, "context", {"turns": 2}),
                            ValidationError)
    assert info.value.field == "turns"  # type: ignore[attr-defined]


def test_the_tools_offer_the_log_before_its_first_message(memory: Memory) -> None:
    tools = {t["name"]: t for t in memory.tools("json_schema")}
    assert "add_messages" in tools and "turns" in tools["context"]["parameters"]["properties"]
    # no searchable type has a conversation field yet, and no conversation has a message
    assert "conversation" not in tools["search"]["parameters"]["properties"]
    assert memory.call_tool("search", {"text": "cat", "conversation": "chat-1"}) == {
        "hits": [], "types": []}
    memory.call_tool("add_messages", {"conversation": "chat-1", "messages": CHAT_2})
    tools = {t["name"]: t for t in memory.tools("json_schema")}
    assert "conversation" in tools["search"]["parameters"]["properties"]
    out: Any = memory.call_tool("search", {"text": "cat", "conversation": "chat-1"})
    assert out["types"] == ["Message"] and len(out["hits"]) == 1


def test_mcp_serves_the_scoped_tools(memory: Memory) -> None:
    ids = seed(memory)

    async def main() -> tuple[Any, Any]:
        with anyio.fail_after(60):
            async with Client(build_server(memory)) as client:
                found = await client.call_tool("search", {"text": "cat",
                                                          "conversation": "chat-2"})
                ctx = await client.call_tool("context", {"conversation": "chat-1",
                                                         "turns": 3})
                return found, ctx

    found, ctx = anyio.run(main)
    assert [h["entity"]["id"] for h in found.structured_content["hits"]] == ids["chat-2"]
    assert ctx.structured_content["text"] == memory.context(conversation="chat-1",
                                                            turns=3).text
