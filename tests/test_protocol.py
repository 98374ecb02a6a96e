"""Both front doors implement MemoryAPI exactly: same names, full signatures, return types."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest

from dmf_hybrid import Memory, MemoryAPI, MemoryClient

#: Memory members that cannot cross HTTP (the protocol's docstring names them).
EMBEDDED_ONLY = {"open", "for_tenant", "transaction", "restore_snapshot", "engine", "reads",
                 "import_bundle",
                 "sweep_every_tenant"}
#: The client's own additions: the service's health checks, whether it asks for its seq.
CLIENT_ONLY = {"health", "readiness", "read_your_writes"}


def members(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def protocol_members() -> set[str]:
    return {n for n in vars(MemoryAPI) if not n.startswith("_")}


def signature(cls: type, name: str) -> tuple[list[tuple[str, Any, Any, Any]], Any]:
    """Parameters (name, kind, default, resolved annotation) and resolved return type."""
    member = inspect.getattr_static(cls, name)
    func = member.fget if isinstance(member, property) else getattr(cls, name)
    hints = typing.get_type_hints(func)
    params = [(p.name, p.kind, p.default, hints.get(p.name))
              for p in inspect.signature(func).parameters.values() if p.name != "self"]
    return params, hints.get("return")


def test_the_protocol_is_every_shared_method() -> None:
    shared = protocol_members()
    assert members(Memory) - shared == EMBEDDED_ONLY
    assert members(MemoryClient) - shared == CLIENT_ONLY
    assert shared <= members(Memory) and shared <= members(MemoryClient)


@pytest.mark.parametrize("door", [Memory, MemoryClient], ids=["Memory", "MemoryClient"])
@pytest.mark.parametrize("name", sorted(protocol_members()))
def test_full_signature_and_return_type(door: type, name: str) -> None:
    expected = signature(MemoryAPI, name)
    assert signature(door, name) == expected
    assert expected[1] is not None, f"MemoryAPI.{name} has no return annotation"
    assert expected[1] is not Any, f"MemoryAPI.{name} returns Any"


@pytest.mark.parametrize("name", sorted(protocol_members()))
def test_each_docstring_lives_in_the_protocol(name: str) -> None:
    assert inspect.getdoc(getattr(MemoryAPI, name)), f"MemoryAPI.{name} has no docstring"
    for door in (Memory, MemoryClient):
        member = inspect.getattr_static(door, name)
        func = member.fget if isinstance(member, property) else member
        # none written twice: absent, or the protocol's own string (core._documented_by)
        assert func.__doc__ is None or func.__doc__ is getattr(MemoryAPI, name).__doc__, \
            f"{door.__name__}.{name} repeats the docstring"
        assert inspect.getdoc(getattr(door, name)) == inspect.getdoc(getattr(MemoryAPI, name))


def test_both_doors_are_memory_apis() -> None:
    # statically, mypy checks each override and the ``_CONTRACT: type[MemoryAPI]`` assignments
    assert MemoryAPI in Memory.__mro__ and MemoryAPI in MemoryClient.__mro__
