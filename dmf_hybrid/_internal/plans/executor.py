"""Running a plan: validate it, then execute every step inside one write transaction.

The transaction commits only when every step succeeds; a dry run always rolls it back (the
store's rollback hooks restore the audit seq counter and hash chain too). The diff is read
from the audit events the steps wrote, without times and hashes, so a dry run's diff equals
the diff of the real run that follows it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import MemoryCore
from ..errors import DMFError, LimitExceeded, NotFound, PlanError, VersionConflict
from ..models import AuditEvent, PlanOutcome
from ..operations import Problems, check_ops
from .ops import OPERATIONS, result_json
from .problems import similar_ids
from .refs import RefError, resolve
from .validation import Validator

log = logging.getLogger(__name__)


class _DryRun(Exception):
    """Raised inside the transaction to roll a dry run back."""


def validate_plan(mem: MemoryCore, ops: Any) -> list[dict[str, Any]]:
    """The problems of a plan (an empty list when it validates statically); writes nothing."""
    problems = _check_shape(mem, ops)
    if not problems:
        problems = Validator(mem, ops).run()
    return problems.items


def _check_shape(mem: MemoryCore, ops: Any) -> Problems:
    problems = Problems()
    try:
        ops = check_ops(ops)
    except PlanError as exc:  # not a list: the one problem (validate_plan lists, never raises)
        return Problems([dict(p) for p in exc.details["problems"]])
    if not ops:
        problems.add(None, "ops", "the plan has no steps")
    elif len(ops) > mem.settings.max_plan_ops:
        raise LimitExceeded(f"the plan has {len(ops)} steps; at most "
                            f"{mem.settings.max_plan_ops} are allowed (max_plan_ops)",
                            field="ops", limit=mem.settings.max_plan_ops)
    return problems


def execute_plan(mem: MemoryCore, ops: Any, *, dry_run: bool = False,
                 actor: str | None = None, reason: str | None = None,
                 trace_id: str | None = None) -> PlanOutcome:
    """Validate a plan, then run it in one transaction (committed unless ``dry_run``).

    Returns ``{"results": [...], "diff": [...], "committed": bool, "seq_range": [a, b] | None}``;
    raises PlanError (``details["problems"]``) when the plan is invalid, changing nothing.
    """
    problems = _check_shape(mem, ops)
    if not problems:
        problems = Validator(mem, ops).run()
    if problems:
        raise problems.error()
    for step in ops:  # load search mirrors outside the transaction (they must not see it)
        if step["op"] == "search":
            mem.engine.ensure_loaded(mem.get_type(step["type"]))
    outcome: PlanOutcome | None = None
    failure = Problems()
    seq0 = mem.last_seq()
    try:
        with mem.transaction():
            seq0 = mem.last_seq()
            results: list[Any] = []
            for i, step in enumerate(ops):
                try:
                    results.append(_run_step(mem, i, step, results, actor, reason, trace_id))
                except (DMFError, RefError) as exc:
                    failure.add(*_runtime_problem(mem, i, step, exc))
                    raise _DryRun from None
            last = mem.last_seq()
            events = mem.events(since_seq=seq0, until_seq=last, limit=max(last - seq0, 1))
            outcome = PlanOutcome(results=results, diff=[diff_entry(e) for e in events],
                                  committed=not dry_run,
                                  seq_range=[seq0 + 1, last] if last > seq0 else None)
            if dry_run:
                raise _DryRun
    except _DryRun:
        if failure:
            raise failure.error() from None
        if mem.last_seq() != seq0:  # the rollback hooks must have restored the counter
            log.error("dry run left the audit seq at %s (was %s)", mem.last_seq(), seq0)
    assert outcome is not None  # every way out without an outcome raises
    return outcome


def _run_step(mem: MemoryCore, i: int, step: Mapping[str, Any], results: Sequence[Any],
              actor: str | None, reason: str | None, trace_id: str | None) -> Any:
    args = {k: resolve(v, results) for k, v in step.items() if k != "op"}
    op = OPERATIONS[step["op"]]
    audit_reason = args.pop("reason", None) or reason
    call = {a.parameter: args.get(a.name, a.default) for a in op.args}
    if op.writes:
        call.update(actor=actor, reason=audit_reason, trace_id=trace_id)
    value = getattr(mem, op.method)(**call)
    if op.name == "link":
        value = {"linked": value, "from_id": args["from_id"], "relation": args["relation"],
                 "to_id": args["to_id"]}
    elif op.name == "unlink":
        value = {"unlinked": True, "seq": value}
    return result_json(op.name, value)


def _runtime_problem(mem: MemoryCore, i: int, step: Mapping[str, Any], exc: Exception
                     ) -> tuple[int, str | None, str, str | None]:
    if isinstance(exc, RefError):
        return i, None, str(exc), "an earlier result was shorter than the plan assumed"
    assert isinstance(exc, DMFError)
    fld = exc.details.get("field")
    fld = {"entity_id": "id"}.get(fld, fld) if isinstance(fld, str) else None
    hint = None
    if isinstance(exc, VersionConflict):
        fld, hint = "expected_version", (f"use expected_version="
                                         f"{exc.details.get('current_version')} (or omit it)")
    elif isinstance(exc, NotFound):
        fld = fld or next((a for a in ("id", "from_id", "to_id") if a in step), None)
        hint = similar_ids(mem, exc.details.get("entity_id") or step.get(fld or "id"))
    return i, fld, exc.message, hint


def diff_entry(event: AuditEvent) -> dict[str, Any]:
    """What one audit event changed, without times or hashes (so a dry run compares equal)."""
    entry: dict[str, Any] = {"seq": event.seq, "op": event.op, "type": event.type,
                             "id": event.entity_id}
    if event.op in ("link", "unlink"):
        meta = event.meta or {}
        entry.update({"relation": meta.get("relation"), "to_id": meta.get("to")})
        return entry
    entry["version"] = [event.version_before, event.version_after]
    before = (event.before or {}).get("data") or {}
    after = (event.after or {}).get("data") or {}
    entry["changes"] = {name: [before.get(name), after.get(name)]
                        for name in sorted(set(before) | set(after))
                        if before.get(name) != after.get(name)}
    return entry
