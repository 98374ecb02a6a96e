"""The profile's steps after fusion (dmf_hybrid._internal.search.rerank): a query's time phrases
read against ``reference_time`` (validated through both doors, named in the receipt), the time and
named boosts, session scoring and the session diversity step (deterministic)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from dmf_hybrid import DMFError, MemoryAPI, SchemaError, ValidationError
from dmf_hybrid._internal.search.rerank import _spread
from tests.store import assert_unchanged, both_doors

mem = both_doors()

PROFILE: dict[str, Any] = {"fusion": "rrf", "rrf_k": 20,
                           "time": {"window": 1.0, "when": 0.5},
                           "named": {"field": "who", "weight": 0.3}}


def turn_type(search: dict[str, Any] | None = None, dates: bool = True) -> dict[str, Any]:
    return {"name": "Turn", "identity": ["chat", "n"], "embed": "{who}: {text}",
            "fields": {"chat": {"type": "str", "required": True},
                       "session": {"type": "int", "default": 0},
                       "n": {"type": "int", "required": True},
                       "who": {"type": "str"}, "text": {"type": "str"},
                       "at": {"type": "datetime"}, "dates": {"type": "json"}},
            **({"dates": {"field": "dates", "text": "text", "time": "at"}} if dates else {}),
            "search": PROFILE if search is None else search}


def ids(result: Any) -> list[str]:
    return [h.entity.data.text for h in result.hits]


@pytest.fixture
def turns(mem: MemoryAPI) -> MemoryAPI:
    mem.define_type(turn_type())
    mem.create_many("Turn", [
        {"chat": "c", "n": 0, "who": "Ana", "text": "We went hiking in the hills.",
         "at": "2023-05-20T10:00:00"},
        {"chat": "c", "n": 1, "who": "Bo", "text": "We went hiking in the hills.",
         "at": "2023-07-20T10:00:00"},
        {"chat": "c", "n": 2, "who": "Bo", "text": "I baked bread yesterday.",
         "at": "2023-07-21T10:00:00"},
        {"chat": "c", "n": 3, "who": "Ana", "text": "I baked bread too.",
         "at": "2023-07-21T10:00:00"}])
    return mem


def test_reference_time_is_validated_through_both_doors(turns: MemoryAPI) -> None:
    for bad in ("last tuesday", "2023-13-01", 17, ["2023-01-01"]):
        err = assert_unchanged(turns, lambda b=bad: turns.search(
            "Turn", "hiking", reference_time=b), ValidationError)
        assert err.value.field == "reference_time"  # type: ignore[attr-defined]


def test_the_receipt_says_which_phrase_was_read_as_which_window(turns: MemoryAPI) -> None:
    r = turns.search("Turn", "What did we do last week?", reference_time="2023-07-26")
    assert r.receipt.time_windows == [{"phrase": "last week", "start": "2023-07-17",
                                       "end": "2023-07-23"}]
    assert r.receipt.reference_time == dt.datetime(2023, 7, 26, tzinfo=dt.UTC)
    assert not r.receipt.asks_when
    chinese = turns.search("Turn", "我们去年五月做了什么", reference_time=dt.date(2024, 1, 2))
    assert chinese.receipt.time_windows == [{"phrase": "去年五月", "start": "2023-05-01",
                                             "end": "2023-05-31"}]
    untimed = turns.search("Turn", "When did we go hiking?")
    assert untimed.receipt.asks_when and untimed.receipt.time_windows == []
    assert untimed.receipt.reference_time is None  # no phrase: nothing read against a time
    now = turns.search("Turn", "hiking yesterday")
    assert now.receipt.reference_time is not None
    assert abs(now.receipt.reference_time - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)
    assert now.receipt.time_windows[0]["phrase"] == "yesterday"


def test_a_time_window_boosts_rows_in_it_and_never_filters(turns: MemoryAPI) -> None:
    may = turns.search("Turn", "hiking in May", reference_time="2023-10-01", k=4)
    july = turns.search("Turn", "hiking in July", reference_time="2023-10-01", k=4)
    first = [h.entity.data.at.month for h in may.hits[:2]]
    assert first == [5, 7] and [h.entity.data.at.month for h in july.hits[:2]] == [7, 5]
    assert len(may.hits) == 4  # rows outside the window are still there
    # an explicit filter on the time field stays exact
    only = turns.search("Turn", "hiking in May", reference_time="2023-10-01",
                        where={"at": {"$gte": "2023-07-01T00:00:00"}})
    assert all(h.entity.data.at.month == 7 for h in only.hits) and only.hits


def test_when_questions_prefer_rows_with_grounded_dates(turns: MemoryAPI) -> None:
    r = turns.search("Turn", "When did they bake bread?", k=2)
    assert ids(r)[0] == "I baked bread yesterday."
    plain = turns.search("Turn", "they bake bread", k=2)
    assert not plain.receipt.asks_when


def test_a_named_speaker_lifts_their_own_rows(turns: MemoryAPI) -> None:
    ana = turns.search("Turn", "Where did Ana go hiking?", k=2)
    bo = turns.search("Turn", "Where did Bo go hiking?", k=2)
    assert ana.hits[0].entity.data.who == "Ana" and bo.hits[0].entity.data.who == "Bo"


def test_results_are_identical_across_calls(turns: MemoryAPI) -> None:
    args = {"reference_time": "2023-10-01", "k": 4}
    first = turns.search("Turn", "When did Bo go hiking last summer?", **args)
    again = turns.search("Turn", "When did Bo go hiking last summer?", **args)
    assert [(h.entity.id, h.score) for h in first.hits] == [
        (h.entity.id, h.score) for h in again.hits]


def test_session_diversity_spreads_the_top_deterministically() -> None:
    scores = {"a1": 1.0, "a2": 0.9, "a3": 0.8, "b1": 0.7, "c1": 0.5}
    group = {e: (e[0],) for e in scores}
    assert [e for e, _ in _spread(scores, group, 0.0)] == ["a1", "a2", "a3", "b1", "c1"]
    picked = _spread(scores, group, 0.5)
    assert [e for e, _ in picked] == ["a1", "b1", "c1", "a2", "a3"]
    values = [s for _, s in picked]
    assert values == sorted(values, reverse=True)  # picked scores never rise
    tied = _spread({"x2": 1.0, "x1": 1.0, "y": 1.0}, {"x2": ("x",), "x1": ("x",),
                                                      "y": ("y",)}, 0.5)
    assert [e for e, _ in tied] == ["x1", "y", "x2"]  # ties: entity ID


def test_sessions_lift_the_turns_of_a_matching_session(mem: MemoryAPI) -> None:
    profile = {"fusion": "rrf", "rrf_k": 20,
               "sessions": {"group": ["chat", "session"], "weight": 1.0}}
    mem.define_type(turn_type(profile, dates=False))
    mem.create_many("Turn", [
        {"chat": "c", "session": 1, "n": 0, "who": "Ana", "text": "the lighthouse trip"},
        {"chat": "c", "session": 1, "n": 1, "who": "Ana", "text": "windy cliffs"},
        {"chat": "c", "session": 2, "n": 2, "who": "Bo", "text": "windy cliffs again"}])
    hits = mem.search("Turn", "lighthouse windy cliffs", k=3).hits
    assert hits[0].entity.data.session == 1 and hits[1].entity.data.session == 1


@pytest.mark.parametrize("search, field", [
    ({"sessions": {"group": ["room"]}}, "search.sessions.group"),
    ({"sessions": {"group": ["chat"], "weight": -1}}, "search.sessions.weight"),
    ({"sessions": {"group": ["chat"], "diversity": 1.0}}, "search.sessions.diversity"),
    ({"time": {"window": -0.5}}, "search.time.window"),
    ({"named": {"field": "n", "weight": 1}}, "search.named.field"),
    ({"named": {"field": "who", "weight": -1}}, "search.named.weight"),
])
def test_a_bad_step_is_a_schema_error_naming_it(mem: MemoryAPI, search, field) -> None:
    err = assert_unchanged(mem, lambda: mem.define_type(turn_type(search)), SchemaError)
    assert err.value.field == field  # type: ignore[attr-defined]


def test_a_time_boost_needs_grounded_dates(mem: MemoryAPI) -> None:
    err = assert_unchanged(mem, lambda: mem.define_type(
        turn_type({"time": {"window": 1.0}}, dates=False)), SchemaError)
    assert err.value.field == "search.time"  # type: ignore[attr-defined]


def test_the_message_profile_reads_time_sessions_and_speakers(mem: MemoryAPI) -> None:
    message = mem.get_type("Message")  # bundled: defined on first use
    profile = message.typedef.search
    assert profile is not None and profile.time is not None and profile.sessions is not None
    assert profile.named is not None and profile.named.field == "role"


def test_the_search_tools_take_a_reference_time(turns: MemoryAPI) -> None:
    typed = turns.call_tool("search_Turn", {"text": "hiking last week",
                                            "reference_time": "2023-07-26"})
    generic = turns.call_tool("search", {"type": "Turn", "text": "hiking last week",
                                         "reference_time": "2023-07-26"})
    for result in (typed, generic):
        assert isinstance(result, dict)
        assert result["receipt"]["time_windows"] == [
            {"phrase": "last week", "start": "2023-07-17", "end": "2023-07-23"}]
    with pytest.raises(DMFError) as err:
        turns.call_tool("search", {"type": "Turn", "text": "x", "reference_time": "soon"})
    assert "reference_time" in str(err.value)
