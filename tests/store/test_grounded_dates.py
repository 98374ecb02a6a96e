"""Grounded dates at write: the Message type's ``dates`` field follows its text and time
through both doors (created, recomputed on update, filterable, audited, shown by context),
and a type's ``dates`` section is checked."""

from __future__ import annotations

import pytest

from dmf_hybrid import MemoryAPI, SchemaError
from tests.store import assert_unchanged, both_doors

mem = both_doors()

SAID = "2023-05-08T13:56:00"  # a Monday


@pytest.fixture
def log(mem: MemoryAPI) -> MemoryAPI:
    """A fresh memory: the bundled Message type is defined by its first use."""
    return mem


def test_time_expressions_are_resolved_against_the_message_time(log: MemoryAPI) -> None:
    first, plain, undated = log.add_messages("c", [
        {"role": "user", "text": "I went to a support group yesterday.", "time": SAID},
        {"role": "user", "text": "It was powerful.", "time": SAID},
        {"role": "user", "text": "I went there yesterday."}])
    assert first.data.dates == {"from": "2023-05-07", "to": "2023-05-07", "found": [
        {"phrase": "yesterday", "start": "2023-05-07", "end": "2023-05-07"}]}
    assert plain.data.dates is None and undated.data.dates is None  # nothing / no time
    chinese = log.add_messages("c", [{"role": "user", "text": "我们上周去了长城，下个月去上海。",
                                      "time": SAID}])[0]
    assert chinese.data.dates["found"] == [
        {"phrase": "上周", "start": "2023-05-01", "end": "2023-05-07"},
        {"phrase": "下个月", "start": "2023-06-01", "end": "2023-06-30"}]
    assert (chinese.data.dates["from"], chinese.data.dates["to"]) == ("2023-05-01",
                                                                      "2023-06-30")


def test_dates_are_recomputed_when_text_or_time_change_and_audited(log: MemoryAPI) -> None:
    row = log.add_messages("c", [{"role": "user", "text": "See you next week.",
                                  "time": SAID}])[0]
    moved = log.update(row.id, {"time": "2023-06-01T09:00:00"})
    assert moved.data.dates["found"][0] == {"phrase": "next week", "start": "2023-06-05",
                                            "end": "2023-06-11"}
    reworded = log.update(row.id, {"text": "See you tomorrow."})
    assert reworded.data.dates["found"] == [{"phrase": "tomorrow", "start": "2023-06-02",
                                             "end": "2023-06-02"}]
    # a value given for the derived field is replaced by the one the text and time give
    forced = log.update(row.id, {"dates": {"from": "1999-01-01"}})
    assert forced.version == reworded.version and forced.data.dates == reworded.data.dates
    events = [e for e in log.events() if e.entity_id == row.id]
    assert [e.op for e in events] == ["create", "update", "update"]
    assert events[-1].before["data"]["dates"]["found"][0]["phrase"] == "next week"
    assert events[-1].after["data"]["dates"]["found"][0]["phrase"] == "tomorrow"


def test_grounded_dates_filter_exactly(log: MemoryAPI) -> None:
    log.add_messages("c", [
        {"role": "user", "text": "I ran a race last Saturday.", "time": SAID},
        {"role": "user", "text": "We go camping next month.", "time": SAID},
        {"role": "user", "text": "No date here.", "time": SAID}])
    in_may = log.query("Message", {"dates.from": {"$lte": "2023-05-31"},
                                   "dates.to": {"$gte": "2023-05-01"}}).items
    assert [m.data.text for m in in_may] == ["I ran a race last Saturday."]
    dated = log.query("Message", {"dates": {"$ne": None}}, order_by="turn").items
    assert [m.data.turn for m in dated] == [0, 1]


def test_context_shows_each_turn_with_its_resolved_dates(log: MemoryAPI) -> None:
    log.add_messages("c", [{"role": "user", "text": "I moved here two days ago.",
                            "time": SAID}])
    ctx = log.context(conversation="c")
    assert ctx.turns[0].dates == [{"phrase": "two days ago", "start": "2023-05-06",
                                   "end": "2023-05-06"}]
    assert '"I moved here two days ago." [two days ago = 2023-05-06]' in ctx.text


@pytest.mark.parametrize("dates, field", [
    ({"field": "missing", "text": "text", "time": "time"}, "dates.field"),
    ({"field": "text", "text": "text", "time": "time"}, "dates.field"),
    ({"field": "dates", "text": "turn", "time": "time"}, "dates.text"),
    ({"field": "dates", "text": "text", "time": "role"}, "dates.time"),
])
def test_a_bad_dates_section_is_a_schema_error_naming_it(mem: MemoryAPI, dates, field
                                                         ) -> None:
    definition = {"name": "Note", "fields": {"text": {"type": "str"}, "turn": {"type": "int"},
                                             "role": {"type": "str"},
                                             "time": {"type": "datetime"},
                                             "dates": {"type": "json"}},
                  "dates": dates}
    err = assert_unchanged(mem, lambda: mem.define_type(definition), SchemaError)
    assert err.value.field == field  # type: ignore[attr-defined]
