"""Rules: the travel budget and time-conflict rules raise and resolve constraints atomically,
every firing is audited, bad rules are refused at definition time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmf_hybrid import DMFError, HashEmbedder, Memory, SchemaError, ValidationError
from dmf_hybrid._internal.ids import entity_id
from dmf_hybrid._internal.vector.exact import ExactIndex
from tests.lifecycle import TRAVEL, constraints, open_travel, poi, rule_events, trip

BUDGET = "trip_over_budget"
TIME = "trip_time_conflict"


@pytest.fixture
def travel(tmp_path: Path) -> Iterator[Memory]:
    mem = open_travel(tmp_path / "mem")
    yield mem
    mem.close()


def test_budget_rule_raises_and_resolves(travel: Memory) -> None:
    t = trip(travel, budget=100)
    cheap, costly = poi(travel, "Tower", 60), poi(travel, "Museum", 50)
    travel.link(t.id, "includes", cheap.id)
    assert constraints(travel, t.id) == {}
    travel.link(t.id, "includes", costly.id)
    c = constraints(travel, t.id)[BUDGET]
    expected_id = entity_id("Constraint", {"kind": "budget", "rule": BUDGET, "subject": t.id})
    assert c["id"] == expected_id
    assert (c["status"], c["kind"], c["observed"], c["threshold"]) == ("open", "budget", 110, 100)
    assert c["message"] == "estimated cost 110 exceeds the budget 100"
    assert [r.entity.id for r in travel.related(t.id, "has")] == [expected_id]
    assert [e.id for e in travel.open_constraints().items] == [expected_id]

    travel.unlink(t.id, "includes", costly.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"
    assert travel.open_constraints().items == []
    travel.link(t.id, "includes", costly.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "open"
    travel.update(t.id, {"budget": 200})
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"
    outcomes = [m["outcome"] for m in rule_events(travel) if m["rule"] == BUDGET]
    assert outcomes == ["raised", "resolved", "reopened", "resolved"]


def test_changes_of_linked_entities_reevaluate(travel: Memory) -> None:
    t = trip(travel, budget=100)
    p = poi(travel, "Tower", 60)
    travel.link(t.id, "includes", p.id)
    travel.update(p.id, {"estimated_cost": 150})
    c = constraints(travel, t.id)[BUDGET]
    assert (c["status"], c["observed"]) == ("open", 150)
    travel.update(p.id, {"estimated_cost": 120})
    c = constraints(travel, t.id)[BUDGET]
    assert c["message"] == "estimated cost 120 exceeds the budget 100"
    travel.delete(p.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"
    travel.restore(p.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "open"
    travel.erase(p.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"
    outcomes = [m["outcome"] for m in rule_events(travel)]
    assert outcomes == ["raised", "updated", "resolved", "reopened", "resolved"]
    assert travel.verify_audit().ok


def test_trigger_filter_and_deletion_resolve(travel: Memory) -> None:
    t = trip(travel, budget=10)
    travel.link(t.id, "includes", poi(travel, "Tower", 60).id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "open"
    travel.update(t.id, {"budget": 0})  # the filter (budget > 0) no longer holds
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"
    travel.update(t.id, {"budget": 10})
    travel.delete(t.id)
    assert constraints(travel, t.id)[BUDGET]["status"] == "resolved"


def test_reevaluation_is_idempotent(travel: Memory) -> None:
    t = trip(travel, budget=10)
    travel.link(t.id, "includes", poi(travel, "Tower", 60).id)
    seq = travel.last_seq()
    travel.update(t.id, {"notes": "window seat"})  # the condition still holds, same values
    assert travel.last_seq() == seq + 1  # only the update itself: no rule event, no write
    assert len(travel.query("Constraint").items) == 1


def test_rule_firing_is_audited_with_name_and_version(travel: Memory) -> None:
    t = trip(travel, budget=10)
    seq0 = travel.last_seq()
    p = poi(travel, "Tower", 60)
    travel.link(t.id, "includes", p.id)
    events = travel.events(seq0)
    ops = [(e.op, e.type) for e in events]
    assert ops == [("create", "PointOfInterest"), ("link", "Trip"), ("rule", "Trip"),
                   ("create", "Constraint"), ("link", "Trip")]
    rule = events[2]
    cid = constraints(travel, t.id)[BUDGET]["id"]
    assert rule.meta == {"rule": BUDGET, "rule_version": 1, "entity_id": t.id,
                         "outcome": "raised", "constraint_id": cid}
    assert rule.actor == f"rule:{BUDGET}" and events[3].actor == f"rule:{BUDGET}"
    assert rule.entity_id == t.id and rule in travel.history(t.id)
    assert travel.verify_audit().ok


def test_what_a_write_sets_off_records_its_principal(travel: Memory) -> None:
    # the principal is an argument of the write (a view's), not ambient state: the rule's
    # event, its constraint and its link record the principal of the write that set them off
    keyed = travel.for_tenant(travel.tenant, principal="key:0a1b2c3d")
    t = trip(travel, budget=10)
    seq0 = travel.last_seq()
    p = poi(keyed, "Tower", 60)
    keyed.link(t.id, "includes", p.id)
    plan = keyed.execute_plan([{"op": "update", "id": p.id, "data": {"estimated_cost": 70}}])
    assert plan.committed
    keyed.call_tool("update", {"id": t.id, "data": {"budget": 20}})
    after = travel.events(seq0)
    assert len(after) >= 8
    assert {e.principal for e in after} == {"key:0a1b2c3d"}
    assert {e.principal for e in travel.events(0, seq0)} == {None}  # in-process: none
    travel.create("PointOfInterest", {"name": "Bund", "city": "Shanghai"})
    assert travel.events(travel.last_seq() - 1)[-1].principal is None  # the view is apart
    assert travel.verify_audit().ok
    with pytest.raises(ValidationError):
        travel.for_tenant(travel.tenant, principal=5)  # type: ignore[arg-type]


def test_rule_effects_commit_or_roll_back_with_the_write(travel: Memory) -> None:
    t = trip(travel, budget=10)
    p = poi(travel, "Tower", 60)
    seq = travel.last_seq()

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with travel.transaction():
            travel.link(t.id, "includes", p.id)
            assert constraints(travel, t.id)[BUDGET]["status"] == "open"  # seen inside
            raise Boom
    assert travel.last_seq() == seq
    assert constraints(travel, t.id) == {} and rule_events(travel) == []
    assert travel.verify_audit().ok
    # a dry-run plan shows the rule's effects in its diff and keeps none of them
    plan = [{"op": "link", "from_id": t.id, "relation": "includes", "to_id": p.id}]
    dry = travel.execute_plan(plan, dry_run=True)
    assert [d["op"] for d in dry.diff] == ["link", "rule", "create", "link"]
    assert travel.last_seq() == seq and constraints(travel, t.id) == {}
    real = travel.execute_plan(plan)
    assert real.diff == dry.diff
    assert constraints(travel, t.id)[BUDGET]["status"] == "open"


def test_time_conflict_rule(travel: Memory) -> None:
    t = trip(travel, budget=0)
    day = {"visit_date": "2024-05-02"}
    a = poi(travel, "Tower", start_time="10:00", duration_hours=2, **day)
    b = poi(travel, "Museum", start_time="12:00", duration_hours=1, **day)  # touches, no overlap
    c = poi(travel, "Garden", start_time="11:30", duration_hours=1,
            visit_date="2024-05-03")  # other day
    for p in (a, b, c):
        travel.link(t.id, "includes", p.id)
    assert TIME not in constraints(travel, t.id)
    travel.update(c.id, {"visit_date": "2024-05-02"})  # now overlaps both a and b
    con = constraints(travel, t.id)[TIME]
    assert (con["status"], con["observed"]) == ("open", 2)
    assert con["message"] == "2 pair(s) of visits overlap on the same day"
    travel.update(c.id, {"start_time": None})  # no time: not compared
    assert constraints(travel, t.id)[TIME]["status"] == "resolved"
    assert BUDGET not in constraints(travel, t.id)  # budget 0: the filter keeps it quiet


def test_rules_persist_and_version(tmp_path: Path) -> None:
    mem = open_travel(tmp_path / "m")
    try:
        assert [(r.name, r.version) for r in mem.rules()] == [(BUDGET, 1), (TIME, 1)]
        seq = mem.last_seq()
        mem.load_definitions(TRAVEL)
        assert mem.last_seq() == seq  # the same definitions again change nothing
        changed = {**mem.rules()[0].model_dump(),
                   "condition": "sum(PointOfInterest.estimated_cost via includes) > budget * 1.1"}
        del changed["version"], changed["dependencies"]
        assert mem.define_rule(changed).version == 2
        assert mem.events(seq)[-1].op == "define_rule"
    finally:
        mem.close()
    mem = Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        assert [(r.name, r.version) for r in mem.rules()] == [(BUDGET, 2), (TIME, 1)]
        t = trip(mem, budget=100)
        mem.link(t.id, "includes", poi(mem, "Tower", 105).id)  # 105 <= 110: fine now
        assert constraints(mem, t.id) == {}
        mem.load_definitions(TRAVEL)  # the file's definition again: a third version
        assert [(r.name, r.version) for r in mem.rules()] == [(BUDGET, 3), (TIME, 1)]
    finally:
        mem.close()


def _rule(condition: str, **over: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"name": "bad", "trigger": {"type": "Trip"}, "condition": condition,
                            "action": {"kind": "budget", "link": "has"}}
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(rule.get(key), dict):
            rule[key] = {**rule[key], **value}
        else:
            rule[key] = value
    return rule


@pytest.mark.parametrize(("rule", "words"), [
    (_rule("sum(PointOfInterest.price via includes) > budget"), "no field 'price'"),
    (_rule("sum(Hotel.cost via includes) > budget"), "unknown type 'Hotel'"),
    (_rule("sum(PointOfInterest.estimated_cost via visits) > budget"), "no relation 'visits'"),
    (_rule("count(User via includes) > 0"), "links to PointOfInterest, not User"),
    (_rule("sum(PointOfInterest.estimated_cost via includes) > wallet"), "no field 'wallet'"),
    (_rule("budget > 0; DROP TABLE events"), "unexpected ';'"),
    (_rule("(SELECT count(*) FROM events) > 0"), "no field 'SELECT'"),
    (_rule("budget > 0 OR 1 = 1"), "unexpected 'OR'"),
    (_rule("budget"), "ends too early"),
    (_rule("sum(PointOfInterest.name via includes) > 1"), "str field"),
    (_rule("destination > 1"), "str field"),
    (_rule("start_date > budget"), "cannot compare a date with a number"),
    (_rule("median(PointOfInterest.estimated_cost via includes) > budget"), "unknown function"),
    (_rule("sum(PointOfInterest via includes) > budget"), "needs a field"),
    (_rule("budget > '1'"), "unexpected \"'\""),
    (_rule("budget > 0", trigger={"type": "Hotel"}), "unknown entity type"),
    (_rule("budget > 0", trigger={"ops": ["create", "explode"]}), "trigger ops"),
    (_rule("budget > 0", trigger={"where": {"colour": "red"}}), "no field 'colour'"),
    (_rule("budget > 0", action={"link": "includes"}), "action.link"),
    (_rule("budget > 0", action={"kind": "weather"}), "no value 'weather'"),
    (_rule("budget > 0", action={"message": "{value.__class__}"}), "placeholders"),
    (_rule("budget > 0", name="Bad Name"), "rule name"),
    (_rule("budget > 0", extra=1), "extra"),
])
def test_bad_rules_are_refused_at_definition(travel: Memory, rule: dict[str, Any],
                                             words: str) -> None:
    seq = travel.last_seq()
    with pytest.raises(SchemaError) as info:
        travel.define_rule(rule)
    assert words.lower() in info.value.message.lower()
    assert travel.last_seq() == seq and "bad" not in [r.name for r in travel.rules()]


def test_a_rule_defines_the_bundled_constraint_type_on_first_use(tmp_path: Path) -> None:
    from tests.conftest import define_travel

    mem = Memory.open(tmp_path / "m", embedder=HashEmbedder(), vector_index=ExactIndex())
    try:
        define_travel(mem)
        seq = mem.last_seq()
        with pytest.raises(SchemaError, match="Nope"):  # refused: no Constraint type either
            mem.define_rule({"name": "r", "trigger": {"type": "Trip"},
                             "condition": "sum(Nope.cost via includes) > budget"})
        assert mem.last_seq() == seq and "Constraint" not in [t.name for t in mem.types()]
        mem.define_rule({"name": "r", "trigger": {"type": "Trip"},
                         "condition": "sum(Poi.cost via includes) > budget"})
        assert mem.get_type("Constraint").version == 1
        trip = mem.create("Trip", {"destination": "Rome", "budget": 10})
        mem.link(trip.id, "includes", mem.create("Poi", {"name": "a", "city": "b",
                                                         "cost": 20}).id)
        assert [c.data.subject for c in mem.open_constraints().items] == [trip.id]
    finally:
        mem.close()


def test_good_rule_forms_compile(travel: Memory) -> None:
    conditions = {
        "many": "count(PointOfInterest via includes) >= 2",
        "poorly_rated": "avg(PointOfInterest.rating via includes) < 3.5",
        "late_visit": "max(PointOfInterest.visit_date via includes) > end_date",
        "arith": "-(budget - 2 * sum(PointOfInterest.estimated_cost via includes)) / 4 > 1",
        "unrated": "count(PointOfInterest.rating via includes) == 0",
    }
    for name, condition in conditions.items():
        travel.define_rule(_rule(condition, name=name))
    t = trip(travel, budget=10, end_date="2024-05-03")
    travel.link(t.id, "includes", poi(travel, "Tower", 20, visit_date="2024-05-04").id)
    status = {rule: c["status"] for rule, c in constraints(travel, t.id).items()}
    # arith: -(10 - 40) / 4 = 7.5 > 1; unrated: no rating; late: 05-04 > 05-03; avg(NULL): no
    assert status == {"arith": "open", "late_visit": "open", "unrated": "open",
                      BUDGET: "open"}


def test_open_constraints_queue_and_suggestions(travel: Memory) -> None:
    t1, t2 = trip(travel, budget=10), trip(travel, budget=10, destination="Beijing")
    for t in (t1, t2):
        travel.link(t.id, "includes", poi(travel, f"Tower {t.id}", 60).id)
    queue = travel.open_constraints(limit=1)
    assert len(queue.items) == 1 and queue.next_cursor
    rest = travel.open_constraints(limit=1, cursor=queue.next_cursor)
    ids = [queue.items[0].id, rest.items[0].id]
    assert sorted(ids) == sorted(c["id"] for t in (t1, t2)
                                 for c in constraints(travel, t.id).values())
    assert [e.id for e in travel.open_constraints({"subject": t2.id}).items] == [
        constraints(travel, t2.id)[BUDGET]["id"]]
    cid = ids[0]
    s = travel.create("Suggestion", {"constraint": cid, "text": "drop the tower",
                                     "source": "planner"})
    travel.link(s.id, "addresses", cid)
    assert [r.entity.id for r in travel.related(cid, "addresses", direction="in")] == [s.id]
    with pytest.raises(DMFError):
        travel.open_constraints({"colour": "red"})


def test_rule_writes_do_not_trigger_rules(travel: Memory) -> None:
    # a rule on Constraint itself: were rule writes to trigger rules, it would feed on its own
    # constraints forever; a write hook's own writes never run the hooks again
    travel.define_rule({"name": "watch_constraints", "trigger": {"type": "Constraint"},
                        "condition": "observed > -1", "action": {"kind": "other"}})
    t = trip(travel, budget=10)
    travel.link(t.id, "includes", poi(travel, "Tower", 60).id)
    budget = constraints(travel, t.id)[BUDGET]
    assert constraints(travel, budget["id"]) == {}  # created by a rule: no rule ran on it
    travel.update(budget["id"], {"message": "seen by the agent"})  # a user write: rules run
    meta = constraints(travel, budget["id"])["watch_constraints"]
    assert meta["status"] == "open"
    assert constraints(travel, meta["id"]) == {}
    assert [m["rule"] for m in rule_events(travel)] == [BUDGET, "watch_constraints"]


def test_a_new_rule_back_fills_existing_entities(travel: Memory) -> None:
    over = trip(travel, budget=100, destination="Rome")
    fine = trip(travel, budget=500, destination="Oslo")
    for t in (over, fine):
        travel.link(t.id, "includes", poi(travel, f"Tower {t.data.destination}", 150).id)
    budget_rule = next(r for r in travel.rules() if r.name == BUDGET)
    stricter = budget_rule.model_dump(exclude={"version", "dependencies"})
    stricter["name"] = "trip_tight_budget"
    stricter["condition"] = "sum(PointOfInterest.estimated_cost via includes) > budget * 0.2"
    assert constraints(travel, over.id).get("trip_tight_budget") is None
    travel.define_rule(stricter)  # written before the rule existed: both trips are flagged
    assert constraints(travel, over.id)["trip_tight_budget"]["status"] == "open"
    assert constraints(travel, fine.id)["trip_tight_budget"]["status"] == "open"
    seq = travel.last_seq()
    travel.define_rule(stricter)  # the same definition again: nothing happens
    assert travel.last_seq() == seq
    # a new version that no longer flags the cheaper trip resolves its constraint
    travel.define_rule({**stricter,
                        "condition": "sum(PointOfInterest.estimated_cost via includes) > budget"})
    assert constraints(travel, over.id)["trip_tight_budget"]["status"] == "open"
    assert constraints(travel, fine.id)["trip_tight_budget"]["status"] == "resolved"
    outcomes = sorted((m["entity_id"], m["outcome"]) for m in rule_events(travel, seq))
    assert outcomes == sorted([(fine.id, "resolved"), (over.id, "updated")])  # new message
