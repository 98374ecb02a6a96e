"""MemoryClient keeps the promise of the README: Memory's methods, with Memory's arguments."""

from __future__ import annotations

import inspect

import pytest

from dmf_hybrid import Memory
from dmf_hybrid.client import MemoryClient
from tests.api.conftest import Front

#: Memory members that cannot cross HTTP (the README says so in one line).
EMBEDDED_ONLY = {"open", "for_tenant", "transaction", "restore_snapshot", "engine"}
#: The client's own additions: the service's health checks.
CLIENT_ONLY = {"health", "readiness"}
#: Arguments that differ on purpose: the server chooses the directory, the client a name.
NAME_NOT_PATH = {"snapshot"}


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_client_has_every_memory_method() -> None:
    assert public(Memory) - public(MemoryClient) == EMBEDDED_ONLY
    assert public(MemoryClient) - public(Memory) == CLIENT_ONLY


@pytest.mark.parametrize("name", sorted(public(Memory) - EMBEDDED_ONLY - NAME_NOT_PATH))
def test_same_arguments_and_return_types(name: str) -> None:
    ours, theirs = getattr(MemoryClient, name), getattr(Memory, name)
    if isinstance(theirs, property):
        assert isinstance(ours, property)
        return
    expected = [(p.name, p.kind, p.default) for p in inspect.signature(theirs).parameters.values()]
    got = [(p.name, p.kind, p.default) for p in inspect.signature(ours).parameters.values()]
    assert got == expected
    returns = inspect.signature(theirs).return_annotation
    if returns != "Any":  # Memory.search answers Any only to keep its import lazy
        assert inspect.signature(ours).return_annotation == returns


def test_tool_calls_and_plans_carry_the_audit_context(api: Front) -> None:
    created = api.mem.call_tool("create_Poi", {"name": "Yu Garden", "city": "Shanghai"},
                                actor="agent", reason="the user asked", trace_id="t-7")
    plan = [{"op": "create", "type": "Trip", "data": {"destination": "Hangzhou"}}]
    done = api.mem.execute_plan(plan, actor="planner", reason="step 2", trace_id="t-8")
    assert api.embedded is not None
    for entity_id, expected in ((created["id"], ("agent", "the user asked", "t-7")),
                                (done["results"][0]["id"], ("planner", "step 2", "t-8"))):
        event = api.embedded.history(entity_id)[0]
        assert (event.actor, event.reason, event.trace_id) == expected
