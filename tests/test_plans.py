"""The plan executor: references, whole-plan validation, dry runs, atomic commits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmf_hybrid import LimitExceeded, Memory, PlanError
from dmf_hybrid._internal.plans import lookup, parse_ref, resolve, validate_plan
from tests.conftest import tenant_like
from tests.store import dump_rows


def dump(mem: Memory) -> dict[str, Any]:
    """Every row of every table, in a stable order, plus the seq counter."""
    return {"last_seq": mem.last_seq(), **dump_rows(mem)}


def problems_of(exc: pytest.ExceptionInfo[PlanError]) -> list[dict[str, Any]]:
    problems = exc.value.details["problems"]
    for p in problems:
        assert set(p) == {"step", "field", "problem", "hint"}
    return list(problems)


@pytest.fixture
def seeded(mem: Memory) -> dict[str, str]:
    museum = mem.create("Poi", {"name": "Shanghai Museum", "city": "Shanghai", "cost": 0})
    tower = mem.create("Poi", {"name": "Oriental Pearl Tower", "city": "Shanghai", "cost": 199})
    garden = mem.create("Poi", {"name": "West Lake", "city": "Hangzhou", "cost": 0})
    return {"museum": museum.id, "tower": tower.id, "garden": garden.id}


# ---------------------------------------------------------------- references


def test_parse_and_resolve_references() -> None:
    ref = parse_ref("$2.hits[0].entity.id")
    assert ref is not None and ref.step == 2 and ref.path == ("hits", 0, "entity", "id")
    assert parse_ref("$0") is not None and parse_ref("$0").path == ()  # type: ignore[union-attr]
    for literal in ("plain", "$$0.id", "$5 taxi", "$x", "", "$0.", "$0.a["):
        assert parse_ref(literal) is None
    results = [{"id": "A", "data": {"n": 1}}, {"hits": [{"entity": {"id": "B"}}]}]
    assert resolve({"x": ["$0.id", "$1.hits[0].entity.id", "$$0.id"], "y": "$0.data.n"},
                   results) == {"x": ["A", "B", "$0.id"], "y": 1}
    with pytest.raises(Exception, match="has 1 element"):
        lookup(parse_ref("$1.hits[3].entity.id"), results)  # type: ignore[arg-type]


def test_plan_steps_use_earlier_results(mem: Memory, seeded: dict[str, str]) -> None:
    out = mem.execute_plan([
        {"op": "create", "type": "Trip", "data": {"destination": "Shanghai", "budget": 5000}},
        {"op": "search", "type": "Poi", "text": "Shanghai Museum",
         "where": {"city": "Shanghai"}, "k": 1, "mode": "keyword"},
        {"op": "link", "from_id": "$0.id", "relation": "includes",
         "to_id": "$1.hits[0].entity.id"},
        {"op": "query", "type": "Poi", "where": {"cost": {"$gt": 100}}},
        {"op": "link", "from_id": "$0.id", "relation": "includes",
         "to_id": "$3.items[0].id"},
        {"op": "update", "id": "$0.id", "data": {"tags": ["$3.items[0].data.name"]},
         "expected_version": "$0.version"},
        {"op": "related", "id": "$0.id", "relation": "includes"},
    ])
    assert out.committed is True
    trip_id = out.results[0]["id"]
    assert out.results[0]["created"] is True
    assert out.results[1]["hits"][0]["entity"]["id"] == seeded["museum"]
    assert out.results[2] == {"linked": True, "from_id": trip_id, "relation": "includes",
                                 "to_id": seeded["museum"]}
    assert out.results[4]["to_id"] == seeded["tower"]
    assert out.results[5]["data"]["tags"] == ["Oriental Pearl Tower"]
    assert out.results[5]["version"] == 2
    assert sorted(r["entity"]["id"] for r in out.results[6]) == sorted(
        [seeded["museum"], seeded["tower"]])
    assert [d["op"] for d in out.diff] == ["create", "link", "link", "update"]
    first, last = out.seq_range
    assert [d["seq"] for d in out.diff] == list(range(first, last + 1))
    assert mem.get(trip_id).fields()["tags"] == ["Oriental Pearl Tower"]


def test_results_are_json(mem: Memory, seeded: dict[str, str]) -> None:
    import json

    out = mem.execute_plan([{"op": "get", "id": seeded["museum"]},
                            {"op": "history", "id": seeded["museum"]},
                            {"op": "search", "type": "Poi", "text": "tower"}])
    json.dumps(out.model_dump(mode="json"))
    assert out.results[0] == {"id": seeded["museum"], "type": "Poi", "version": 1,
                                 "data": {"name": "Shanghai Museum", "city": "Shanghai",
                                          "cost": 0.0, "rating": None}}
    assert out.diff == [] and out.seq_range is None


# ---------------------------------------------------------------- invalid plans


def test_invalid_plan_lists_every_problem_and_changes_nothing(
        mem: Memory, seeded: dict[str, str]) -> None:
    before = dump(mem)
    museum = seeded["museum"]
    with pytest.raises(PlanError) as exc:
        mem.execute_plan([
            {"op": "create", "type": "Trip", "data": {"destination": "Shanghai"}},  # valid
            {"op": "creat", "type": "Trip"},
            {"op": "create", "type": "Trpi", "data": {}},
            {"op": "create", "type": "Trip", "data": {"destinaton": "X", "budget": "lots"}},
            {"op": "update", "id": museum[:-1] + "0", "data": {"cost": 1}},
            {"op": "link", "from_id": "$0.id", "relation": "include", "to_id": museum},
            {"op": "link", "from_id": "$9.id", "relation": "includes", "to_id": "$0.idd"},
            {"op": "update", "id": museum, "data": {"cost": 5}, "expected_version": 7},
            {"op": "query", "type": "Poi", "where": {"costt": {"$gt": 1}}},
            {"op": "search", "type": "Poi", "text": "x", "mode": "fuzzy"},
            {"op": "get", "id": museum, "bogus": 1},
        ])
    problems = problems_of(exc)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for p in problems:
        by_step.setdefault(p["step"], []).append(p)
    assert 0 not in by_step
    assert by_step[1][0]["field"] == "op" and "create" in by_step[1][0]["hint"]
    assert any(p["field"] == "type" and "did you mean Trip" in p["hint"] for p in by_step[2])
    fields3 = {p["field"] for p in by_step[3]}
    assert {"data.destinaton", "data.destination", "data.budget"} <= fields3
    assert any("destination" in (p["hint"] or "") for p in by_step[3])
    assert by_step[4][0]["field"] == "id" and museum in by_step[4][0]["hint"]
    assert by_step[5][0]["field"] == "relation"
    assert "did you mean includes" in by_step[5][0]["hint"]
    assert {p["field"] for p in by_step[6]} == {"from_id", "to_id"}
    assert by_step[7][0]["field"] == "expected_version"
    assert "expected_version=1" in by_step[7][0]["hint"]
    assert by_step[8][0]["field"].startswith("where.costt")
    assert by_step[9][0]["field"] == "mode"
    assert by_step[10][0]["field"] == "bogus"
    assert "the plan is invalid and changed nothing" in exc.value.message
    assert dump(mem) == before


def test_validate_plan_reports_without_running(mem: Memory, seeded: dict[str, str]) -> None:
    before = dump(mem)
    assert validate_plan(mem, [{"op": "get", "id": seeded["museum"]}]) == []
    problems = validate_plan(mem, [{"op": "delete", "id": "nope"}])
    assert problems and problems[0]["field"] == "id"
    assert validate_plan(mem, {"op": "get"})[0]["field"] == "ops"
    assert validate_plan(mem, [])[0]["problem"] == "the plan has no steps"
    assert dump(mem) == before


def test_ids_must_exist_in_this_tenant_or_be_created_earlier(
        mem: Memory, seeded: dict[str, str]) -> None:
    other = tenant_like(mem, "other")
    with pytest.raises(PlanError) as exc:
        other.execute_plan([{"op": "get", "id": seeded["museum"]}])
    assert problems_of(exc)[0]["problem"].startswith("no entity")
    # an ID the plan creates (content-derived) may be used literally by later steps
    trip = mem.execute_plan([{"op": "create", "type": "Trip", "data": {"destination": "Rome"}}],
                            dry_run=True).results[0]["id"]
    out = mem.execute_plan([
        {"op": "create", "type": "Trip", "data": {"destination": "Rome"}},
        {"op": "update", "id": trip, "data": {"budget": 10}, "expected_version": 1},
        {"op": "delete", "id": trip},
        {"op": "restore", "id": trip, "expected_version": 3},
        {"op": "append", "id": trip, "field": "tags", "values": ["x"], "expected_version": 4},
    ])
    assert out.results[-1]["version"] == 5
    with pytest.raises(PlanError) as exc:
        mem.execute_plan([{"op": "delete", "id": trip}, {"op": "get", "id": trip},
                          {"op": "restore", "id": seeded["museum"]}])
    problems = problems_of(exc)
    assert [(p["step"], p["field"]) for p in problems] == [(1, "id"), (2, "id")]
    assert "deleted" in problems[0]["problem"] and "not deleted" in problems[1]["problem"]


def test_failure_while_running_rolls_back_every_step(mem: Memory,
                                                     seeded: dict[str, str]) -> None:
    a = mem.create("Trip", {"destination": "A"}).id
    b = mem.create("Trip", {"destination": "B"}).id
    mem.link(a, "next", b)
    before = dump(mem)
    with pytest.raises(PlanError) as exc:  # "next" is a one-relation: the second link fails
        mem.execute_plan([
            {"op": "create", "type": "Trip", "data": {"destination": "C"}},
            {"op": "update", "id": a, "data": {"budget": 1}},
            {"op": "link", "from_id": a, "relation": "next", "to_id": "$0.id"},
        ])
    problems = problems_of(exc)
    assert [(p["step"], p["field"]) for p in problems] == [(2, "relation")]
    assert "unlink it first" in problems[0]["problem"]
    assert dump(mem) == before
    with pytest.raises(PlanError) as exc:  # stale version only visible at run time
        mem.execute_plan([{"op": "update", "id": a, "data": {"budget": 2}},
                          {"op": "update", "id": a, "data": {"budget": 3},
                           "expected_version": 1}])
    problems = problems_of(exc)
    assert problems[0]["step"] == 1 and problems[0]["field"] == "expected_version"
    assert problems[0]["hint"] == "use expected_version=2 (or omit it)"
    with pytest.raises(PlanError) as exc:  # a reference past the end of a result
        mem.execute_plan([{"op": "search", "type": "Poi", "text": "zzz",
                           "where": {"city": "Nowhere"}},
                          {"op": "delete", "id": "$0.hits[0].entity.id"}])
    assert "has 0 element" in problems_of(exc)[0]["problem"]
    assert dump(mem) == before


def test_plan_length_is_limited(mem: Memory, seeded: dict[str, str]) -> None:
    step = {"op": "get", "id": seeded["museum"]}
    mem.execute_plan([step] * mem.settings.max_plan_ops)
    with pytest.raises(LimitExceeded):
        mem.execute_plan([step] * (mem.settings.max_plan_ops + 1))
    with pytest.raises(PlanError):
        mem.execute_plan("create everything")  # type: ignore[arg-type]


@pytest.mark.parametrize("depth", [33, 5000])
def test_deeply_nested_arguments_are_refused_and_change_nothing(
        mem: Memory, seeded: dict[str, str], depth: int) -> None:
    nested: Any = "x"
    for _ in range(depth):
        nested = [nested]
    seq = mem.last_seq()
    with pytest.raises(PlanError) as info:
        mem.execute_plan([{"op": "create", "type": "Trip",
                           "data": {"destination": "Rome", "tags": nested}}])
    assert "nest deeper than 32" in info.value.message
    assert mem.last_seq() == seq
    # within the limit (the step itself and its data are two levels) it is merely bad data
    shallow: Any = "x"
    for _ in range(29):
        shallow = [shallow]
    with pytest.raises(PlanError) as info:
        mem.execute_plan([{"op": "create", "type": "Trip",
                           "data": {"destination": "Rome", "tags": shallow}}])
    assert "nest deeper" not in info.value.message


# ---------------------------------------------------------------- dry run & commit


def _trip_plan(museum: str) -> list[dict[str, Any]]:
    return [
        {"op": "create", "type": "Trip", "data": {"destination": "Shanghai", "budget": 5000,
                                                  "tags": ["museums"]}},
        {"op": "link", "from_id": "$0.id", "relation": "includes", "to_id": museum},
        {"op": "append", "id": "$0.id", "field": "tags", "values": ["food"]},
        {"op": "update", "id": museum, "data": {"rating": 5}, "expected_version": 1},
        {"op": "delete", "id": museum, "expected_version": 2},
        {"op": "restore", "id": museum},
    ]


def test_dry_run_diff_equals_the_real_diff_and_leaves_no_trace(
        mem: Memory, seeded: dict[str, str]) -> None:
    before = dump(mem)
    seq = mem.last_seq()
    dry = mem.execute_plan(_trip_plan(seeded["museum"]), dry_run=True)
    assert dry.committed is False
    assert dump(mem) == before
    assert mem.last_seq() == seq
    assert mem.verify_audit().ok
    assert mem.search("Trip", "Shanghai").hits == []  # nothing reached the vector index
    real = mem.execute_plan(_trip_plan(seeded["museum"]))
    assert real.committed is True
    assert real.diff == dry.diff
    assert real.seq_range == dry.seq_range == [seq + 1, seq + 6]
    assert [d["op"] for d in real.diff] == ["create", "link", "append", "update", "delete",
                                               "restore"]
    assert real.diff[3]["changes"] == {"rating": [None, 5]}
    assert real.diff[3]["version"] == [1, 2]
    assert mem.verify_audit().ok
    trip = mem.get(real.results[0]["id"])
    assert trip.fields()["tags"] == ["museums", "food"]
    assert mem.get(seeded["museum"]).version == 4
    assert mem.search("Trip", "Shanghai", mode="keyword").hits[0].entity.id == trip.id


def test_a_plan_commits_as_one_transaction(mem: Memory, seeded: dict[str, str]) -> None:
    out = mem.execute_plan(_trip_plan(seeded["museum"]), actor="agent", reason="plan",
                           trace_id="t-1")
    events = mem.events(since_seq=out.seq_range[0] - 1)
    assert [e.seq for e in events] == list(range(out.seq_range[0], out.seq_range[1] + 1))
    assert {(e.actor, e.reason, e.trace_id) for e in events} == {("agent", "plan", "t-1")}
    # the same plan again: the create is a no-op, the stale expected_version is reported
    with pytest.raises(PlanError) as exc:
        mem.execute_plan(_trip_plan(seeded["museum"]))
    assert {p["field"] for p in problems_of(exc)} == {"expected_version"}


# ---------------------------------------------------------------- property


_ids = st.sampled_from(["nope", "Poi_0000", "$0.id", "$7.id", "$0.hits[0].id", "", 5, None])
_invalid_steps = st.one_of(
    st.fixed_dictionaries({"op": st.sampled_from(["creat", "drop", "", 3, None])}),
    st.fixed_dictionaries({"op": st.just("create"), "type": st.sampled_from(["Nope", "trip", 1]),
                           "data": st.dictionaries(st.text(max_size=5), st.integers())}),
    st.fixed_dictionaries({"op": st.just("create"), "type": st.just("Poi"),
                           "data": st.fixed_dictionaries({"name": st.integers(),
                                                          "city": st.just("X")})}),
    st.fixed_dictionaries({"op": st.sampled_from(["update", "delete", "restore", "get"]),
                           "id": _ids, "data": st.just({"cost": "many"})}),
    st.fixed_dictionaries({"op": st.sampled_from(["link", "unlink"]), "from_id": _ids,
                           "relation": st.sampled_from(["includes", "nope"]), "to_id": _ids}),
    st.fixed_dictionaries({"op": st.just("query"), "type": st.just("Poi"),
                           "where": st.sampled_from([{"nope": 1}, {"cost": {"$gt": "x"}},
                                                     {"$or": []}])}),
    st.text(max_size=10), st.integers(),
)
_valid_steps = st.sampled_from([
    {"op": "create", "type": "Poi", "data": {"name": "Yu Garden", "city": "Shanghai"}},
    {"op": "create", "type": "Trip", "data": {"destination": "Xi'an"}},
    {"op": "query", "type": "Poi", "where": {"city": "Shanghai"}},
    {"op": "search", "type": "Poi", "text": "garden"},
])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(valid=st.lists(_valid_steps, max_size=4), invalid=_invalid_steps,
       position=st.integers(min_value=0, max_value=4), dry_run=st.booleans())
def test_random_invalid_plans_change_nothing(mem: Memory, valid: list[dict[str, Any]],
                                             invalid: Any, position: int,
                                             dry_run: bool) -> None:
    before = dump(mem)
    ops = list(valid)
    ops.insert(min(position, len(ops)), invalid)
    with pytest.raises(PlanError) as exc:
        mem.execute_plan(ops, dry_run=dry_run)
    assert problems_of(exc)
    assert dump(mem) == before


# ---------------------------------------------------------------- the example


def test_travel_agent_example_runs_and_prints_the_total_cost() -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "examples" / "travel_agent.py")],
                          capture_output=True, text=True, timeout=180, cwd=root)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "invalid plan, nothing changed" in out  # the planner's draft was repaired
    assert "Oriental Pearl TV Tower: 199 CNY" in out and "Shanghai Museum: 0 CNY" in out
    assert "Total cost: 199 CNY (budget 5000, 4801 left)." in out
    assert "audit log: ok=True" in out
