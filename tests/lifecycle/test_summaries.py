"""Deterministic summaries: templated from the log, re-derivable, idempotent, searchable."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from dmf_hybrid import HashEmbedder, Memory, NotFound, ValidationError
from dmf_hybrid._internal.bundled import bundled_type
from dmf_hybrid._internal.ids import content_hash
from dmf_hybrid._internal.lifecycle.summaries import check_summary
from dmf_hybrid._internal.schema import load_toml
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.lifecycle import TRAVEL, open_travel, poi, trip


class Note(BaseModel):
    """A free-text note."""

    text: str


@pytest.fixture
def travel(tmp_path: Path) -> Iterator[Memory]:
    mem = open_travel(tmp_path / "mem")
    yield mem
    mem.close()


def test_summary_of_a_trip(travel: Memory) -> None:
    seq0 = travel.last_seq()
    t = trip(travel, budget=5000)
    a, b = poi(travel, "Tower", 100), poi(travel, "Museum", 50)
    travel.link(t.id, "includes", a.id)
    travel.link(t.id, "includes", b.id)
    travel.update(t.id, {"budget": 5500})
    result = travel.summarize(t.id, since_seq=seq0)
    assert not result.empty and result.summary is not None
    assert result.text == (
        f"Trip {t.id}: created (user=\"ann\", destination=\"Shanghai\", "
        "start_date=\"2024-05-01\", budget=5000.0, currency=\"CNY\", status=\"planned\"); "
        f"includes +2 PointOfInterest ({a.id}, {b.id}); budget 5000.0 → 5500.0")
    events = [e for e in travel.events(seq0, result.until_seq)
              if t.id in (e.entity_id, (e.meta or {}).get("to"))]
    fields = result.summary.fields()
    assert (fields["first_seq"], fields["last_seq"], fields["event_count"]) == (
        events[0].seq, events[-1].seq, len(events))
    assert fields["events_hash"] == content_hash([e.hash for e in events])
    assert fields["entity_ids"] == sorted([t.id, a.id, b.id])
    covered = {r.entity.id for r in travel.related(result.summary.id, "covers")}
    assert covered == {t.id, a.id, b.id}
    assert check_summary(travel, result.summary.id) == {
        "ok": True, "events_hash_ok": True, "text_ok": True, "event_count": len(events)}


def test_same_events_same_summary(travel: Memory) -> None:
    trip(travel)
    first = travel.summarize()
    seq = travel.last_seq()
    again = travel.summarize()  # the summary's own events are left out: same window content
    assert first.summary is not None and again.summary is not None
    assert again.summary.id == first.summary.id and not again.summary.created
    assert travel.last_seq() == seq


def test_whole_log_and_type_scopes(travel: Memory) -> None:
    t = trip(travel, budget=10)
    p = poi(travel, "Tower", 60)
    travel.link(t.id, "includes", p.id)  # raises a budget constraint
    everything = travel.summarize()
    assert "rule trip_over_budget v1 raised" in everything.text
    assert {t.id, p.id} <= set(everything.entity_ids)
    only_pois = travel.summarize("PointOfInterest")
    assert only_pois.text.splitlines() == [
        f"PointOfInterest {p.id}: created (name=\"Tower\", city=\"Shanghai\", "
        "category=\"other\", estimated_cost=60.0)"]


def test_empty_window_is_an_explicit_empty_result(travel: Memory) -> None:
    trip(travel)
    seq = travel.last_seq()
    result = travel.summarize(since_seq=seq)
    assert result.empty and result.summary is None and result.event_count == 0
    assert result.text == f"no events in scope * with {seq} < seq <= {seq}"
    assert travel.last_seq() == seq
    assert travel.summarize("PointOfInterest").empty


def test_summariser_plugin_adds_prose(travel: Memory) -> None:
    t = trip(travel)
    seen: list[Mapping[str, Any]] = []

    def shout(text: str, data: Mapping[str, Any]) -> str:
        seen.append(data)
        return text.upper()

    result = travel.summarize(t.id, summariser=shout)
    assert result.summary is not None
    fields = result.summary.fields()
    assert fields["prose"] == result.text.upper() and fields["summariser"] == "shout"
    assert seen[0]["events_hash"] == fields["events_hash"]
    with pytest.raises(ValidationError):
        travel.summarize(t.id, summariser=lambda _t, _d: 3)  # type: ignore[arg-type,return-value]


def test_summaries_are_searchable(travel: Memory) -> None:
    t = trip(travel, destination="Reykjavik")
    result = travel.summarize(t.id)
    assert result.summary is not None
    hits = travel.search("MemorySummary", "Reykjavik trip created", k=3).hits
    assert [h.entity.id for h in hits] == [result.summary.id]


def test_bad_scope_and_window(travel: Memory) -> None:
    with pytest.raises(NotFound):
        travel.summarize("Trip_00000000000000000000")
    with pytest.raises(ValidationError):
        travel.summarize(since_seq=-1)
    with pytest.raises(ValidationError):
        travel.summarize(since_seq=5, until_seq=2)


def test_summary_type_is_defined_on_demand_and_matches_travel_toml(tmp_path: Path) -> None:
    assert {t.name: t for t in load_toml(TRAVEL)}["MemorySummary"] == bundled_type("MemorySummary")
    mem = Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        mem.define(Note, identity=["text"], embed="{text}")
        mem.create("Note", {"text": "pack an umbrella"})
        result = mem.summarize()
        assert result.summary is not None and mem.get_type("MemorySummary").version == 1
        seq = mem.last_seq()
        mem.load_definitions(TRAVEL)  # the same definition: no new version of it
        assert mem.get_type("MemorySummary").version == 1 and mem.last_seq() > seq
    finally:
        mem.close()
