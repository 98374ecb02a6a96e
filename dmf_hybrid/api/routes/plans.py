"""Plans: validate, dry-run or execute an agent's list of operations in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ...memory import Memory
from ...plans import MUTATING_OPS, validate_plan
from ..auth import Role
from ..deps import Audit, Caller, State

router = APIRouter(prefix="/plans", tags=["plans"])

OPS_DOC = ('Steps like {"op": "create", "type": "Trip", "data": {...}}; a later step may use '
           'an earlier result through "$0.id" or "$2.hits[0].entity.id".')


class PlanRequest(BaseModel):
    """A plan: its steps, and whether to only show the diff it would make."""

    model_config = ConfigDict(extra="forbid")

    ops: list[dict[str, Any]] = Field(description=OPS_DOC)
    dry_run: bool = Field(False, description="Roll back after running; return the diff.")


class PlanSteps(BaseModel):
    """A plan to validate or dry-run."""

    model_config = ConfigDict(extra="forbid")

    ops: list[dict[str, Any]] = Field(description=OPS_DOC)


class PlanProblem(BaseModel):
    """One problem of an invalid plan: which step and argument, what is wrong, what exists."""

    step: int | None
    field: str | None
    problem: str
    hint: str | None = None


class PlanValidation(BaseModel):
    """Whether a plan validates statically, and every problem found."""

    valid: bool
    problems: list[PlanProblem]


class PlanResult(BaseModel):
    """Per-step results, the diff (audit events without times), commit flag and seq range."""

    results: list[Any]
    diff: list[dict[str, Any]]
    committed: bool
    seq_range: list[int] | None = None


def plan_role(ops: Sequence[Any]) -> Role:
    """The role a plan needs: writer if any step writes, reader otherwise."""
    writes = any(not isinstance(s, dict) or s.get("op") in MUTATING_OPS for s in ops)
    return Role.WRITER if writes else Role.READER


def _memory(state: State, caller: Caller, role: Role) -> Memory:
    caller.require(role)
    return state.memory.for_tenant(caller.tenant)


@router.post("/validate")
def validate(body: PlanSteps, state: State, caller: Caller) -> PlanValidation:
    """Check a plan against the schema and current state without running it."""
    problems = validate_plan(_memory(state, caller, Role.READER), body.ops)
    return PlanValidation(valid=not problems,
                          problems=[PlanProblem.model_validate(p) for p in problems])


@router.post("/dry-run")
def dry_run(body: PlanSteps, state: State, caller: Caller, audit: Audit) -> PlanResult:
    """Run a plan and roll it back: the results and the diff it would make (422 if invalid)."""
    memory = _memory(state, caller, plan_role(body.ops))
    return PlanResult.model_validate(memory.execute_plan(body.ops, dry_run=True,
                                                         **audit.kwargs()))


@router.post("/execute")
def execute(body: PlanRequest, state: State, caller: Caller, audit: Audit) -> PlanResult:
    """Validate a plan, then commit all of it in one transaction (422 plan_error if invalid)."""
    memory = _memory(state, caller, plan_role(body.ops))
    return PlanResult.model_validate(memory.execute_plan(body.ops, dry_run=body.dry_run,
                                                         **audit.kwargs()))
