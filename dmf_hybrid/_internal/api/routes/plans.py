"""Plans: validate, dry-run or execute an agent's list of operations in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter

from ...memory import Memory
from ...models import PlanOutcome
from ...operations import PlanRequest, PlanSteps
from ...plans import OPERATIONS, validate_plan
from ...wire import PlanProblem, PlanValidation
from ..auth import Role
from ..deps import Audit, Caller, State, tenant_memory

router = APIRouter(prefix="/plans", tags=["plans"])

def plan_role(ops: Sequence[Any]) -> Role:
    """The role a plan needs: writer if any step writes (or is unknown), reader otherwise."""
    def reads_only(step: Any) -> bool:
        name = step.get("op") if isinstance(step, dict) else None
        op = OPERATIONS.get(name) if isinstance(name, str) else None
        return op is not None and not op.writes

    return Role.READER if all(reads_only(s) for s in ops) else Role.WRITER


def _memory(state: State, caller: Caller, role: Role) -> Memory:
    return tenant_memory(state, caller, role)


@router.post("/validate")
def validate(body: PlanSteps, state: State, caller: Caller) -> PlanValidation:
    """Check a plan against the schema and current state without running it."""
    problems = validate_plan(_memory(state, caller, Role.READER), body.ops)
    return PlanValidation(valid=not problems,
                          problems=[PlanProblem.model_validate(p) for p in problems])


@router.post("/dry-run")
def dry_run(body: PlanSteps, state: State, caller: Caller, audit: Audit) -> PlanOutcome:
    """Run a plan and roll it back: the results and the diff it would make (422 if invalid)."""
    memory = _memory(state, caller, plan_role(body.ops))
    return memory.execute_plan(body.ops, dry_run=True, **audit.kwargs())


@router.post("/execute")
def execute(body: PlanRequest, state: State, caller: Caller, audit: Audit) -> PlanOutcome:
    """Validate a plan, then commit all of it in one transaction (422 plan_error if invalid)."""
    memory = _memory(state, caller, plan_role(body.ops))
    return memory.execute_plan(body.ops, dry_run=body.dry_run, **audit.kwargs())
