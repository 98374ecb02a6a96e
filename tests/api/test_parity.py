"""Both front doors record the same audit context (signatures: tests/test_protocol.py)."""

from __future__ import annotations

from tests.doors import Front


def test_tool_calls_and_plans_carry_the_audit_context(api: Front) -> None:
    created = api.mem.call_tool("create_Poi",
                                {"data": {"name": "Yu Garden", "city": "Shanghai"}},
                                actor="agent", reason="the user asked", trace_id="t-7")
    plan = [{"op": "create", "type": "Trip", "data": {"destination": "Hangzhou"}}]
    done = api.mem.execute_plan(plan, actor="planner", reason="step 2", trace_id="t-8")
    assert api.embedded is not None
    for entity_id, expected in ((created["id"], ("agent", "the user asked", "t-7")),
                                (done.results[0]["id"], ("planner", "step 2", "t-8"))):
        event = api.embedded.history(entity_id)[0]
        assert (event.actor, event.reason, event.trace_id) == expected
