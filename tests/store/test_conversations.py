"""The conversation log: ``add_messages`` through both doors (idempotent, audited, the same
errors), the store's group context (earlier vectors never change) and the bundled profile."""

from __future__ import annotations

from functools import partial

import pytest

from dmf_hybrid import Conflict, MemoryAPI, NotFound, SchemaError, ValidationError
from dmf_hybrid._internal.conversations import MAX_TURN
from tests.store import assert_unchanged, behind, both_doors

mem = both_doors()

CHAT = [{"role": "user", "content": "I adopted a cat named Miso last week."},
        {"role": "assistant", "content": "Congratulations! How is Miso settling in?"},
        {"role": "user", "content": "She sleeps on my keyboard all day."}]


@pytest.fixture
def log(mem: MemoryAPI) -> MemoryAPI:
    """A fresh memory: the bundled Message type is defined by its first use."""
    return mem


def hashes(mem: MemoryAPI) -> dict[int, str]:
    rows = behind(mem)._store.db.fetchall(
        'SELECT turn, text_hash FROM "ent_Message" ORDER BY turn')
    return {int(turn): str(h) for turn, h in rows}


def test_messages_append_in_order_with_the_preceding_turn_as_context(log: MemoryAPI) -> None:
    first = log.add_messages("chat-1", CHAT, actor="agent", reason="chat log")
    assert [e.data.turn for e in first] == [0, 1, 2] and all(e.created for e in first)
    assert [e.data.role for e in first] == ["user", "assistant", "user"]
    assert first[0].data.context == ""
    assert first[1].data.context == 'user said, "I adopted a cat named Miso last week."'
    assert first[2].data.context.startswith('assistant said, "Congratulations!')
    more = log.add_messages("chat-1", [{"speaker": "user", "text": "Also a dog."}])
    assert more[0].data.turn == 3
    assert more[0].data.context == 'user said, "She sleeps on my keyboard all day."'
    events = [e for e in log.events() if e.type == "Message" and e.op != "define"]
    assert [e.op for e in events] == ["create"] * 4
    assert (events[0].actor, events[0].reason) == ("agent", "chat log")


def test_appending_is_idempotent_and_never_changes_earlier_vectors(log: MemoryAPI) -> None:
    turns = [{**m, "turn": i} for i, m in enumerate(CHAT)]
    log.add_messages("chat-1", turns[:2])
    log.flush()
    before = hashes(log)
    store = behind(log)._store
    cached = store.db.fetchall("SELECT text_hash FROM embeddings ORDER BY text_hash")
    again = log.add_messages("chat-1", turns[:2])
    assert [e.created for e in again] == [False, False]
    log.add_messages("chat-1", turns[2:])
    log.flush()
    after = hashes(log)
    assert {t: after[t] for t in before} == before  # earlier rows' embedded texts unchanged
    assert all(e.version == 1 for e in log.query("Message", limit=10).items)
    now = store.db.fetchall("SELECT text_hash FROM embeddings ORDER BY text_hash")
    assert set(cached) <= set(now) and len(now) == len(cached) + 1  # only the new text embedded


def test_search_one_conversation_with_the_profile(log: MemoryAPI) -> None:
    log.add_messages("chat-1", CHAT)
    log.add_messages("chat-2", [{"role": "user", "content": "My cat Miso is grey."}])
    result = log.search("Message", "What is the name of the cat?", k=5,
                        where={"conversation": "chat-1"})
    assert result.hits and {h.entity.data.conversation for h in result.hits} == {"chat-1"}
    assert result.receipt.fusion == "rrf" and result.receipt.rrf_k == 20


BAD = [
    ("chat-1", "hello", "messages", ValidationError),
    ("chat-1", [], "messages", ValidationError),
    ("chat-1", ["hi"], "messages[0]", ValidationError),
    ("chat-1", [{"role": "user", "content": "hi", "mood": "ok"}], "messages[0].mood",
     ValidationError),
    ("chat-1", [{"content": "hi"}], "messages[0].role", ValidationError),
    ("chat-1", [{"role": "user", "text": "a", "content": "b"}], "messages[0].content",
     ValidationError),
    ("chat-1", [{"role": "user", "content": "  "}], "messages[0].content", ValidationError),
    ("chat-1", [{"role": "user", "content": "hi", "turn": -1}], "messages[0].turn",
     ValidationError),
    ("bad id!", [{"role": "user", "content": "hi"}], "conversation", ValidationError),
]


def test_bad_messages_are_refused_through_both_doors(log: MemoryAPI) -> None:
    log.add_messages("chat-1", CHAT[:1])
    for conversation, messages, field, error in BAD:
        info = assert_unchanged(log, partial(log.add_messages, conversation, messages), error)
        assert getattr(info.value, "field", None) == field, messages


def test_a_bad_row_value_or_a_missing_type_is_refused(mem: MemoryAPI) -> None:
    missing = assert_unchanged(mem, partial(mem.add_messages, "chat-1", CHAT,
                                            type_name="Chat"), NotFound)
    assert "define it first" in missing.value.message  # type: ignore[attr-defined]
    with pytest.raises(SchemaError) as info:
        mem.add_messages("chat-1", CHAT, type_name="Poi")
    assert info.value.field == "type_name"
    # before its first use: a bad call leaves no bundled type behind either
    bad = assert_unchanged(mem, lambda: mem.add_messages(
        "chat-1", [{"role": "user", "content": "hi", "session": "first"}]), ValidationError)
    assert "session" in (getattr(bad.value, "field", None) or "")
    assert "Message" not in [t.name for t in mem.types()]


def test_an_implicit_turn_follows_the_largest_stored_and_given_turn(log: MemoryAPI) -> None:
    """Re-sending turn 0 beside a new message: the new one is appended after turn 2 (it used to
    be numbered 1, met the stored turn 1, and was answered as existing without being stored)."""
    log.add_messages("chat-1", CHAT)
    out = log.add_messages("chat-1", [{**CHAT[0], "turn": 0},
                                      {"role": "assistant", "content": "new"}])
    assert [(e.data.turn, e.created) for e in out] == [(0, False), (3, True)]
    jump = log.add_messages("chat-1", [{"role": "user", "content": "later", "turn": 10},
                                       {"role": "assistant", "content": "after it"}])
    assert [e.data.turn for e in jump] == [10, 11]
    texts = {e.data.turn: e.data.text for e in log.query(
        "Message", {"conversation": "chat-1"}, order_by="turn", limit=20).items}
    assert texts == {0: CHAT[0]["content"], 1: CHAT[1]["content"], 2: CHAT[2]["content"],
                     3: "new", 10: "later", 11: "after it"}


def test_two_messages_of_a_call_with_one_turn_are_a_conflict_naming_both(
        log: MemoryAPI) -> None:
    log.add_messages("chat-1", CHAT[:1])
    info = assert_unchanged(log, partial(log.add_messages, "chat-1", [
        {"role": "user", "content": "a", "turn": 5},
        {"role": "user", "content": "b"},
        {"role": "user", "content": "c", "turn": 5}]), Conflict)
    assert "messages[0]" in info.value.message and "messages[2]" in info.value.message  # type: ignore[attr-defined]
    # an implicit turn that lands on a given one is the same conflict
    info = assert_unchanged(log, partial(log.add_messages, "chat-1", [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b", "turn": 1}]),
        Conflict)
    assert "turn 1" in info.value.message  # type: ignore[attr-defined]


def test_a_stored_turn_with_other_content_is_a_conflict_and_nothing_is_stored(
        log: MemoryAPI) -> None:
    log.add_messages("chat-1", CHAT)
    info = assert_unchanged(log, partial(log.add_messages, "chat-1", [
        {"role": "user", "content": "brand new"},
        {"role": "user", "content": "something else", "turn": 1}]), Conflict)
    assert "messages[1]" in info.value.message and "text" in info.value.message  # type: ignore[attr-defined]
    again = log.add_messages("chat-1", [{**CHAT[1], "turn": 1}])  # the same message: idempotent
    assert [(e.data.turn, e.created) for e in again] == [(1, False)]


def test_turn_numbers_have_an_upper_bound(log: MemoryAPI) -> None:
    log.add_messages("chat-1", CHAT[:1])
    for turn in (MAX_TURN + 1, 2**63 - 1):
        info = assert_unchanged(log, partial(log.add_messages, "chat-1", [
            {"role": "user", "content": "x", "turn": turn}]), ValidationError)
        assert info.value.field == "messages[0].turn"  # type: ignore[attr-defined]
    last = log.add_messages("chat-1", [{"role": "user", "content": "x", "turn": MAX_TURN}])
    assert last[0].data.turn == MAX_TURN
    info = assert_unchanged(log, partial(log.add_messages, "chat-1", [
        {"role": "user", "content": "one more"}]), ValidationError)
    assert info.value.field == "messages[0].turn"  # type: ignore[attr-defined]
    assert log.add_messages("chat-2", [{"role": "user", "content": "other chat"}])[0].data.turn == 0
