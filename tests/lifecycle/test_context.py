"""Prompt context: deterministic, within budget, never inventing IDs; as a tool too."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmf_hybrid import HashEmbedder, Memory, NotFound, ValidationError
from dmf_hybrid._internal.lifecycle.context import APPROX, MemoryContext
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.lifecycle import DERIVED_ID, TRAVEL, known_ids, open_travel, poi, trip


def build(mem: Memory) -> dict[str, str]:
    """A small travel state: a trip over budget with two places; returns the IDs."""
    t = trip(mem, budget=100)
    tower = poi(mem, "Oriental Pearl Tower", 80, category="landmark",
                description="TV tower with a view over the Bund")
    museum = poi(mem, "Shanghai Museum", 40, category="museum", description="Ancient art")
    mem.link(t.id, "includes", tower.id)
    mem.link(t.id, "includes", museum.id)
    mem.update(t.id, {"notes": "first time in China"})
    return {"trip": t.id, "tower": tower.id, "museum": museum.id}


@pytest.fixture
def travel(tmp_path: Path) -> Iterator[Memory]:
    mem = open_travel(tmp_path / "mem")
    yield mem
    mem.close()


def test_context_shows_focus_relations_constraints_changes(travel: Memory) -> None:
    ids = build(travel)
    ctx = travel.context([ids["trip"]], query="tower with a view")
    assert isinstance(ctx, MemoryContext)
    text = ctx.text
    assert text.startswith(f"# Memory context at seq {travel.last_seq()}\n")
    for section in ("## Focus", "## Open constraints", "## Relations", "## Search",
                    "## Recent changes", "## Entities"):
        assert section in text
    assert f"- Trip {ids['trip']} v2: " in text and 'destination="Shanghai"' in text
    assert f"{ids['trip']} -includes-> {ids['tower']} (PointOfInterest " \
           '"Oriental Pearl Tower")' in text
    assert "estimated cost 120 exceeds the budget 100" in text
    assert ctx.hits[0].id == ids["tower"]
    assert [f.id for f in ctx.focus] == [ids["trip"]]
    assert {c.fields["rule"] for c in ctx.constraints} == {"trip_over_budget"}
    assert ctx.changes[0].seq == travel.last_seq()  # newest first
    assert not ctx.truncated and ctx.tokens <= ctx.budget_tokens


def test_context_never_invents_ids(travel: Memory) -> None:
    ids = build(travel)
    existing = known_ids(travel)
    for ctx in (travel.context([ids["trip"]], query="museum"), travel.context(),
                travel.context([ids["museum"], ids["tower"]], budget_tokens=100)):
        mentioned = set(DERIVED_ID.findall(ctx.text))
        assert mentioned and mentioned <= existing
        assert set(ctx.ids) == mentioned
        assert {f.id for f in ctx.focus} | {h.id for h in ctx.hits} <= existing
    with pytest.raises(NotFound):
        travel.context(["Trip_00000000000000000000"])


def test_context_is_byte_identical_for_the_same_state(tmp_path: Path) -> None:
    texts = []
    for name in ("a", "b"):
        mem = open_travel(tmp_path / name)
        try:
            ids = build(mem)
            first = mem.context([ids["trip"]], query="art museum", budget_tokens=300)
            again = mem.context([ids["trip"]], query="art museum", budget_tokens=300)
            assert first == again
            texts.append(first.text)
        finally:
            mem.close()
    assert texts[0] == texts[1]  # two memories built alike: same IDs, same bytes


def test_context_respects_the_budget(travel: Memory) -> None:
    ids = build(travel)
    full = travel.context([ids["trip"]], query="tower", budget_tokens=5000)
    assert full.token_counter == APPROX
    assert full.tokens == sum(math.ceil((len(line) + 1) / 4) for line in
                              full.text.splitlines())
    previous = None
    for budget in (400, 200, 100, 60):
        ctx = travel.context([ids["trip"]], query="tower", budget_tokens=budget)
        assert ctx.tokens <= budget and ctx.truncated and ctx.omitted > 0
        assert ctx.text.endswith(f"({ctx.omitted} more items left out for the token budget)\n")
        assert ctx.text.splitlines()[0] == full.text.splitlines()[0]
        if previous is not None:
            assert len(ctx.text) <= len(previous)
        previous = ctx.text
    # the highest-priority section survives the smallest budget
    assert f"- Trip {ids['trip']}" in previous


def test_context_as_of_describes_the_past(travel: Memory) -> None:
    ids = build(travel)
    seq = travel.last_seq()
    then = travel.context([ids["trip"]])
    travel.update(ids["trip"], {"budget": 500})
    travel.unlink(ids["trip"], "includes", ids["museum"])
    travel.create("PointOfInterest", {"name": "Yu Garden", "city": "Shanghai"})
    now = travel.context([ids["trip"]])
    assert now.text != then.text and "budget=500.0" in now.text
    assert travel.context([ids["trip"]], as_of=seq) == then
    assert travel.context(as_of=seq).as_of_seq == seq


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"focus_ids": "Trip_x"}, "focus_ids"),
    ({"focus_ids": ["bad id!"]}, "focus_ids"),
    ({"query": ""}, "query"),
    ({"budget_tokens": 5}, "budget_tokens"),
    ({"budget_tokens": True}, "budget_tokens"),
    ({"as_of": -1}, "as_of"),
])
def test_context_bad_input(travel: Memory, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        travel.context(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


class CountingEmbedder(HashEmbedder):
    """The test embedder with a tokenizer-like counter: one token per word, plus two."""

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2


def test_context_counts_with_the_embedders_tokenizer(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "m", embedder=CountingEmbedder(), vector_index=ExactIndex())
    try:
        mem.load_definitions(TRAVEL)
        ids = build(mem)
        ctx = mem.context([ids["trip"]], budget_tokens=120)
        assert ctx.token_counter.endswith("tokenizer")
        assert ctx.tokens == sum(len(line.split()) + 2 for line in ctx.text.splitlines())
        assert ctx.tokens <= 120
    finally:
        mem.close()


def test_context_is_an_agent_tool(travel: Memory) -> None:
    ids = build(travel)
    names = [t["function"]["name"] for t in travel.tools()]
    assert "context" in names
    out = travel.call_tool("context", {"focus_ids": [ids["trip"]], "budget_tokens": 400})
    assert out["text"] == travel.context([ids["trip"]], budget_tokens=400).text
    assert ids["trip"] in out["ids"]
    with pytest.raises(ValidationError):
        travel.call_tool("context", {"focus": [ids["trip"]]})
