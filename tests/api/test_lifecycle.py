"""The lifecycle methods (context, summarize, open_constraints, rules, archive_events) through
Memory, MemoryClient in-process and MemoryClient over uvicorn, compared with the embedded Memory
behind them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import (
    Conflict,
    Entity,
    FilterError,
    Forbidden,
    HashEmbedder,
    Memory,
    NotFound,
    Page,
    SchemaError,
    ValidationError,
)
from dmf_hybrid._internal.api import create_app
from dmf_hybrid._internal.lifecycle import ArchiveResult, MemoryContext, RuleDef, SummaryResult
from dmf_hybrid._internal.schema import load_toml
from dmf_hybrid._internal.store.archive import archive_files
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.api import wrong_error
from tests.doors import Front, http_front
from tests.lifecycle import TRAVEL, open_travel

#: The budget rule of indexes/travel.toml, on the test types (tests/conftest.py).
BUDGET_RULE: dict[str, Any] = {
    "name": "trip_over_budget",
    "description": "The cost of a trip's points of interest exceeds its budget.",
    "condition": "sum(Poi.cost via includes) > budget",
    "trigger": {"type": "Trip", "where": {"budget": {"$gt": 0}}},
    "action": {"kind": "budget", "message": "cost {value} exceeds the budget {threshold}"},
}


def with_rules(mem: Any) -> None:
    """The Constraint type of indexes/travel.toml and the budget rule, through ``mem``."""
    constraint = next(t for t in load_toml(TRAVEL) if t.name == "Constraint")
    mem.define_type(constraint)
    mem.define_rule(BUDGET_RULE)


def over_budget_trip(mem: Any) -> Entity:
    """A trip whose two points of interest cost more than its budget (one open constraint)."""
    trip = mem.create("Trip", {"destination": "Shanghai", "budget": 50, "start": "2025-05-01"})
    for name, cost in (("The Bund", 0), ("Yu Garden", 40), ("Shanghai Tower", 30)):
        mem.link(trip.id, "includes", mem.create("Poi", {"name": name, "city": "Shanghai",
                                                        "cost": cost}).id)
    return trip


def embedded(api: Front) -> Memory:
    assert api.embedded is not None
    return api.embedded


def dump(page: Page) -> dict[str, Any]:
    """A page as JSON (entity data models are per-process classes, their values compare)."""
    return page.model_dump(mode="json")


def state(mem: Memory) -> tuple[int, list[dict[str, Any]], int]:
    """What a refused call must leave unchanged: the log head, the rules, the summaries."""
    try:
        summaries = mem.count("MemorySummary")
    except NotFound:
        summaries = 0
    return mem.last_seq(), mem.rules(), summaries


def test_rules_round_trip(api: Front) -> None:
    with_rules(api.mem)
    rule = api.mem.rules()
    assert isinstance(rule, list) and rule == embedded(api).rules()
    assert [(r.name, r.version, r.dependencies) for r in rule] == [
        ("trip_over_budget", 1, [["Poi", "includes"]])]
    assert rule[0].condition == BUDGET_RULE["condition"]
    same = api.mem.define_rule(RuleDef.model_validate(BUDGET_RULE))
    assert same == rule[0]
    v2 = api.mem.define_rule({**BUDGET_RULE, "condition": "sum(Poi.cost via includes) >= budget"},
                             actor="planner", reason="tighter")
    assert v2.version == 2 and api.mem.rules() == embedded(api).rules() == [v2]
    event = [e for e in embedded(api).events() if e.op == "define_rule"][-1]
    assert (event.actor, event.reason, event.version_after) == ("planner", "tighter", 2)


def test_context_summary_and_queue_match_the_embedded_memory(api: Front) -> None:
    with_rules(api.mem)
    trip = over_budget_trip(api.mem)
    mid = api.mem.last_seq()
    api.mem.update(trip.id, {"budget": 60}, actor="ann")
    ref = embedded(api)

    ctx = api.mem.context([trip.id], budget_tokens=400)
    assert isinstance(ctx, MemoryContext) and ctx == ref.context([trip.id], budget_tokens=400)
    assert ctx.focus[0].fields["start"] == dt.date(2025, 5, 1)  # the type's values, not JSON
    assert [c.fields["rule"] for c in ctx.constraints] == ["trip_over_budget"]
    assert trip.id in ctx.ids and "cost 70 exceeds the budget 60" in ctx.text
    searched = api.mem.context(query="Yu Garden", budget_tokens=600, k=2)
    assert searched == ref.context(query="Yu Garden", budget_tokens=600, k=2)
    assert searched.hits and searched.hits[0].label == '"Yu Garden"'
    past = api.mem.context([trip.id], as_of=mid)
    assert past == ref.context([trip.id], as_of=mid) and past.as_of_seq == mid
    assert "exceeds the budget 50" in past.text
    now = dt.datetime.now(dt.UTC)
    assert api.mem.context([trip.id], as_of=now).text == ctx.text

    queue = api.mem.open_constraints({"subject": {"$in": [trip.id]}, "kind": "budget"})
    expected = ref.open_constraints({"subject": {"$in": [trip.id]}, "kind": "budget"})
    assert isinstance(queue, Page) and dump(queue) == dump(expected)
    assert queue.items[0].data.status == "open" and queue.items[0].data.subject == trip.id
    assert api.mem.open_constraints({"kind": "time"}).items == []
    assert dump(api.mem.open_constraints(limit=1, as_of=mid)) == dump(
        ref.open_constraints(limit=1, as_of=mid))
    assert api.other.open_constraints().items == []

    summary = api.mem.summarize(trip.id, actor="planner", reason="weekly")
    assert isinstance(summary, SummaryResult) and not summary.empty
    assert isinstance(summary.summary, Entity) and summary.summary.created
    assert summary.summary.data.scope == trip.id and summary.summary.data.text == summary.text
    again = ref.summarize(trip.id, until_seq=summary.until_seq)
    assert again.summary is not None and again.summary.id == summary.summary.id
    assert not again.summary.created
    assert again.model_dump(exclude={"summary"}) == summary.model_dump(exclude={"summary"})
    assert ref.history(summary.summary.id)[0].actor == "planner"
    empty = api.mem.summarize(since_seq=api.mem.last_seq())
    assert empty.empty and empty.summary is None
    assert empty == ref.summarize(since_seq=ref.last_seq())


def test_archive_events_matches_the_embedded_memory(api: Front, tmp_path: Path) -> None:
    with_rules(api.mem)
    trip = over_budget_trip(api.mem)
    ref = embedded(api)
    history, events = ref.history(trip.id), ref.events(limit=10_000)
    cut = api.mem.last_seq()
    data_dir = tmp_path / "data"  # the data directory of the test server (tests/api/conftest)
    dest: str | Path = "cold" if api.http else data_dir / "archives" / "cold"
    if ref.settings.store_url is not None:  # archive files are DuckDB's: a clear refusal
        with pytest.raises(Conflict, match="store is on PostgreSQL"):
            api.mem.archive_events(cut, dest, actor="ops", reason="retention")
        assert api.mem.last_seq() == cut and ref.events(limit=10_000) == events
        return

    result = api.mem.archive_events(cut, dest, actor="ops", reason="retention")
    assert isinstance(result, ArchiveResult) and result.moved == cut - 1
    assert result.file is not None and result.seq == api.mem.last_seq() == cut + 1
    name = Path(result.file.file).name
    assert name == f"events-default-{1:012d}-{cut - 1:012d}.parquet"  # the tenant's own file
    if api.http:  # the server's own paths stay private
        assert result.file.file == f"archives/cold/{name}"
    assert (data_dir / "archives" / "cold" / name).is_file()
    [checkpoint] = archive_files(ref._store)
    assert checkpoint.model_dump(exclude={"file"}) == result.file.model_dump(exclude={"file"})
    assert ref.history(trip.id) == history and ref.events(limit=10_000)[:-1] == events
    assert api.mem.verify_audit().ok and ref.verify_audit().ok
    event = ref.events(since_seq=cut)[0]
    assert (event.op, event.actor, event.reason) == ("archive", "ops", "retention")
    assert api.mem.archive_events(1, dest).moved == 0


def _bad_calls(api: Front) -> dict[str, tuple[type[Exception], str | None,
                                                Callable[[], object]]]:
    mem = api.mem
    missing = "Trip_00000000000000000000"
    return {
        "where field": (FilterError, "where.nope", lambda: mem.open_constraints({"nope": 1})),
        "where operator": (FilterError, "where.kind.$near",
                           lambda: mem.open_constraints({"kind": {"$near": 1}})),
        "where value": (FilterError, "where.kind",
                        lambda: mem.open_constraints({"kind": "weather"})),
        "where type": (FilterError, "where",
                       lambda: mem.open_constraints([1])),  # type: ignore[arg-type]
        "queue limit": (ValidationError, "limit", lambda: mem.open_constraints(limit=10**6)),
        "rule condition": (SchemaError, "condition", lambda: mem.define_rule(
            {**BUDGET_RULE, "condition": "budget >>> 1"})),
        "rule sql": (SchemaError, "condition", lambda: mem.define_rule(
            {**BUDGET_RULE, "condition": "1 > 0; DROP TABLE events"})),
        "rule trigger": (SchemaError, "trigger.type", lambda: mem.define_rule(
            {**BUDGET_RULE, "trigger": {"type": "Nope"}})),
        "rule name": (SchemaError, "name", lambda: mem.define_rule(
            {**BUDGET_RULE, "name": "Bad-Name"})),
        "rule key": (SchemaError, "when", lambda: mem.define_rule({**BUDGET_RULE, "when": 1})),
        "rule type": (SchemaError, "rule", lambda: mem.define_rule("budget > 0")),
        "context budget": (ValidationError, "budget_tokens",
                           lambda: mem.context(budget_tokens=1)),
        "context focus": (NotFound, None, lambda: mem.context([missing])),
        "summary scope": (NotFound, "scope", lambda: mem.summarize(missing)),
        "summary window": (ValidationError, "until_seq",
                           lambda: mem.summarize(since_seq=5, until_seq=2)),
        "archive seq": (ValidationError, "before_seq", lambda: mem.archive_events(0, "cold")),
        "archive bool": (ValidationError, "before_seq", lambda: mem.archive_events(True, "cold")),
    }


def test_bad_input_raises_the_same_errors_and_changes_nothing(api: Front) -> None:
    with_rules(api.mem)
    over_budget_trip(api.mem)
    before = state(embedded(api))
    problems = []
    for case, (exc_class, field, call) in _bad_calls(api).items():
        problem = wrong_error(case, call, exc_class, field)
        if problem is not None:
            problems.append(problem)
        if state(embedded(api)) != before:
            problems.append(f"{case}: changed the memory")
    assert not problems, "\n".join(problems)


def test_summariser_runs_only_in_process(api: Front) -> None:
    api.mem.create("Poi", {"name": "The Bund", "city": "Shanghai"})

    def shout(text: str, data: Any) -> str:
        return text.upper()

    before = state(embedded(api))
    if api.http:
        with pytest.raises(ValidationError) as err:
            api.mem.summarize(summariser=shout)
        assert err.value.details["field"] == "summariser"
        assert "server process" in err.value.message
        assert state(embedded(api)) == before
    else:
        result = api.mem.summarize(summariser=shout)
        assert result.summary is not None and result.summary.data.summariser == "shout"


def test_archive_names_stay_under_the_data_directory(http_api: Front, tmp_path: Path) -> None:
    http_api.mem.create("Poi", {"name": "The Bund", "city": "Shanghai"})
    before = state(embedded(http_api))
    for bad in ("../escape", "a/b", "..", ".hidden", "", "x" * 65, str(tmp_path / "abs"),
                Path("../up")):
        with pytest.raises(ValidationError) as err:
            http_api.mem.archive_events(before[0], bad)
        assert err.value.details["field"] == "dest", bad
    assert state(embedded(http_api)) == before and not archive_files(embedded(http_api)._store)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "abs").exists()
    assert not (tmp_path / "data" / "archives").exists()


def test_lifecycle_roles(http_api: Front) -> None:
    assert http_api.as_role is not None
    reader, writer = http_api.as_role("reader"), http_api.as_role("writer")
    constraint = next(t for t in load_toml(TRAVEL) if t.name == "Constraint")
    http_api.mem.define_type(constraint)
    trip = over_budget_trip(writer)
    for forbidden in (lambda: writer.define_rule(BUDGET_RULE),
                      lambda: writer.archive_events(2, "cold"),
                      lambda: reader.summarize(trip.id)):
        with pytest.raises(Forbidden):
            forbidden()
    assert reader.rules() == []
    with http_api.raw() as raw:
        created = raw.post("/rules", json=BUDGET_RULE)
        assert created.status_code == 201 and created.json()["version"] == 1
        unchanged = raw.post("/rules", json=BUDGET_RULE)
        assert unchanged.status_code == 200 and unchanged.json() == created.json()
        bad = raw.post("/constraints/query", json={"where": {"nope": 1}, "wher": 1})
        assert bad.status_code == 422 and bad.json()["details"]["field"] == "wher"
        spec = raw.get("/openapi.json").json()["paths"]
    assert {("/rules", "get"), ("/rules", "post"), ("/constraints/query", "post"),
            ("/admin/archive", "post")} <= {(p, m) for p, ops in spec.items() for m in ops}
    assert [r.name for r in reader.rules()] == ["trip_over_budget"]
    writer.update(trip.id, {"budget": 60})  # the rule runs on writes after its definition
    assert [c.data.subject for c in reader.open_constraints().items] == [trip.id]
    assert reader.context([trip.id]).constraints[0].fields["subject"] == trip.id
    assert writer.summarize(trip.id).summary is not None


def test_load_definitions_sends_the_rules(settings_for: Callable[..., Any],
                                          tmp_path: Path) -> None:
    reference = open_travel(None)
    served = Memory.open(None, embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        with http_front("asgi", create_app(settings_for(), served), served) as front:
            types = front.mem.load_definitions(TRAVEL)
            assert sorted(t.name for t in types) == [t.name for t in reference.types()]
            assert front.mem.rules() == reference.rules()
            assert [r.name for r in served.rules()] == ["trip_over_budget",
                                                           "trip_time_conflict"]
    finally:
        served.close()
        reference.close()
