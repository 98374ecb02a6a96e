"""The operation table agrees with the MemoryAPI methods it names, and drives the tools."""

from __future__ import annotations

import inspect

import pytest

from dmf_hybrid import MemoryAPI
from dmf_hybrid._internal.api.auth import Role
from dmf_hybrid._internal.api.routes.plans import plan_role
from dmf_hybrid._internal.api.routes.tools import tool_role
from dmf_hybrid._internal.plans import MUTATING_OPS, OPERATIONS, READ_OPS
from dmf_hybrid._internal.tools import tool_operation


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_argument_fills_a_parameter_with_its_default(name: str) -> None:
    op = OPERATIONS[name]
    params = inspect.signature(getattr(MemoryAPI, op.method)).parameters
    for arg in op.args:
        assert arg.parameter in params, f"{name}.{arg.name}"
        param = params[arg.parameter]
        if not arg.required:  # a plan may require what the method leaves optional (text)
            assert param.default == arg.default, f"{name}.{arg.name}"
    audit = {"actor", "reason", "trace_id"}
    assert (audit <= set(params)) == op.writes
    required = {p.name for p in params.values()
                if p.default is inspect.Parameter.empty and p.name != "self"}
    assert required <= {a.parameter for a in op.args if a.required}


def test_roles_come_from_the_table() -> None:
    assert set(MUTATING_OPS) | set(READ_OPS) == set(OPERATIONS)
    assert set(MUTATING_OPS) == {"create", "update", "append", "delete", "restore", "link",
                                 "unlink", "add_messages"}
    assert plan_role([{"op": "get", "id": "x"}, {"op": "search"}]) is Role.READER
    assert plan_role([{"op": "get"}, {"op": "link"}]) is Role.WRITER
    assert plan_role([{"op": "nonsense"}]) is Role.WRITER  # unknown: the strictest role
    assert tool_role("search_Poi", {}) is Role.READER
    assert tool_role("create_Poi", {}) is Role.WRITER
    assert tool_role("history", {}) is Role.READER and tool_role("context", {}) is Role.READER
    assert tool_role("execute_plan", {"ops": [{"op": "query"}]}) is Role.READER
    assert tool_operation("query_Trip") == "query" and tool_operation("context") is None
